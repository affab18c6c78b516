"""Topic administration and the topic table: what CreateTopics, DeleteTopics, CreatePartitions and
the config APIs change, and what Metadata reads (topics, partition states, live brokers, controller).

One asynchronous API (``create``, ``delete``, ``create_partitions``, ``alter_configs``) with two
implementations instead of a branch on the mode in every operation:

- ``SingleNodeTopics``: the embedded store under the first log dir; this broker is the controller and
  the only replica, so it hosts the partitions itself (giving the loop back every few of them).
- ``ZooKeeperTopics``: as Kafka's AdminZkClient, the znodes are written off the event loop and the
  controller does the rest; the table follows the cluster view (``apply_snapshot``).

``create_now`` is the synchronous creation that topic auto-creation and the internal topics use (a
Produce is applied in arrival order, so its auto-creation cannot wait for the loop).

What Metadata shows (``metadata_topics`` / ``metadata_partitions``) is, in ZooKeeper mode, what the
controller last announced (the MetadataCache), as in Kafka: a topic appears with every leader at once.
``await_visible`` is Kafka's DelayedCreatePartitions / DelayedDeleteTopics: an admin answer waits until
the change shows in this broker's cache (a delayed operation in the purgatory, checked at every
UpdateMetadata) and in every other live broker's Metadata, or until the request's timeout.
"""
from __future__ import annotations

import asyncio
import base64
import logging
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kbroker import errors
from kbroker.clock import monotonic_ms
from kbroker.config.broker import BrokerConfig
from kbroker.config.errors import ConfigError
from kbroker.interbroker.client import BrokerConnection
from kbroker.log import LogConfig, TopicPartition
from kbroker.log.log_manager import HOSTING_CHUNK
from kbroker.log.names import validate_topic_name
from kbroker.metadata.cache import MetadataCache
from kbroker.metadata.servers import broker_servers, warn_crowded
from kbroker.metadata.zk_view import ClusterView, LiveBroker, RunBlocking, Snapshot
from kbroker.replicas.internal_topics import INTERNAL_TOPICS
from kbroker.replicas.replica_manager import ReplicaManager
from kbroker.replication.purgatory import DelayedOperation
from zk_compat import layout
from zk_compat.assignment import BrokerMetadata, broker_metadatas
from zk_compat.store import BadVersionError, MetadataStore
from zk_compat.znodes import PartitionState

log = logging.getLogger(__name__)


@dataclass
class TopicInfo:
    name: str
    assignment: dict[int, list[int]]
    configs: dict[str, str] = field(default_factory=dict)
    topic_id: uuid.UUID = uuid.UUID(int=0)  # Kafka's topic id (stored base64url in /brokers/topics/<t>)

    @property
    def internal(self) -> bool:
        return self.name in INTERNAL_TOPICS


@dataclass(frozen=True)
class PartitionView:
    """One partition as Metadata answers it (before the per-listener and per-version filtering)."""
    index: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline_replicas: list[int]


# How long after its start a broker's Metadata answers wait for the controller's first UpdateMetadata.
FIRST_UPDATE_WAIT_MS = 15_000

# A change an admin answer waits for: topic -> partitions 0..n-1 all led, or None for "no longer there".
Visible = dict[str, int | None]


class DelayedTopicChange(DelayedOperation[bool]):
    """Kafka's DelayedCreatePartitions / DelayedDeleteTopics on this broker's MetadataCache: completes when
    ``shown()`` holds, or at the timeout with its value then."""

    def __init__(self, shown: Callable[[], bool]) -> None:
        super().__init__()
        self.shown = shown

    def ready(self) -> bool:
        return self.shown()

    def result(self) -> bool:
        return self.shown()


def topic_uuid(text: str | None) -> uuid.UUID:
    """Kafka stores topic ids as 22-character base64url strings; the wire carries 16 bytes."""
    if not text:
        return uuid.UUID(int=0)
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))


