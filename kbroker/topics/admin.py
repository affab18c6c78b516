"""Topic administration: the one asynchronous API (``create``, ``auto_create``, ``delete``,
``create_partitions``, ``alter_configs``) and what Metadata reads (topics, partition states, live brokers,
controller), with two implementations instead of a branch on the mode in every operation:

- ``single_node_topics.SingleNodeTopics``: the embedded store under the first log dir; this broker is the
  controller and the only replica, so it hosts the partitions itself (giving the loop back every few of them).
- ``zookeeper_topics.ZooKeeperTopics``: as Kafka's AdminZkClient, the znodes are written off the event loop
  and the controller does the rest; the table follows the cluster view (``apply_snapshot``).

Next to them: ``topic_table`` (the table's entries), ``topic_placement`` (checks and replica placement),
``topic_znodes`` (compare-and-set writes to a topic's znode), ``topic_visibility`` (what an admin answer
waits for: Kafka's DelayedCreatePartitions / DelayedDeleteTopics).

Auto-creation is Metadata's only (Kafka 2.8's AutoTopicCreationManager; a Produce to an unknown topic answers
UNKNOWN_TOPIC_OR_PARTITION, as its KafkaApis.handleProduceRequest does): ``auto_create`` is awaited, so a slow
ZooKeeper delays that answer only. ``create_now`` is a single broker's synchronous creation of its internal
topics at start.
"""
from __future__ import annotations

import asyncio
import logging

from kbroker import errors
from kbroker.config.broker import BrokerConfig
from kbroker.config.errors import ConfigError
from kbroker.log import LogConfig, TopicPartition
from kbroker.metadata.zk_view import LiveBroker
from kbroker.replicas.replica_manager import ReplicaManager
from kbroker.topics.placement import new_partitions, new_topic
from kbroker.topics.table import PartitionView, TopicInfo, topic_uuid
from kbroker.topics.visibility import Visible
from zk_compat.store import MetadataStore
from zk_compat.znodes import PartitionState

log = logging.getLogger(__name__)


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

    def begin_shutdown(self) -> None:
        """The broker is stopping: topics being hosted stop where they are."""
        self.stopping = True

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
        return self._register(self.validated(name, num_partitions, replication_factor, None, configs))

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
        info = self.validated(name, num_partitions, replication_factor, assignment, configs)
        if validate_only:
            return info
        return await self._register_async(info)

    async def create_many(self, infos: list[TopicInfo]) -> list[TopicInfo | Exception]:
        """Register validated topics (CreateTopics' whole request); per topic, its info or what refused it (that
        topic alone). Here one at a time; ZooKeeper mode writes them all in a few pipelined rounds."""
        outcomes: list[TopicInfo | Exception] = []
        for info in infos:
            try:
                outcomes.append(await self._register_async(info))
            except Exception as exc:
                outcomes.append(exc)
        return outcomes

    async def delete(self, name: str) -> None:
        raise NotImplementedError

    async def delete_many(self, names: list[str]) -> list[Exception | None]:
        """Delete topics (DeleteTopics' whole request); per topic, None or what refused it (that topic alone)."""
        outcomes: list[Exception | None] = []
        for name in names:
            try:
                await self.delete(name)
                outcomes.append(None)
            except Exception as exc:
                outcomes.append(exc)
        return outcomes

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

    def validated(self, name: str, num_partitions: int, replication_factor: int,
                  assignment: dict[int, list[int]] | None, configs: dict[str, str] | None) -> TopicInfo:
        """A new topic as CreateTopics asks for it, checked (names, counts, configs) and placed; not yet written."""
        configs = dict(configs or {})
        self._effective(configs)
        return new_topic(name, num_partitions, replication_factor, assignment, configs, existing=self.topics,
                         live_brokers=self.live_brokers(), config=self.config)

    def _effective(self, configs: dict[str, str]) -> LogConfig:
        try:
            return self.log_manager.config.with_overrides(configs)  # the current log defaults (dynamic configs)
        except ConfigError as exc:
            raise errors.InvalidConfigError(str(exc)) from None

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
        """The topic and its new partitions' replicas (``topic_placement.new_partitions``)."""
        info = self._existing(name)
        return info, new_partitions(info, count, assignments, self.live_brokers())

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
