"""What binds a coordinator to this broker through its internal topic, shared by the group coordinator
(``__consumer_offsets``) and the transaction coordinator (``__transaction_state``): the topic's
creation (at start on a single broker; on the first FindCoordinator in ZooKeeper mode), its partition
count, the leadership of its partitions (a partition is loaded when this broker comes to lead it and
forgotten when the leadership moves), acks=all appends, and where the coordinator of a key is."""
from __future__ import annotations

from collections.abc import Awaitable

from kbroker import errors
from kbroker.config.broker import BrokerConfig
from kbroker.log import TopicPartition
from kbroker.metadata.zk_view import LiveBroker
from kbroker.replicas.replica_manager import ReplicaManager
from kbroker.replication.partition import Partition
from kbroker.topics.admin import TopicAdmin
from kbroker.topics.internal import ensure_internal_topic


class InternalTopicBinding:
    topic: str  # the internal topic's name (set by the subclass)

    def __init__(self, config: BrokerConfig, replicas: ReplicaManager, topics: TopicAdmin, clustered: bool) -> None:
        self.config = config
        self.replicas = replicas
        self.topics = topics
        self.clustered = clustered  # ZooKeeper mode: the topic is created on first use, partitions come and go
        replicas.leadership_listeners.append(self._leadership_changed)

    # -- what a subclass provides ---------------------------------------------------------------

    def _topic_layout(self, replication_factor: int) -> tuple[int, dict[str, str]]:
        """The internal topic's partition count and configs."""
        raise NotImplementedError

    def _loaded(self, partition: Partition) -> None:
        """This broker now leads ``partition``: load its state."""
        raise NotImplementedError

    def _unloaded(self, index: int) -> None:
        raise NotImplementedError

    def _running(self) -> bool:
        """Started: leadership changes before that are picked up by the start's own load."""
        raise NotImplementedError

    # -- shared ---------------------------------------------------------------------------------------

    def _partition_count(self, default: int) -> int:
        """A single broker creates its topic now; the count is the topic's if it exists (it fixes which
        partition a key hashes to), else the configured one."""
        if self.topic not in self.topics.topics and not self.clustered:
            partitions, configs = self._topic_layout(1)
            self.topics.create_now(self.topic, partitions, 1, configs)
        info = self.topics.topics.get(self.topic)
        return len(info.assignment) if info is not None else default

    def _led_partitions(self, count: int) -> list[Partition]:
        led = (self.replicas.partition(TopicPartition(self.topic, index)) for index in range(count))
        return [p for p in led if p is not None]

    async def _ensure_topic(self, replication_factor: int, factor_key: str) -> None:
        """ZooKeeper mode: created on first use, its znodes written off the event loop."""
        async def create(factor: int) -> None:
            partitions, configs = self._topic_layout(factor)
            await self.topics.create(self.topic, partitions, factor, configs=configs)
        await ensure_internal_topic(self.topics.topics, len(self.topics.live_brokers()), self.topic,
                                    replication_factor, factor_key, create)

    def _leadership_changed(self, partition: Partition, leader: bool) -> None:
        if partition.tp.topic != self.topic or not self._running():
            return
        if leader:
            self._loaded(partition)
        else:
            self._unloaded(partition.tp.partition)

    def _endpoint(self, index: int) -> LiveBroker | None:
        """The coordinator of a key hashed to partition ``index``: that partition's leader."""
        return self.topics.leader_endpoint(self.topic, index)

    def _append_to(self, index: int, batch: bytearray, timeout_ms: int) -> int | Awaitable[int]:
        try:
            return self.replicas.append_internal(TopicPartition(self.topic, index), batch, timeout_ms)
        except errors.NotLeaderOrFollowerError:
            raise errors.NotCoordinatorError(f"{self.topic}-{index} is not led here") from None