class TopicAdmin:
    """What both modes share: the table, validation, and applying new configs to hosted logs."""

    def __init__(self, config: BrokerConfig, store: MetadataStore, replicas: ReplicaManager) -> None:
        self.config = config
        self.broker_id = replicas.broker_id
        self.store = store
        self.replicas = replicas
        self.log_manager = replicas.log_manager
        self.topics: dict[str, TopicInfo] = {}
        self.stopping = False
        self._creating: dict[str, asyncio.Future[None]] = {}  # auto-creations in flight, by topic

    # -- what Metadata answers ------------------------------------------------------------------

    def live_brokers(self) -> list[LiveBroker]:
        raise NotImplementedError

    def controller_id(self) -> int:
        raise NotImplementedError

    def partition_state(self, topic: str, index: int) -> PartitionState:
        raise NotImplementedError

    def exists(self, topic: str, index: int) -> bool:
        info = self.topics.get(topic)
        return info is not None and index in info.assignment

    def metadata_topics(self) -> list[str]:
        """Every topic Metadata lists (asked for all topics)."""
        raise NotImplementedError

    def metadata_partitions(self, topic: str) -> list[PartitionView] | None:
        """The topic's partitions as Metadata shows them; None while Metadata does not know it (absent, or
        created but not yet announced: Kafka answers such a topic without partitions)."""
        raise NotImplementedError

    async def await_visible(self, changes: Visible, timeout_ms: int) -> set[str]:
        """Wait until every change shows in Metadata (see the module's doc); the topics still not shown when
        ``timeout_ms`` runs out are returned (their answer is REQUEST_TIMED_OUT)."""
        return set()

    def announced(self) -> bool:
        """May Metadata answer yet?"""
        return True

    async def until_announced(self) -> None:
        """Wait until ``announced()``."""

    def live_broker(self, broker_id: int) -> LiveBroker | None:
        return next((b for b in self.live_brokers() if b.id == broker_id), None)

    def leader_endpoint(self, topic: str, index: int) -> LiveBroker | None:
        """Where the partition's leader listens, if it has a live one."""
        return self.live_broker(self.partition_state(topic, index).leader)

    # -- operations -----------------------------------------------------------------------------

    def create_now(self, name: str, num_partitions: int = -1, replication_factor: int = -1,
                   configs: dict[str, str] | None = None) -> TopicInfo:
        """Validate and register at once: a single broker's internal topics at start (its embedded store
        never waits on I/O). ZooKeeper mode has no such path: its writes are awaited off the loop."""
        return self._register(self._validated(name, num_partitions, replication_factor, None, configs))

    async def auto_create(self, name: str) -> None:
        """Metadata's auto-creation (Kafka 2.8's AutoTopicCreationManager) with the broker's defaults, awaited
        off the event loop in ZooKeeper mode. Requests asking for the same name meanwhile share one creation,
        which carries on if they go away; a topic created elsewhere meanwhile is no error."""
        if name in self.topics:
            return
        pending = self._creating.get(name)
        if pending is None:
            pending = asyncio.ensure_future(self._auto_created(name))
            self._creating[name] = pending
            pending.add_done_callback(lambda done: self._auto_create_done(name, done))
        await asyncio.shield(pending)

    async def _auto_created(self, name: str) -> None:
        try:
            await self.create(name)
        except errors.TopicAlreadyExistsError:
            pass

    def _auto_create_done(self, name: str, done: asyncio.Future[None]) -> None:
        self._creating.pop(name, None)
        if not done.cancelled() and done.exception() is not None:  # retrieved: every asker may have gone
            log.debug("auto-creation of %s failed: %s", name, done.exception())

    async def create(self, name: str, num_partitions: int = -1, replication_factor: int = -1,
                     assignment: dict[int, list[int]] | None = None, configs: dict[str, str] | None = None,
                     validate_only: bool = False) -> TopicInfo:
        info = self._validated(name, num_partitions, replication_factor, assignment, configs)
        if validate_only:
            return info
        return await self._register_async(info)

    async def delete(self, name: str) -> None:
        raise NotImplementedError

    async def create_partitions(self, name: str, count: int, assignments: list[list[int]] | None = None,
                                validate_only: bool = False) -> None:
        """Grow the topic to ``count`` partitions; ``assignments`` (the new partitions' replica lists, in
        partition order) replaces the broker's own placement, as CreatePartitions' assignments do."""
        raise NotImplementedError

    async def alter_configs(self, name: str, configs: dict[str, str], validate_only: bool = False) -> None:
        raise NotImplementedError

    def _register(self, info: TopicInfo) -> TopicInfo:
        raise NotImplementedError

    async def _register_async(self, info: TopicInfo) -> TopicInfo:
        raise NotImplementedError

    # -- shared checks --------------------------------------------------------------------------------

    def _validated(self, name: str, num_partitions: int, replication_factor: int,
                   assignment: dict[int, list[int]] | None, configs: dict[str, str] | None) -> TopicInfo:
        try:
            validate_topic_name(name)
        except ValueError as exc:
            raise errors.InvalidTopicError(str(exc)) from None
        if name in self.topics:
            raise errors.TopicAlreadyExistsError(f"Topic '{name}' already exists.")
        configs = dict(configs or {})
        self._effective(configs)
        live = [b.id for b in self.live_brokers()]
        if assignment:
            if len({len(replicas) for replicas in assignment.values()}) != 1:  # Kafka's validateTopicCreate
                raise errors.InvalidReplicaAssignmentError("All partitions should have the same number of replicas")
            if sorted(assignment) != list(range(len(assignment))):
                raise errors.InvalidReplicaAssignmentError("partitions must be numbered 0..n-1")
            for replicas in assignment.values():
                if not replicas or len(set(replicas)) != len(replicas) or any(r not in live for r in replicas):
                    raise errors.InvalidReplicaAssignmentError(f"replicas {replicas} are not distinct live brokers")
            warn_crowded("CreateTopics", name, assignment, broker_servers(self.live_brokers()))
        else:
            partitions = self.config.num_partitions if num_partitions == -1 else num_partitions
            factor = self.config.default_replication_factor if replication_factor == -1 else replication_factor
            if partitions <= 0:
                raise errors.InvalidPartitionsError(f"number of partitions must be at least 1, got {partitions}")
            if factor <= 0:
                raise errors.InvalidReplicationFactorError(f"replication factor must be at least 1, got {factor}")
            if factor > len(live):
                raise errors.InvalidReplicationFactorError(
                    f"replication factor {factor} is larger than the {len(live)} available broker(s)")
            # rack-aware when every broker has broker.rack (Kafka's ENFORCED mode; a partial
            # rack setup is refused rather than placed blindly)
            with errors.translate_zk():
                assignment = layout.assign_replicas_to_brokers(self._broker_metadatas(), partitions, factor,
                                                               rng=random.Random())
        return TopicInfo(name, {p: list(r) for p, r in assignment.items()}, configs)

    def _effective(self, configs: dict[str, str]) -> LogConfig:
        try:
            return self.log_manager.config.with_overrides(configs)  # the current log defaults (dynamic configs)
        except ConfigError as exc:
            raise errors.InvalidConfigError(str(exc)) from None

    def _broker_metadatas(self) -> list[BrokerMetadata]:
        """The live brokers with their racks and servers: placement keeps replicas on distinct servers."""
        live = self.live_brokers()
        return broker_metadatas(((b.id, b.rack) for b in live), servers=broker_servers(live))

    def _existing(self, name: str) -> TopicInfo:
        info = self.topics.get(name)
        if info is None:
            raise errors.UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        return info

    def _deletable(self, name: str) -> TopicInfo:
        info = self._existing(name)
        if not self.config.delete_topic_enable:
            raise errors.TopicDeletionDisabledError("delete.topic.enable is false")
        if info.internal:
            raise errors.InvalidTopicError(f"{name} is internal and cannot be deleted")
        return info

    def _new_partitions(self, name: str, count: int,
                        assignments: list[list[int]] | None = None) -> tuple[TopicInfo, dict[int, list[int]]]:
        """The topic and its new partitions' replicas: ``assignments`` once checked, else the broker's own
        placement. Kafka's order (ZkAdminManager.createPartitions): the count first, then the assignments."""
        info = self._existing(name)
        current = len(info.assignment)
        if count < current:
            raise errors.InvalidPartitionsError(
                f"Topic currently has {current} partitions, which is higher than the requested {count}.")
        if count == current:
            raise errors.InvalidPartitionsError(f"Topic already has {current} partitions.")
        if assignments is not None:
            return info, self._checked_assignments(info, count, assignments)
        with errors.translate_zk():
            extra = layout.assign_replicas_for_new_partitions(info.assignment, self._broker_metadatas(), count)
        return info, {p: list(r) for p, r in extra.items()}

    def _checked_assignments(self, info: TopicInfo, count: int,
                             assignments: list[list[int]]) -> dict[int, list[int]]:
        """Kafka's checks of CreatePartitions assignments (ZkAdminManager.createPartitions, then
        AdminZkClient.validateReplicaAssignment), each INVALID_REPLICA_ASSIGNMENT with Kafka's message."""
        registered = {b.id for b in self.live_brokers()}
        unknown = list(dict.fromkeys(b for replicas in assignments for b in replicas if b not in registered))
        if unknown:
            raise errors.InvalidReplicaAssignmentError(
                f"Unknown broker(s) in replica assignment: {', '.join(map(str, unknown))}.")
        current = len(info.assignment)
        if len(assignments) != count - current:
            raise errors.InvalidReplicaAssignmentError(
                f"Increasing the number of partitions by {count - current} but {len(assignments)} "
                f"assignments provided.")
        proposed = {current + i: list(replicas) for i, replicas in enumerate(assignments)}
        for index, replicas in proposed.items():
            if not replicas:
                raise errors.InvalidReplicaAssignmentError(
                    f"Cannot have replication factor of 0 for partition id {index}.")
            if len(set(replicas)) != len(replicas):
                raise errors.InvalidReplicaAssignmentError(
                    f"Duplicate brokers not allowed in replica assignment: {', '.join(map(str, replicas))} "
                    f"for partition id {index}.")
        expected = len(info.assignment[0])  # the topic's replication factor, as Kafka takes it
        odd = [(index, len(replicas)) for index, replicas in proposed.items() if len(replicas) != expected]
        if odd:
            raise errors.InvalidReplicaAssignmentError(
                f"Inconsistent replication factor between partitions, partition 0 has {expected} while partitions "
                f"[{', '.join(str(i) for i, _ in odd)}] have replication factors "
                f"[{', '.join(str(n) for _, n in odd)}], respectively.")
        warn_crowded("CreatePartitions", info.name, proposed, broker_servers(self.live_brokers()))
        return proposed

    def _configs_changed(self, info: TopicInfo, configs: dict[str, str], effective: LogConfig) -> None:
        """New overrides: the table, the log manager (for logs created later) and every hosted log."""
        info.configs = dict(configs)
        self.log_manager.topic_overrides[info.name] = info.configs
        self._reconfigure_hosted(info.name, info.assignment, effective)

    def _reconfigure_hosted(self, name: str, assignment: dict[int, list[int]], effective: LogConfig) -> None:
        for index in assignment:
            partition = self.replicas.partitions.get(TopicPartition(name, index))
            if partition is not None:
                partition.log.config = effective

    def _created(self, info: TopicInfo, topic_id: str | None) -> TopicInfo:
        info.topic_id = topic_uuid(topic_id)
        self.topics[info.name] = info
        self.log_manager.topic_overrides[info.name] = info.configs
        return info


