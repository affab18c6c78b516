"""Binds the group coordinator to this broker: the ``__consumer_offsets`` topic it writes to, the
loading of that topic, and FindCoordinator's answer.

A single broker coordinates every group. In ZooKeeper mode this broker coordinates the groups of
the ``__consumer_offsets`` partitions it leads: it loads a partition when it becomes its leader
and forgets its groups when the leadership moves away (a leadership listener of the replica
manager). Writes to the topic wait until the ISR has them (acks=all, as Kafka's appendForGroup), so
a commit that was acknowledged survives the coordinator's death.
"""
from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable

from kbroker.clock import wall_ms
from kbroker.config.broker import BrokerConfig
from kbroker.coordinator.binding import InternalTopicBinding
from kbroker.coordinator.group.coordinator import GroupCoordinator
from kbroker.coordinator.group.group import GroupConfig
from kbroker.log import TopicPartition
from kbroker.metadata.zk_view import LiveBroker
from kbroker.replicas.replica_manager import ReplicaManager
from kbroker.replication.partition import Partition
from kbroker.timers import WheelTimer
from kbroker.topics.admin import TopicAdmin
from kbroker.topics.internal import OFFSETS_TOPIC, offsets_topic_configs, stored_batches

log = logging.getLogger(__name__)


class GroupBinding(InternalTopicBinding):
    topic = OFFSETS_TOPIC

    def __init__(self, config: BrokerConfig, replicas: ReplicaManager, topics: TopicAdmin, clustered: bool) -> None:
        super().__init__(config, replicas, topics, clustered)
        self.coordinator: GroupCoordinator | None = None
        replicas.marker_listeners.append(self._marker_written)

    async def start(self) -> None:
        cfg = self.config
        partitions = self._partition_count(cfg.offsets_topic_num_partitions)
        group_config = dataclasses.replace(GroupConfig.from_broker_config(cfg), offsets_topic_num_partitions=partitions)
        # Session, rebalance and join deadlines run on a Cython timing wheel driven by the loop.
        self.timer = WheelTimer(wall_ms)
        self.coordinator = GroupCoordinator(group_config, append=self._append, clock=wall_ms, timer=self.timer,
                                            active_partitions=() if self.clustered else None)
        for index in range(partitions):  # a single broker coordinates every partition's groups
            partition = self.replicas.partition(TopicPartition(OFFSETS_TOPIC, index))
            if not self.clustered or partition is not None:
                self.coordinator.begin_loading(index)
                self.coordinator.load_partition(index, stored_batches(partition))

    def _running(self) -> bool:
        return self.coordinator is not None

    def _loaded(self, partition: Partition) -> None:
        assert self.coordinator is not None
        self.coordinator.begin_loading(partition.tp.partition)
        self.coordinator.load_partition(partition.tp.partition, stored_batches(partition))

    def _unloaded(self, index: int) -> None:
        assert self.coordinator is not None
        self.coordinator.unload_partition(index)

    def _topic_layout(self, replication_factor: int) -> tuple[int, dict[str, str]]:
        partitions = (self.coordinator.config.offsets_topic_num_partitions if self.coordinator is not None
                      else self.config.offsets_topic_num_partitions)
        return partitions, offsets_topic_configs(self.config)

    async def ensure_offsets_topic(self) -> None:
        """ZooKeeper mode creates ``__consumer_offsets`` on the first FindCoordinator, as Kafka
        does, and only once enough brokers are alive for offsets.topic.replication.factor."""
        await self._ensure_topic(self.config.offsets_topic_replication_factor, "offsets.topic.replication.factor")

    def coordinator_endpoint(self, group_id: str) -> LiveBroker | None:
        """The group coordinator: the leader of the group's ``__consumer_offsets`` partition."""
        assert self.coordinator is not None
        return self._endpoint(self.coordinator.partition_for(group_id))

    async def _marker_written(self, producer_id: int, commit: bool, tp: TopicPartition) -> None:
        """A transaction's marker reached a ``__consumer_offsets`` partition: its offsets count (or go)."""
        if tp.topic == OFFSETS_TOPIC and self.coordinator is not None:
            await self.coordinator.complete_txn_offsets(producer_id, commit, tp.partition)

    async def stop(self) -> None:
        if self.coordinator is not None:
            self.coordinator.shutdown()
            self.timer.wheel.close()

    def _append(self, partition: int, batch: bytearray) -> int | Awaitable[int]:
        return self._append_to(partition, batch, self.config.offsets_commit_timeout_ms)
