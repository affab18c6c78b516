"""The controller's requests to brokers (Kafka's ControllerChannelManager): LeaderAndIsr,
StopReplica and UpdateMetadata over the Kafka protocol.

After every view of the cluster the active controller works out what each live broker must know:
the state of every partition it holds a replica of (LeaderAndIsr), the partitions it no longer
holds (StopReplica with delete), and the cluster's metadata (UpdateMetadata: live brokers and
every partition's leader and ISR). One sender per broker sends what differs from what that
broker last acknowledged, in that order, one request at a time; a failed send is retried from a
fresh difference, so a broker that missed a request, restarted (new broker epoch) or answers a
new controller gets the whole picture again. LeaderAndIsr goes out when a partition's leader,
leader epoch or replicas change; ISR changes a leader made itself reach the others through
UpdateMetadata only, as in Kafka.

Failed log dirs (KIP-112): LeaderAndIsr's per-partition KAFKA_STORAGE_ERROR marks that replica offline
(``OfflineReplicas``, Kafka's ``processLeaderAndIsrResponseReceived``); a replica newly offline wakes the
controller, which moves it, and UpdateMetadata lists it in ``offline_replicas``. After a broker's log dir event the
controller has its whole LeaderAndIsr sent again (``ask_again``), as Kafka's ``onBrokerLogDirFailure`` does.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Any

from kbroker import errors
from kbroker.controller.offline_dirs import NewReplicas, OfflineReplicas
from kbroker.interbroker.client import BrokerConnection
from kbroker.metadata.zk_view import LiveBroker, Snapshot
from zk_compat.znodes import PartitionState

log = logging.getLogger(__name__)

LEADER_AND_ISR_VERSION = 4
STOP_REPLICA_VERSION = 2
UPDATE_METADATA_VERSION = 6

# A request body as the client's encoder takes it: field name -> value, nested as the schema nests.
Body = dict[str, Any]
# One partition's UpdateMetadata entry: leader, leader epoch, ISR, controller epoch, zkVersion, replicas, offline ones.
MetadataKey = tuple[int, int, tuple[int, ...], int, int, tuple[int, ...], tuple[int, ...]]
LEADER_DURING_DELETE = -2  # Kafka's LeaderAndIsr.LeaderDuringDelete: the broker drops the partition from its cache

# What LeaderAndIsr told a broker of one partition (leader, leader epoch, replicas, adding, removing, and the
# leader's address among the live leaders: None when it was not live).
ReplicaKey = tuple[int, int, tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[str, int] | None]


@dataclass(frozen=True)
class ReplicaState:
    """What one broker is told of one partition by LeaderAndIsr."""
    state: PartitionState
    zk_version: int
    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]
    # The leader's address when it is live. A follower told of a leader missing from live_leaders fetches from no
    # one (Kafka's makeFollowers); it is told again once the leader is live (a restarted leader registers after
    # the controller read its partitions' states), or it would never fetch from it.
    leader_at: tuple[str, int] | None = None

    @property
    def key(self) -> ReplicaKey:
        return (self.state.leader, self.state.leader_epoch, self.replicas, self.adding, self.removing,
                self.leader_at)


class BrokerChannel:
    def __init__(self, owner: ControllerChannel, target: LiveBroker) -> None:
        self.owner = owner
        self.target = target
        self.connection = BrokerConnection(target.host, target.port, f"controller-{owner.broker_id}",
                                           owner.timeout_s)
        self.desired: dict[tuple[str, int], ReplicaState] = {}
        self.acked: dict[tuple[str, int], ReplicaKey] = {}
        # what this broker acknowledged of the metadata: each partition's UpdateMetadata entry and the live brokers
        self.acked_metadata: dict[tuple[str, int], MetadataKey] = {}
        self.acked_brokers: object = None
        # LeaderAndIsr carries every replica until an answer to such a request came (ControllerChannel.ask_again)
        self.asked_again = self.answered_again = 0
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run())

    def update(self, desired: dict[tuple[str, int], ReplicaState]) -> None:
        self.desired = desired
        self._wake.set()

    def stop(self) -> None:
        self._task.cancel()
        self.connection.close()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self._send_differences()
            except asyncio.CancelledError:
                raise
            except OSError as exc:
                log.info("controller %d -> broker %d: %s; retrying", self.owner.broker_id, self.target.id, exc)
                self.connection.close()
                await asyncio.sleep(self.owner.backoff_s)
                self._wake.set()
            except Exception:
                log.exception("controller %d -> broker %d failed; retrying", self.owner.broker_id, self.target.id)
                self.connection.close()
                await asyncio.sleep(self.owner.backoff_s)
                self._wake.set()

    async def _send_differences(self) -> None:
        owner = self.owner
        asked = self.asked_again
        resend_all = asked > self.answered_again
        changed = {tp: rs for tp, rs in self.desired.items() if resend_all or self.acked.get(tp) != rs.key}
        if changed:
            new = {tp for tp in changed if owner.new_replicas.contains(tp[0], tp[1], self.target.id)}
            response = await self.connection.request(4, LEADER_AND_ISR_VERSION, owner.leader_and_isr(changed, new))
            if response.error_code:
                raise OSError(f"LeaderAndIsr refused: {errors.for_code(response.error_code).__name__}")
            for tp, rs in changed.items():
                self.acked[tp] = rs.key
            self.answered_again = max(self.answered_again, asked)
            owner.new_replicas.told(self.target.id, new)
            owner.partition_errors(self.target.id, response.partition_errors)
        gone = sorted(tp for tp in self.acked if tp not in self.desired)
        if gone:
            response = await self.connection.request(5, STOP_REPLICA_VERSION, owner.stop_replica(gone))
            if response.error_code:
                raise OSError(f"StopReplica refused: {errors.for_code(response.error_code).__name__}")
            for tp in gone:
                self.acked.pop(tp, None)
        keys, brokers = owner.metadata_keys, owner.brokers_key
        changed_meta = [tp for tp, key in keys.items() if self.acked_metadata.get(tp) != key]
        deleted = [tp for tp in self.acked_metadata if tp not in keys]
        if changed_meta or deleted or brokers != self.acked_brokers:
            # only what changed since this broker's last answer, as Kafka's controller sends it (the first request
            # of a channel holds everything: a new broker, or a new controller, whose epoch tells brokers to start over)
            response = await self.connection.request(6, UPDATE_METADATA_VERSION,
                                                     owner.update_metadata(changed_meta, deleted))
            if response.error_code:
                raise OSError(f"UpdateMetadata refused: {errors.for_code(response.error_code).__name__}")
            for tp in changed_meta:
                self.acked_metadata[tp] = keys[tp]
            for tp in deleted:
                self.acked_metadata.pop(tp, None)
            self.acked_brokers = brokers
        if self.desired is not None and (any(self.acked.get(tp) != rs.key for tp, rs in self.desired.items())
                                         or (self.desired and self.asked_again > self.answered_again)
                                         or owner.metadata_keys is not keys or owner.brokers_key != brokers):
            self._wake.set()  # changed (or asked again) while we were sending


class ControllerChannel:
    def __init__(self, broker_id: int, request_timeout_ms: int, offline: OfflineReplicas | None = None,
                 on_offline: Callable[[], None] = lambda: None, new_replicas: NewReplicas | None = None) -> None:
        self.broker_id = broker_id
        # replicas brokers answered KAFKA_STORAGE_ERROR for (shared with the controller), and who to wake then
        self.offline = offline if offline is not None else OfflineReplicas()
        self.on_offline = on_offline
        self.new_replicas = new_replicas if new_replicas is not None else NewReplicas()  # is_new until told
        self.timeout_s = request_timeout_ms / 1000
        self.backoff_s = 0.2
        self.channels: dict[int, BrokerChannel] = {}
        # the metadata of the last view: each partition's UpdateMetadata entry as a key (compared per broker with what
        # it acknowledged), the partitions' states and the live brokers to build a request from
        self.metadata_keys: dict[tuple[str, int], MetadataKey] = {}
        self.brokers_key: object = ()
        self._snap = Snapshot()
        self._offline: dict[int, frozenset[tuple[str, int]]] = {}
        self._leaders: dict[int, LiveBroker] = {}

    def stop(self) -> None:
        for channel in self.channels.values():
            channel.stop()
        self.channels.clear()
        self.metadata_keys, self.brokers_key = {}, ()
        self.offline.clear()  # no longer controller: the next one asks every broker again
        self.new_replicas.clear()

    def ask_again(self, brokers: Iterable[int]) -> None:
        """Send these brokers LeaderAndIsr for every replica they hold, as if never sent (after a log dir event:
        their answers say which replicas are offline)."""
        for broker_id in brokers:
            channel = self.channels.get(broker_id)
            if channel is not None:
                channel.asked_again += 1
                channel.update(channel.desired)

    def partition_errors(self, broker_id: int, answered: Iterable[Any]) -> None:
        """A LeaderAndIsr answer's per-partition errors (v0-4): KAFKA_STORAGE_ERROR means the replica is on an
        offline log dir, no error that it is online."""
        storage_error = errors.KafkaStorageError.code
        offline = [(p.topic_name, p.partition_index) for p in answered if p.error_code == storage_error]
        online = [(p.topic_name, p.partition_index) for p in answered if p.error_code == 0]
        new = self.offline.record(broker_id, offline, online)
        if new:
            log.info("controller %d: broker %d has %d replicas on offline log dirs: %s", self.broker_id, broker_id,
                     len(new), ", ".join(f"{t}-{p}" for t, p in sorted(new)))
            self.on_offline()

    def sync(self, snap: Snapshot, controller_epoch: int) -> None:
        """Bring every live broker's channel up to this view (call on the loop)."""
        self.controller_epoch = controller_epoch
        self._leaders = snap.brokers
        desired: dict[int, dict[tuple[str, int], ReplicaState]] = {b: {} for b in snap.brokers}
        for (topic, index), state in snap.states.items():
            replicas = snap.assignments.get(topic, {}).get(index)
            if not replicas:
                continue
            adding, removing = snap.moving.get((topic, index), ([], []))
            leader = snap.brokers.get(state.leader)
            rs = ReplicaState(state, snap.state_versions.get((topic, index), -1), tuple(replicas), tuple(adding),
                              tuple(removing), None if leader is None else (leader.host, leader.port))
            for b in replicas:
                if b in desired:
                    desired[b][(topic, index)] = rs
        offline = self.offline.view()
        keys: dict[tuple[str, int], MetadataKey] = {}
        for tp, s in snap.states.items():
            members = tuple(snap.assignments.get(tp[0], {}).get(tp[1]) or ())
            gone = tuple(r for r in members if r not in snap.brokers or tp in offline.get(r, ()))
            keys[tp] = (s.leader, s.leader_epoch, tuple(s.isr), s.controller_epoch, snap.state_versions.get(tp, -1),
                        members, gone)
        if keys != self.metadata_keys:
            self.metadata_keys = keys
        brokers_key = tuple(sorted(snap.brokers.items()))
        if brokers_key != self.brokers_key:
            self.brokers_key = brokers_key
        self._snap, self._offline = snap, offline
        for broker_id in list(self.channels):
            old = self.channels[broker_id]
            live = snap.brokers.get(broker_id)
            if live is None or live.epoch != old.target.epoch or (live.host, live.port) != (
                    old.target.host, old.target.port):
                old.stop()  # gone, or registered again: a new channel starts from nothing
                del self.channels[broker_id]
                self.offline.forget(broker_id)  # as Kafka's onBrokerStartup / onBrokerFailure
        for broker_id, target in snap.brokers.items():
            channel = self.channels.get(broker_id)
            if channel is None:
                channel = self.channels[broker_id] = BrokerChannel(self, target)
            channel.update(desired[broker_id])

    # -- request bodies ------------------------------------------------------------------------

    def leader_and_isr(self, changed: dict[tuple[str, int], ReplicaState],
                       new: Collection[tuple[str, int]] = ()) -> Body:
        """LeaderAndIsr for these partitions; ``new``: the replicas there are new (``is_new``, Kafka's NewReplica)."""
        by_topic: dict[str, list[Body]] = {}
        leaders = set()
        for (topic, index), rs in sorted(changed.items()):
            s = rs.state
            by_topic.setdefault(topic, []).append({
                "partition_index": index, "controller_epoch": s.controller_epoch, "leader": s.leader,
                "leader_epoch": s.leader_epoch, "isr": list(s.isr), "zk_version": rs.zk_version,
                "replicas": list(rs.replicas), "adding_replicas": list(rs.adding),
                "removing_replicas": list(rs.removing), "is_new": (topic, index) in new})
            leaders.add(s.leader)
        return {"controller_id": self.broker_id, "controller_epoch": self.controller_epoch, "broker_epoch": -1,
                "topic_states": [{"topic_name": t, "partition_states": ps} for t, ps in by_topic.items()],
                "live_leaders": [{"broker_id": b.id, "host_name": b.host, "port": b.port}
                                 for b in (self._leaders.get(i) for i in sorted(leaders)) if b is not None]}

    def stop_replica(self, partitions: list[tuple[str, int]]) -> Body:
        by_topic: dict[str, list[int]] = {}
        for topic, index in partitions:
            by_topic.setdefault(topic, []).append(index)
        return {"controller_id": self.broker_id, "controller_epoch": self.controller_epoch, "broker_epoch": -1,
                "delete_partitions": True,
                "topics": [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]}

    def update_metadata(self, changed: Iterable[tuple[str, int]], deleted: Iterable[tuple[str, int]]) -> Body:
        """UpdateMetadata with the live brokers and these partitions of the last view; ``deleted`` ones go with
        Kafka's LeaderDuringDelete (-2), which tells the broker to forget them."""
        by_topic: dict[str, list[Body]] = {}
        for tp in sorted(changed):
            leader, leader_epoch, isr, controller_epoch, zk_version, replicas, gone = self.metadata_keys[tp]
            by_topic.setdefault(tp[0], []).append({
                "partition_index": tp[1], "controller_epoch": controller_epoch, "leader": leader,
                "leader_epoch": leader_epoch, "isr": list(isr), "zk_version": zk_version, "replicas": list(replicas),
                "offline_replicas": list(gone)})
        for topic, index in sorted(deleted):
            by_topic.setdefault(topic, []).append({
                "partition_index": index, "controller_epoch": self.controller_epoch, "leader": LEADER_DURING_DELETE,
                "leader_epoch": 0, "isr": [], "zk_version": -1, "replicas": [], "offline_replicas": []})
        return {"controller_id": self.broker_id, "controller_epoch": self.controller_epoch, "broker_epoch": -1,
                "topic_states": [{"topic_name": t, "partition_states": ps} for t, ps in by_topic.items()],
                "live_brokers": [{"id": b.id, "endpoints": _endpoints(b), "rack": b.rack}
                                 for b in self._snap.brokers.values()]}


_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}  # Kafka's SecurityProtocol ids


def _endpoints(b: LiveBroker) -> list[Body]:
    """Every listener of a broker, as UpdateMetadata carries them."""
    if not b.endpoints:
        return [{"port": b.port, "host": b.host, "listener": "PLAINTEXT", "security_protocol": 0}]
    return [{"port": port, "host": host, "listener": name, "security_protocol": _PROTOCOL_IDS.get(protocol, 0)}
            for name, host, port, protocol in b.endpoints]