def write_new_partitions(store: MetadataStore, name: str, expected: int, extra: dict[int, list[int]]) -> None:
    """Add ``extra`` partitions to the topic znode as it is now, if it still has ``expected`` of them (a
    reassignment's adding/removing replicas kept), compare-and-set so a controller's rewrite in between is
    not lost."""
    for _ in range(5):
        with errors.translate_zk():
            found = layout.get_topic_assignment_with_version(store, name)
        if found is None:
            raise errors.UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        current, version = found
        if len(current.partitions) != expected:
            raise errors.InvalidPartitionsError(f"topic {name} now has {len(current.partitions)} partitions; ask again")
        current.partitions.update(extra)
        try:
            with errors.translate_zk():
                layout.set_topic_assignment(store, name, current, version)
            return
        except BadVersionError:
            continue
    raise errors.ReassignmentInProgressError(f"topic {name} kept changing while partitions were added")


def _answer_shows(answer: Any, partitions: int | None) -> bool:
    """A Metadata answer for a topic shows it gone, or with partitions 0..partitions-1 all led."""
    if answer is None:
        return False
    if answer.error_code == errors.TopicAuthorizationFailedError.code:
        return True  # this broker may not see it there: nothing to wait for
    if partitions is None:
        return bool(answer.error_code == errors.UnknownTopicOrPartitionError.code)
    led = {p.partition_index for p in answer.partitions if p.leader_id >= 0}
    return answer.error_code == 0 and all(p in led for p in range(partitions))


