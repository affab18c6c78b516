"""Topic administration in ZooKeeper mode (see ``topic_admin``): as Kafka's AdminZkClient, the znodes are written
off the event loop and the controller does the rest; what Metadata shows is what the controller last announced
(the MetadataCache), as in Kafka: a topic appears with every leader at once."""
from __future__ import annotations

import asyncio
import logging

from kbroker import errors
from kbroker.clock import monotonic_ms
from kbroker.config.broker import BrokerConfig
from kbroker.config.errors import ConfigError
from kbroker.metadata.cache import MetadataCache
from kbroker.metadata.zk_view import ClusterView, LiveBroker, RunBlocking, Snapshot
from kbroker.replicas.replica_manager import ReplicaManager
from kbroker.topics.admin import TopicAdmin
from kbroker.topics.table import PartitionView, TopicInfo, topic_uuid
from kbroker.topics.visibility import DelayedTopicChange, Visible, peer_shows
from kbroker.topics.znodes import write_new_partitions
from zk_compat import errors as zk_errors, layout
from zk_compat.store import MetadataStore
from zk_compat.znodes import PartitionState

log = logging.getLogger(__name__)

# How long after its start a broker's Metadata answers wait for the controller's first UpdateMetadata.
FIRST_UPDATE_WAIT_MS = 15_000


class ZooKeeperTopics(TopicAdmin):
    """ZooKeeper mode: writes go to ZooKeeper off the event loop; the controller creates partition states
    and tells the replicas (LeaderAndIsr); the table follows the cluster view."""

    def __init__(self, config: BrokerConfig, store: MetadataStore, replicas: ReplicaManager, cluster: ClusterView,
                 metadata: MetadataCache) -> None:
        super().__init__(config, store, replicas)
        self.cluster = cluster
        self.metadata = metadata  # what the controller last told us (UpdateMetadata)
        self._pending: set[str] = set()  # created here, not yet seen in a snapshot
        # what apply_snapshot last took of each topic (assignment, configs, id): the same objects again change nothing
        self._applied: dict[str, tuple[dict[int, list[int]], dict[str, str], str | None]] = {}
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
        found = await asyncio.gather(*(peer_shows(self.broker_id, b, changes, deadline, self.peer_poll_s)
                                       for b in peers))
        for missing in found:
            late |= missing
        return late

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
        [outcome] = await self.create_many([info])
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    async def create_many(self, infos: list[TopicInfo]) -> list[TopicInfo | Exception]:
        """Every topic of the request in one job off the loop: one listing checks them all, and their znodes
        go in two pipelined rounds (``layout.create_topics``), not a few round trips each, in turn."""
        new = [layout.NewTopicZNodes(info.name, info.assignment, info.configs) for info in infos]
        with errors.translate_zk():
            found = await self.run_blocking(lambda: layout.create_topics(self.store, new))
        outcomes: list[TopicInfo | Exception] = []
        for info, outcome in zip(infos, found):
            if isinstance(outcome, zk_errors.AdminError):
                outcomes.append(errors.from_zk(outcome))
            elif isinstance(outcome, Exception):
                outcomes.append(outcome)
            elif info.name in self.topics and info.name not in self._pending:
                outcomes.append(errors.TopicAlreadyExistsError(f"Topic '{info.name}' already exists."))
            else:
                outcomes.append(self._registered(info, outcome))
        return outcomes

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

    async def delete_many(self, names: list[str]) -> list[Exception | None]:
        """Every topic of the request marked in one job off the loop (``layout.mark_topics_for_deletion``)."""
        outcomes: list[Exception | None] = []
        for name in names:
            try:
                self._deletable(name)
                outcomes.append(None)
            except Exception as exc:
                outcomes.append(exc)
        todo = [name for name, outcome in zip(names, outcomes) if outcome is None]
        with errors.translate_zk():
            marked = iter(await self.run_blocking(lambda: layout.mark_topics_for_deletion(self.store, todo)))
        for i, outcome in enumerate(outcomes):
            if outcome is None:
                found = next(marked)
                outcomes[i] = errors.from_zk(found) if isinstance(found, zk_errors.AdminError) else found
        return outcomes

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
                self._applied.pop(name, None)
                self.log_manager.topic_overrides.pop(name, None)
                self.replicas.delete_partitions(name, info.assignment)  # the controller removed it
                log.info("topic %s is gone from ZooKeeper: its local logs are deleted", name)
        self._pending.intersection_update(set(self.topics) - set(snap.assignments))
        for name, assignment in snap.assignments.items():
            configs = snap.configs.get(name, {})
            known = self.topics.get(name)
            topic_id = snap.topic_ids.get(name)
            applied = self._applied.get(name)
            if (known is not None and applied is not None and applied[0] is assignment and applied[1] is configs
                    and applied[2] == topic_id):
                continue  # the very dicts applied last time: the view shares them until the topic's nodes change
            self._applied[name] = (assignment, configs, topic_id)
            if (known.configs != configs) if known is not None else bool(configs):
                # changed, or seen for the first time while the controller's LeaderAndIsr already created its
                # logs here with the broker's defaults (it may come before this broker's view has the topic)
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
