"""The controller's side of a failed log dir (KIP-112), on the embedded metadata store: the notice is read and
deleted (fenced by the controller epoch), the broker is asked again, the replicas it answers KAFKA_STORAGE_ERROR
for lose their leadership and their ISR seat (Kafka's onReplicasBecomeOffline), are never elected again, and
UpdateMetadata lists them in offline_replicas."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from kbroker.controller.channel import ControllerChannel
from kbroker.controller.controller import Controller
from kbroker.metadata.zk_view import LiveBroker, Snapshot
from tests.controller.controller_views import active_controller, with_topic_states
from zk_compat import layout
from zk_compat.layout import ControllerMovedError
from zk_compat.znodes import LogDirEventNotificationZNode, PartitionState

KAFKA_STORAGE_ERROR = 56
# partition -> (replicas, leader, isr); broker 3's dir holds partitions 0-3, not 4
LAYOUT = {0: ([3, 1, 2], 3, [3, 1, 2]),   # led by 3: 1 takes over
          1: ([1, 3, 2], 1, [1, 3, 2]),   # 3 follows: it leaves the ISR
          2: ([3, 2, 1], 3, [3]),         # 3 is the only one in sync: no leader
          3: ([2, 3, 1], 2, [2, 1]),      # 3 already out of the ISR: nothing to write
          4: ([3, 1, 2], 3, [3, 1, 2])}   # 3 answers no error: it stays leader


def _snapshot(store, controller_id: int = 1) -> Snapshot:
    snap = Snapshot(controller_id=controller_id)
    snap.brokers = {b: LiveBroker(b, "127.0.0.1", 1, None, epoch=b) for b in (1, 2, 3)}
    with_topic_states(store, snap, LAYOUT)
    snap.log_dir_events = sorted(store.get_children(LogDirEventNotificationZNode.path()))
    return snap


def _answer(broker_id: int, errors: dict[int, int], channel: ControllerChannel) -> None:
    channel.partition_errors(broker_id, [SimpleNamespace(topic_name="t", partition_index=p, error_code=code)
                                         for p, code in errors.items()])


def _state(store, p: int) -> PartitionState:
    found = layout.get_partition_state(store, "t", p)
    assert found is not None
    return found[0]


def test_notice_read_deleted_and_the_broker_asked_again(store):
    ctl = active_controller(store, LAYOUT)
    path = layout.create_log_dir_event_notification(store, 3)
    assert path == "/log_dir_event_notification/log_dir_event_0000000000"
    assert store.get(path)[0] == b'{"version":1,"broker":3,"event":1}'
    ctl.on_snapshot(_snapshot(store))
    assert store.get_children(LogDirEventNotificationZNode.path()) == []
    assert ctl.take_log_dir_failures() == {3}
    assert ctl.take_log_dir_failures() == set()  # taken once
    assert [_state(store, p).leader for p in LAYOUT] == [3, 1, 3, 2, 3]  # nothing moves before the answer


def test_a_notice_of_a_dead_broker_or_unreadable_is_deleted_and_ignored(store):
    ctl = active_controller(store, LAYOUT)
    layout.create_log_dir_event_notification(store, 9)
    store.create("/log_dir_event_notification/log_dir_event_", b"not json", sequence=True)
    ctl.on_snapshot(_snapshot(store))
    assert store.get_children(LogDirEventNotificationZNode.path()) == []
    assert ctl.take_log_dir_failures() == set()


def test_offline_replicas_move_off_the_broker(store):
    ctl = active_controller(store, LAYOUT)
    woken = []
    channel = ControllerChannel(1, 30000, ctl.offline_replicas, lambda: woken.append(1))
    _answer(3, {0: KAFKA_STORAGE_ERROR, 1: KAFKA_STORAGE_ERROR, 2: KAFKA_STORAGE_ERROR, 3: KAFKA_STORAGE_ERROR,
                4: 0}, channel)
    assert woken == [1]
    _answer(3, {0: KAFKA_STORAGE_ERROR}, channel)  # nothing new: the controller is not woken again
    assert woken == [1]
    assert ctl.on_snapshot(_snapshot(store))
    states = {p: _state(store, p) for p in LAYOUT}
    assert (states[0].leader, states[0].isr, states[0].leader_epoch) == (1, [1, 2], 1)
    assert (states[1].leader, states[1].isr, states[1].leader_epoch) == (1, [1, 2], 1)
    assert (states[2].leader, states[2].isr, states[2].leader_epoch) == (-1, [3], 1)  # the last ISR member stays
    assert (states[3].leader, states[3].isr, states[3].leader_epoch) == (2, [2, 1], 0)
    assert (states[4].leader, states[4].isr, states[4].leader_epoch) == (3, [3, 1, 2], 0)
    # partition 2 stays offline: its only in-sync replica is on the failed dir, never elected again
    assert not ctl.on_snapshot(_snapshot(store))
    assert _state(store, 2).leader == -1


def test_unclean_election_takes_an_online_replica_never_the_offline_one(store):
    ctl = active_controller(store, LAYOUT)
    ctl.follow_unclean_default(True)
    channel = ControllerChannel(1, 30000, ctl.offline_replicas)
    _answer(3, {2: KAFKA_STORAGE_ERROR}, channel)
    ctl.on_snapshot(_snapshot(store))
    state = _state(store, 2)
    assert (state.leader, state.isr) == (2, [2])


def test_update_metadata_lists_replicas_on_offline_dirs():
    async def run() -> list[dict]:
        channel = ControllerChannel(1, 30000)
        channel.partition_errors(3, [SimpleNamespace(topic_name="t", partition_index=0,
                                                     error_code=KAFKA_STORAGE_ERROR)])
        snap = Snapshot(controller_id=1)
        snap.brokers = {b: LiveBroker(b, "127.0.0.1", 1, None, epoch=b) for b in (1, 2)}  # 2 live here, 3 too
        snap.brokers[3] = LiveBroker(3, "127.0.0.1", 1, None, epoch=3)
        snap.assignments = {"t": {0: [3, 1, 2], 1: [3, 1, 2]}}
        snap.states = {("t", p): PartitionState(1, 1, [1, 2], 1) for p in (0, 1)}
        channel.sync(snap, 1)
        parts = channel.update_metadata(channel.metadata_keys, [])["topic_states"][0]["partition_states"]
        channel.stop()
        return parts
    parts = asyncio.run(run())
    assert [p["offline_replicas"] for p in parts] == [[3], []]


def test_a_broker_that_registers_again_is_asked_afresh():
    async def run() -> tuple[dict, dict]:
        channel = ControllerChannel(1, 30000)
        channel.partition_errors(3, [SimpleNamespace(topic_name="t", partition_index=0,
                                                     error_code=KAFKA_STORAGE_ERROR)])
        snap = Snapshot(controller_id=1)
        snap.brokers = {3: LiveBroker(3, "127.0.0.1", 1, None, epoch=3)}
        channel.sync(snap, 1)
        before = channel.offline.view()
        snap.brokers = {3: LiveBroker(3, "127.0.0.1", 1, None, epoch=4)}  # restarted: a new registration
        channel.sync(snap, 1)
        after = channel.offline.view()
        channel.stop()
        return before, after
    before, after = asyncio.run(run())
    assert before == {3: frozenset({("t", 0)})}
    assert after == {}


def test_followers_are_told_again_once_their_leader_is_live():
    """A LeaderAndIsr naming a leader that is not live carries no address for it, so its followers fetch from no
    one. When the leader registers (a restarted broker seen after the controller read its partitions' states),
    the followers get the partition again with the leader among live_leaders; else they never fetch from it and
    the ISR never grows back (a chaos run: acks=all producers waited for good)."""
    class Peer:
        def __init__(self) -> None:
            self.leader_and_isr: list[dict] = []

        async def request(self, api_key: int, version: int, body: dict) -> SimpleNamespace:
            if api_key == 4:
                self.leader_and_isr.append(body)
            return SimpleNamespace(error_code=0, partition_errors=[])

        def close(self) -> None:
            pass

    async def sent_after(snap: Snapshot, channel: ControllerChannel, peer: Peer, count: int) -> None:
        channel.sync(snap, 1)
        channel.channels[3].connection = peer  # type: ignore[assignment]
        for _ in range(200):
            await asyncio.sleep(0.005)
            if len(peer.leader_and_isr) >= count:
                return

    async def run() -> list[dict]:
        channel = ControllerChannel(1, 30000)
        peer = Peer()
        snap = Snapshot(controller_id=1)
        snap.brokers = {3: LiveBroker(3, "127.0.0.1", 3, None, epoch=3)}  # leader 2 not registered yet
        snap.assignments = {"t": {0: [2, 3]}}
        snap.states = {("t", 0): PartitionState(2, 4, [2], 1)}
        await sent_after(snap, channel, peer, 1)
        snap.brokers = {**snap.brokers, 2: LiveBroker(2, "127.0.0.1", 2, None, epoch=9)}
        await sent_after(snap, channel, peer, 2)
        await asyncio.sleep(0.05)
        channel.stop()
        return peer.leader_and_isr
    sent = asyncio.run(run())
    assert [body["live_leaders"] for body in sent] == [[], [{"broker_id": 2, "host_name": "127.0.0.1", "port": 2}]]
    assert all(body["topic_states"][0]["partition_states"][0]["leader"] == 2 for body in sent)


def test_deleting_notices_is_fenced_by_the_controller_epoch(store):
    active_controller(store, LAYOUT)
    path = layout.create_log_dir_event_notification(store, 3)
    name = path.rsplit("/", 1)[1]
    with pytest.raises(ControllerMovedError):
        layout.delete_log_dir_event_notifications(store, [name], controller_epoch_zk_version=99)
    assert store.get_children(LogDirEventNotificationZNode.path()) == [name]
    _, stat = layout.get_controller_epoch(store)
    layout.delete_log_dir_event_notifications(store, [name, "log_dir_event_0000000099"],
                                              controller_epoch_zk_version=stat.version)
    assert store.get_children(LogDirEventNotificationZNode.path()) == []


def test_asking_again_survives_a_failed_send():
    """The resend of every replica after a log dir event is not lost when that send fails: the retry asks again."""
    class Peer:
        """The broker's end of the channel's connection: answers LeaderAndIsr with a storage error for t-0 once
        asked again; the first resend is lost (the connection drops)."""

        def __init__(self) -> None:
            self.sent: list[list[int]] = []
            self.drop_next = False

        async def request(self, api_key: int, version: int, body: dict) -> SimpleNamespace:
            if api_key != 4:
                return SimpleNamespace(error_code=0, partition_errors=[])
            parts = [p["partition_index"] for t in body["topic_states"] for p in t["partition_states"]]
            self.sent.append(parts)
            if self.drop_next:
                self.drop_next = False
                raise OSError("connection reset")
            code = KAFKA_STORAGE_ERROR if len(self.sent) > 1 else 0
            return SimpleNamespace(error_code=0, partition_errors=[
                SimpleNamespace(topic_name="t", partition_index=p, error_code=code if p == 0 else 0) for p in parts])

        def close(self) -> None:
            pass

    async def run() -> tuple[list[list[int]], dict]:
        channel = ControllerChannel(1, 30000)
        channel.backoff_s = 0.01
        snap = Snapshot(controller_id=1)
        snap.brokers = {3: LiveBroker(3, "127.0.0.1", 1, None, epoch=3)}
        snap.assignments = {"t": {0: [3, 1], 1: [3, 1]}}
        snap.states = {("t", p): PartitionState(3, 0, [3, 1], 1) for p in (0, 1)}
        peer = Peer()
        channel.sync(snap, 1)
        channel.channels[3].connection = peer  # type: ignore[assignment]
        for _ in range(100):
            await asyncio.sleep(0.01)
            if peer.sent:
                break
        peer.drop_next = True
        channel.ask_again([3])
        for _ in range(200):
            await asyncio.sleep(0.01)
            if channel.offline.view():
                break
        offline = channel.offline.view()
        channel.stop()
        return peer.sent, offline
    sent, offline = asyncio.run(run())
    assert sent[:3] == [[0, 1], [0, 1], [0, 1]]  # the first send, the lost resend, its retry
    assert offline == {3: frozenset({("t", 0)})}


def test_no_election_an_operator_asks_for_picks_an_offline_replica(store):
    from kbroker.controller import election, reassignment
    ctl = active_controller(store, LAYOUT)
    channel = ControllerChannel(1, 30000, ctl.offline_replicas)
    _answer(3, {2: KAFKA_STORAGE_ERROR}, channel)
    ctl.on_snapshot(_snapshot(store))
    assert (_state(store, 2).leader, _state(store, 2).isr) == (-1, [3])  # 3, preferred and in the ISR, is offline
    snap = _snapshot(store)
    assert reassignment.elect_preferred(ctl, snap, [("t", 2)]) == []
    [preferred] = election.elect_leaders(ctl, snap, [("t", 2)], election.PREFERRED).values()
    assert isinstance(preferred, election.Refusal) and preferred.code == 80  # PREFERRED_LEADER_NOT_AVAILABLE
    assert election.elect_leaders(ctl, snap, [("t", 2)], election.UNCLEAN) == {("t", 2): 2}
    assert (_state(store, 2).leader, _state(store, 2).isr) == (2, [2])


def test_a_new_partitions_first_leader_and_isr_says_is_new(store):
    """Kafka's NewReplica: the replicas of a partition the controller creates (and those a reassignment adds) are
    new in their first LeaderAndIsr only, so a broker with a failed dir makes a log for them and for no other."""
    class Recorder:
        def __init__(self) -> None:
            self.is_new: list[dict[int, bool]] = []

        async def request(self, api_key: int, version: int, body: dict) -> SimpleNamespace:
            if api_key == 4:
                self.is_new.append({p["partition_index"]: p["is_new"]
                                    for t in body["topic_states"] for p in t["partition_states"]})
            return SimpleNamespace(error_code=0, partition_errors=[])

        def close(self) -> None:
            pass

    layout.create_topic(store, "n", {0: [3, 1], 1: [1, 3]})
    ctl = Controller(store, 1)
    ctl.on_snapshot(Snapshot(controller_id=None))
    snap = Snapshot(controller_id=1)
    snap.brokers = {b: LiveBroker(b, "127.0.0.1", 1, None, epoch=b) for b in (1, 3)}
    snap.assignments = {"n": {0: [3, 1], 1: [1, 3]}}
    assert ctl.on_snapshot(snap)  # creates both partitions' states
    assert all(ctl.new_replicas.contains("n", p, b) for p in (0, 1) for b in (1, 3))

    async def run() -> list[dict[int, bool]]:
        channel = ControllerChannel(1, 30000, ctl.offline_replicas, new_replicas=ctl.new_replicas)
        for p in (0, 1):
            found = layout.get_partition_state(store, "n", p)
            assert found is not None
            snap.states[("n", p)], stat = found
            snap.state_versions[("n", p)] = stat.version
        peer = Recorder()
        channel.sync(snap, ctl.epoch)
        channel.channels[3].connection = peer  # type: ignore[assignment]
        channel.channels[1].connection = Recorder()  # type: ignore[assignment]
        for _ in range(100):
            await asyncio.sleep(0.01)
            if peer.is_new:
                break
        channel.ask_again([3])
        for _ in range(100):
            await asyncio.sleep(0.01)
            if len(peer.is_new) > 1:
                break
        channel.stop()
        return peer.is_new
    assert asyncio.run(run()) == [{0: True, 1: True}, {0: False, 1: False}]