class SingleNodeTopics(TopicAdmin):
    """No ZooKeeper: this broker is the controller and the leader of every partition."""

    def __init__(self, config: BrokerConfig, store: MetadataStore, replicas: ReplicaManager,
                 endpoint: Callable[[], LiveBroker]) -> None:
        super().__init__(config, store, replicas)
        self.endpoint = endpoint  # where this broker listens, known once its listeners are bound

    def live_brokers(self) -> list[LiveBroker]:
        return [self.endpoint()]

    def controller_id(self) -> int:
        return self.broker_id

    def partition_state(self, topic: str, index: int) -> PartitionState:
        partition = self.replicas.partitions.get(TopicPartition(topic, index))
        if partition is None or partition.log.offline:
            return PartitionState(leader=-1, leader_epoch=0, isr=[], controller_epoch=1)
        return PartitionState(leader=partition.leader_id, leader_epoch=partition.leader_epoch,
                              isr=list(partition.isr), controller_epoch=1)

    def metadata_topics(self) -> list[str]:
        return sorted(n for n in self.topics if self.metadata_partitions(n) is not None)

    def metadata_partitions(self, topic: str) -> list[PartitionView] | None:
        """A topic whose partitions are still being hosted (``_register_async``) is not shown yet; a
        partition on an offline log dir has no leader and this broker as its offline replica."""
        info = self.topics.get(topic)
        if info is None:
            return None
        views = []
        for index in sorted(info.assignment):
            partition = self.replicas.partitions.get(TopicPartition(topic, index))
            if partition is None:
                return None
            offline = partition.log.offline
            views.append(PartitionView(index, -1 if offline else partition.leader_id, partition.leader_epoch,
                                       list(info.assignment[index]), list(partition.isr),
                                       [self.broker_id] if offline else []))
        return views

    def load(self) -> None:
        """The topics in the store; a deletion the last run did not finish is finished first."""
        with errors.translate_zk():
            doomed = set(layout.get_topics_marked_for_deletion(self.store))
            for name in layout.get_all_topics(self.store):
                assignment = layout.get_topic_assignment(self.store, name)
                if assignment is None:
                    continue
                if name in doomed:
                    self._finish_deletion(name, assignment.partitions)
                    continue
                configs = layout.get_entity_config(self.store, "topics", name)
                self.topics[name] = TopicInfo(name, {p: list(r) for p, r in assignment.partitions.items()},
                                              dict(configs), topic_uuid(assignment.topic_id))
        for name, info in self.topics.items():
            self.log_manager.topic_overrides[name] = info.configs

    def host_all(self) -> None:
        for name, info in self.topics.items():
            for index in info.assignment:
                self._host(TopicPartition(name, index))

    def _host(self, tp: TopicPartition) -> None:
        """Host as leader and only replica, and say so in the partition state znode."""
        partition = self.replicas.host_as_sole_replica(tp)
        state = PartitionState(leader=self.broker_id, leader_epoch=partition.leader_epoch,
                               isr=[self.broker_id], controller_epoch=1)
        with errors.translate_zk():
            current = layout.get_partition_state(self.store, tp.topic, tp.partition)
            if current is None:
                layout.create_partition_state(self.store, tp.topic, tp.partition, state)
            elif current[0] != state:
                layout.set_partition_state(self.store, tp.topic, tp.partition, state, current[1].version)

    def _register(self, info: TopicInfo) -> TopicInfo:
        self._store_topic(info)
        for index in info.assignment:
            self._host(TopicPartition(info.name, index))
        log.info("created topic %s with %d partitions", info.name, len(info.assignment))
        return info

    async def _register_async(self, info: TopicInfo) -> TopicInfo:
        """Host the new partitions giving the loop back every ``HOSTING_CHUNK``: each costs a directory,
        three files and a checkpoint (a 1,000-partition topic took seconds, every connection waiting). The
        topic's other partitions answer LEADER_NOT_AVAILABLE (retriable) meanwhile; a deletion stops it."""
        self._store_topic(info)
        for n, index in enumerate(info.assignment, start=1):
            if self.topics.get(info.name) is not info or self.stopping:
                return info
            self._host(TopicPartition(info.name, index))
            if n % HOSTING_CHUNK == 0:
                await asyncio.sleep(0)
        log.info("created topic %s with %d partitions", info.name, len(info.assignment))
        return info

    def _store_topic(self, info: TopicInfo) -> None:
        with errors.translate_zk():
            topic_id = layout.create_topic(self.store, info.name, info.assignment, info.configs)
        self._created(info, topic_id)

    async def delete(self, name: str) -> None:
        info = self._deletable(name)
        with errors.translate_zk():
            layout.mark_topic_for_deletion(self.store, name)
        del self.topics[name]
        self._finish_deletion(name, info.assignment)
        self.log_manager.topic_overrides.pop(name, None)
        log.info("deleted topic %s", name)

    def _finish_deletion(self, name: str, assignment: dict[int, list[int]]) -> None:
        """Logs first, then the znodes (the deletion marker last), so a crash in between resumes."""
        self.replicas.delete_partitions(name, assignment)
        with errors.translate_zk():
            layout.delete_topic_znodes(self.store, name)

    async def create_partitions(self, name: str, count: int, assignments: list[list[int]] | None = None,
                                validate_only: bool = False) -> None:
        info, extra = self._new_partitions(name, count, assignments)
        if validate_only:
            return
        write_new_partitions(self.store, name, len(info.assignment), extra)
        info.assignment.update(extra)
        for index in extra:
            self._host(TopicPartition(name, index))

    async def alter_configs(self, name: str, configs: dict[str, str], validate_only: bool = False) -> None:
        info, effective = self._existing(name), self._effective(configs)
        if validate_only:
            return
        with errors.translate_zk():
            layout.change_entity_config(self.store, "topics", name, configs)
        self._configs_changed(info, configs, effective)


