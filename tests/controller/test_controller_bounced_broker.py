"""A broker that died and registered again between two of the controller's views (a new broker epoch, the czxid of
/brokers/ids/<id>) is handled as Kafka 2.8's KafkaController.processBrokerChange handles its bouncedBrokerIds:
onBrokerFailure first (its leaderships move to other ISR members, it leaves the ISRs, leader epoch + 1), then
onBrokerStartup. Without it a broker SIGKILLed and restarted within one view resumed leading at its old leader
epoch (seen in host mode, where a whole server's brokers restart at once). On the embedded metadata store."""
from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from kbroker.controller.controller import Controller
from kbroker.controller.zookeeper_mode import ZooKeeperParts
from kbroker.metadata.zk_view import LiveBroker, Snapshot
from tests.controller.controller_views import active_controller, with_topic_states
from zk_compat import layout
from zk_compat.store import MetadataStore
from zk_compat.znodes import PartitionState

# partition -> (replicas, leader, isr)
LAYOUT = {0: ([3, 1, 2], 3, [3, 1, 2]),   # led by 3: 1 takes over
          1: ([1, 3, 2], 1, [1, 3, 2]),   # 3 follows: it leaves the ISR
          2: ([3, 2, 1], 3, [3]),         # 3 alone in sync: offline, then 3 again once it counts as started
          3: ([2, 1, 3], 2, [2, 1])}      # 3 not in sync: untouched


def _view(store: MetadataStore, epochs: dict[int, int], controller_id: int = 1) -> Snapshot:
    snap = Snapshot(controller_id=controller_id)
    snap.brokers = {b: LiveBroker(b, "127.0.0.1", 9092 + b, None, epoch=e) for b, e in epochs.items()}
    with_topic_states(store, snap, LAYOUT)
    return snap


def _parts(ctl: Controller, synced: list[list[int]]) -> ZooKeeperParts:
    """ZooKeeperParts around ``ctl`` whose channel records the live brokers of each view it is synced with."""
    async def run_blocking(fn: Callable[[], Any]) -> Any:
        return fn()

    channel = SimpleNamespace(sync=lambda snap, epoch: synced.append(sorted(snap.brokers)),
                              ask_again=lambda brokers: None, stop=lambda: None)
    return ZooKeeperParts(controller=ctl, cluster=SimpleNamespace(run_blocking=run_blocking),  # type: ignore[arg-type]
                          metadata=None, channel=channel, session=None)  # type: ignore[arg-type]


def _states(store: MetadataStore) -> dict[int, tuple[int, int, list[int]]]:
    out = {}
    for p in LAYOUT:
        found = layout.get_partition_state(store, "t", p)
        assert found is not None
        out[p] = (found[0].leader, found[0].leader_epoch, list(found[0].isr))
    return out


def test_a_bounced_leader_loses_its_leaderships_then_comes_back_as_a_new_broker(store: MetadataStore) -> None:
    ctl = active_controller(store, LAYOUT)
    ctl.on_snapshot(_view(store, {1: 101, 2: 102, 3: 103}))
    assert _states(store) == {0: (3, 0, [3, 1, 2]), 1: (1, 0, [1, 3, 2]), 2: (3, 0, [3]), 3: (2, 0, [2, 1])}

    bounced = _view(store, {1: 101, 2: 102, 3: 203})  # broker 3 registered again: a new czxid
    ctl.on_snapshot(bounced)
    assert _states(store) == {0: (1, 1, [1, 2]), 1: (1, 1, [1, 2]), 2: (-1, 1, [3]), 3: (2, 0, [2, 1])}
    assert sorted(ctl.without_bounced(bounced).brokers) == [1, 2]  # the channel sees it gone in this view

    ctl.on_snapshot(_view(store, {1: 101, 2: 102, 3: 203}))  # the next view: broker 3 started
    assert _states(store) == {0: (1, 1, [1, 2]), 1: (1, 1, [1, 2]), 2: (3, 2, [3]), 3: (2, 0, [2, 1])}
    assert ctl.bounced == set()

    # a new controller takes the live brokers as it finds them (onControllerFailover): an epoch it never saw
    # is no bounce
    store.delete("/controller")
    successor = Controller(store, 2)
    successor.on_snapshot(Snapshot(controller_id=None))
    assert successor.active
    successor.on_snapshot(_view(store, {1: 101, 2: 102, 3: 303}, controller_id=2))
    assert _states(store) == {0: (1, 1, [1, 2]), 1: (1, 1, [1, 2]), 2: (3, 2, [3]), 3: (2, 0, [2, 1])}


def test_a_bounced_broker_holding_nothing_is_live_at_once(store: MetadataStore) -> None:
    """No partition of its changed, so no further view would come to bring it back: it stays in this one."""
    layout.create_topic(store, "t", {p: replicas for p, (replicas, _, _) in LAYOUT.items()})
    ctl = Controller(store, 1)
    ctl.on_snapshot(Snapshot(controller_id=None))
    for p, (_, leader, isr) in LAYOUT.items():
        layout.create_partition_state(store, "t", p, PartitionState(leader, 0, [r for r in isr if r != 4], ctl.epoch))
    ctl.on_snapshot(_view(store, {1: 101, 2: 102, 3: 103, 4: 104}))
    view = _view(store, {1: 101, 2: 102, 3: 103, 4: 204})
    ctl.on_snapshot(view)
    assert sorted(ctl.without_bounced(view).brokers) == [1, 2, 3, 4]


def test_the_channel_is_synced_without_the_bounced_broker(store: MetadataStore) -> None:
    """ZooKeeperParts hands the channel the view without it, so it is never sent its old leadership."""
    ctl = active_controller(store, LAYOUT)
    synced: list[list[int]] = []
    parts = _parts(ctl, synced)
    asyncio.run(parts.on_snapshot(_view(store, {1: 101, 2: 102, 3: 103})))
    asyncio.run(parts.on_snapshot(_view(store, {1: 101, 2: 102, 3: 203})))
    asyncio.run(parts.on_snapshot(_view(store, {1: 101, 2: 102, 3: 203})))
    assert synced == [[1, 2, 3], [1, 2], [1, 2, 3]]


def test_the_view_that_elected_the_controller_is_not_sent(store: MetadataStore) -> None:
    """The view in which a broker wins /controller was read before it was controller: a broker that registered
    meanwhile is missing from it, and followers told their leader is not live fetch from no one. The channel
    starts from the next view (the /controller watch brings it)."""
    layout.create_topic(store, "t", {p: replicas for p, (replicas, _, _) in LAYOUT.items()})
    ctl = Controller(store, 1)
    synced: list[list[int]] = []
    parts = _parts(ctl, synced)
    electing = Snapshot(controller_id=None)
    electing.brokers = {b: LiveBroker(b, "127.0.0.1", 9092 + b, None, epoch=b) for b in (1, 3)}
    asyncio.run(parts.on_snapshot(electing))
    assert ctl.active and synced == []
    after = Snapshot(controller_id=1, assignments={"t": {p: r for p, (r, _, _) in LAYOUT.items()}})
    after.brokers = {b: LiveBroker(b, "127.0.0.1", 9092 + b, None, epoch=b) for b in (1, 2, 3)}
    asyncio.run(parts.on_snapshot(after))
    assert synced == [[1, 2, 3]]