class ZooKeeperTopics(TopicAdmin):
    """ZooKeeper mode: writes go to ZooKeeper off the event loop; the controller creates partition states
    and tells the replicas (LeaderAndIsr); the table follows the cluster view."""

    def __init__(self, config: BrokerConfig, store: MetadataStore, replicas: ReplicaManager, cluster: ClusterView,
                 metadata: MetadataCache) -> None:
        super().__init__(config, store, replicas)
        self.cluster = cluster
        self.metadata = metadata  # what the controller last told us (UpdateMetadata)
        self._pending: set[str] = set()  # created here, not yet seen in a snapshot
        self.run_blocking: RunBlocking = cluster.run_blocking
        self._awaited: dict[str, int] = {}  # topics some admin answer waits for (how many answers)
        metadata.listeners.append(self._on_metadata)
        self.peer_poll_s = 0.02
        self._first_update = asyncio.Event()
        self._announce_deadline = monotonic_ms() + FIRST_UPDATE_WAIT_MS

    def announced(self) -> bool:
        """Before the controller's first UpdateMetadata this broker knows no topic (Metadata would answer an
        existing one LEADER_NOT_AVAILABLE or UNKNOWN_TOPIC_OR_PARTITION): Metadata waits for it, for a
        while after the start only (a controller that cannot reach this broker must not stall every client)."""
        return self._first_update.is_set() or monotonic_ms() >= self._announce_deadline

    async def until_announced(self) -> None:
        try:
            await asyncio.wait_for(self._first_update.wait(), max(self._announce_deadline - monotonic_ms(), 0) / 1000)
        except TimeoutError:
            pass  # no word from the controller yet: answer from what is known, as Kafka does

    def metadata_topics(self) -> list[str]:
        return sorted(self.metadata.topics)

    def metadata_partitions(self, topic: str) -> list[PartitionView] | None:
        cached = self.metadata.topics.get(topic)
        if not cached:
            return None
        return [PartitionView(index, p.state.leader, p.state.leader_epoch, list(p.replicas), list(p.state.isr),
                              list(p.offline_replicas)) for index, p in sorted(cached.items())]

    def _on_metadata(self) -> None:
        """An UpdateMetadata landed: Metadata may answer, and the admin answers waiting on it may complete."""
        self._first_update.set()
        for topic in list(self._awaited):
            self.replicas.purgatory.check(("metadata", topic))

    async def await_visible(self, changes: Visible, timeout_ms: int) -> set[str]:
        if not changes or timeout_ms <= 0:
            return set()  # as Kafka: no wait asked for
        deadline = monotonic_ms() + timeout_ms
        keys = [("metadata", t) for t in changes]
        for topic in changes:
            self._awaited[topic] = self._awaited.get(topic, 0) + 1
        try:
            op = DelayedTopicChange(lambda: all(self.metadata.shows(t, n) for t, n in changes.items()))
            await self.replicas.purgatory.watch(op, keys, timeout_ms)
        finally:
            for topic in changes:
                self._awaited[topic] -= 1
                if not self._awaited[topic]:
                    del self._awaited[topic]
        late = {t for t, n in changes.items() if not self.metadata.shows(t, n)}
        peers = [b for b in self.live_brokers() if b.id != self.broker_id]
        found = await asyncio.gather(*(self._peer_shows(b, changes, deadline) for b in peers))
        for missing in found:
            late |= missing
        return late

    async def _peer_shows(self, peer: LiveBroker, changes: Visible, deadline: int) -> set[str]:
        """Ask ``peer`` for the topics' Metadata until it shows every change; the topics it still does not
        show at the deadline. A peer that cannot be asked (gone, refusing) is not waited for."""
        connection = BrokerConnection(peer.host, peer.port, f"broker-{self.broker_id}-admin-wait",
                                      max(deadline - monotonic_ms(), 1) / 1000)
        body = {"topics": [{"name": t} for t in changes], "allow_auto_topic_creation": False}
        missing = set(changes)
        try:
            while True:
                try:
                    response = await connection.request(3, 4, body)
                except OSError as exc:
                    log.info("broker %d not asked whether it shows %s: %s", peer.id, sorted(changes), exc)
                    return set()
                answers = {t.name: t for t in response.topics}
                missing = {t for t, n in changes.items() if not _answer_shows(answers.get(t), n)}
                if not missing or monotonic_ms() >= deadline:
                    return missing
                await asyncio.sleep(self.peer_poll_s)
        finally:
            connection.close()

    def live_brokers(self) -> list[LiveBroker]:
        return list(self.cluster.snapshot.brokers.values())

    def controller_id(self) -> int:
        """The controller as this broker's ZooKeeper view has it, else as the controller last announced it
        (UpdateMetadata, which Kafka's Metadata answers from): at start the first UpdateMetadata can land
        before the view has read /controller, and an answer of -1 then left librdkafka's admin client
        waiting for a controller until its timeout (it asks again only on its metadata refresh)."""
        found = self.cluster.snapshot.controller_id
        if found is None:
            return self.metadata.controller_id if self.metadata.controller_id >= 0 else -1
        return found

    def partition_state(self, topic: str, index: int) -> PartitionState:
        state = self.metadata.state(topic, index)
        if state is None or state.leader not in self.cluster.snapshot.brokers:
            return PartitionState(leader=-1, leader_epoch=state.leader_epoch if state else 0,
                                  isr=list(state.isr) if state else [], controller_epoch=-1)
        return state

    def _register(self, info: TopicInfo) -> TopicInfo:
        raise RuntimeError("ZooKeeper mode writes topics off the event loop: create() or auto_create()")

    async def _register_async(self, info: TopicInfo) -> TopicInfo:
        with errors.translate_zk():
            topic_id = await self.run_blocking(
                lambda: layout.create_topic(self.store, info.name, info.assignment, info.configs))
        if info.name in self.topics and info.name not in self._pending:
            raise errors.TopicAlreadyExistsError(f"Topic '{info.name}' already exists.")
        return self._registered(info, topic_id)

    def _registered(self, info: TopicInfo, topic_id: str | None) -> TopicInfo:
        """As AdminZkClient: /config/topics/<t> and /brokers/topics/<t> are written; the controller
        creates the partition states and tells the replicas."""
        if info.name not in self.topics:
            self._created(info, topic_id)
            self._pending.add(info.name)
        log.info("created topic %s with %d partitions", info.name, len(info.assignment))
        return info

    async def delete(self, name: str) -> None:
        """Marked in /admin/delete_topics: the controller deletes it; the logs go when it leaves the view."""
        self._deletable(name)
        with errors.translate_zk():
            await self.run_blocking(lambda: layout.mark_topic_for_deletion(self.store, name))

    async def create_partitions(self, name: str, count: int, assignments: list[list[int]] | None = None,
                                validate_only: bool = False) -> None:
        """The topic znode is read and rewritten off the event loop; the controller creates the new
        partitions' states (each led by the first live broker of its replicas), and the view hosts them."""
        info, extra = self._new_partitions(name, count, assignments)
        if validate_only:
            return
        await self.run_blocking(lambda: write_new_partitions(self.store, name, len(info.assignment), extra))
        info.assignment.update(extra)

    async def alter_configs(self, name: str, configs: dict[str, str], validate_only: bool = False) -> None:
        """The config znode and its change notification are written off the event loop (every broker
        then applies it from /config/changes, this one too)."""
        info, effective = self._existing(name), self._effective(configs)
        if validate_only:
            return
        with errors.translate_zk():
            await self.run_blocking(lambda: layout.change_entity_config(self.store, "topics", name, configs))
        self._configs_changed(info, configs, effective)

    def apply_snapshot(self, snap: Snapshot) -> None:
        """Topics with their assignments and configs. Which partitions this broker hosts, and as leader or
        follower, the controller says (LeaderAndIsr)."""
        for name in list(self.topics):
            if name not in snap.assignments and name not in self._pending:
                info = self.topics.pop(name)
                self.log_manager.topic_overrides.pop(name, None)
                self.replicas.delete_partitions(name, info.assignment)  # the controller removed it
                log.info("topic %s is gone from ZooKeeper: its local logs are deleted", name)
        self._pending.intersection_update(set(self.topics) - set(snap.assignments))
        for name, assignment in snap.assignments.items():
            configs = snap.configs.get(name, {})
            known = self.topics.get(name)
            if known is not None and known.configs != configs:
                self._apply_topic_configs(name, assignment, configs)
            self.topics[name] = TopicInfo(name, {p: list(r) for p, r in assignment.items()}, dict(configs),
                                          topic_uuid(snap.topic_ids.get(name)))
            self.log_manager.topic_overrides[name] = self.topics[name].configs

    def _apply_topic_configs(self, name: str, assignment: dict[int, list[int]], configs: dict[str, str]) -> None:
        """A topic's configs changed in ZooKeeper (/config/changes): the hosted logs take them."""
        try:
            effective = self.log_manager.config.with_overrides(configs)
        except ConfigError as exc:
            log.warning("topic %s: new configs refused (%s); keeping the old ones", name, exc)
            return
        self._reconfigure_hosted(name, assignment, effective)
        log.info("topic %s now runs with configs %s", name, configs)
