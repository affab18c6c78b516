"""Binds the group coordinator to this broker: the ``__consumer_offsets`` topic it writes to, the
loading of that topic, and FindCoordinator's answer.

A single broker coordinates every group. In ZooKeeper mode this broker coordinates the groups of
the ``__consumer_offsets`` partitions it leads: it loads a partition when it becomes its leader
and forgets its groups when the leadership moves away (``leadership_changed``). Writes to the
topic wait until the ISR has them (acks=all, as Kafka's appendForGroup), so a commit that was
acknowledged survives the coordinator's death.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Iterator

from kbroker import errors
from kbroker._core import records
from kbroker.coordinator.coordinator import GroupCoordinator
from kbroker.coordinator.group import GroupConfig
from kbroker.coordinator.timer import wall_clock_ms
from kbroker.log import TopicPartition
from kbroker.replication.delayed_produce import append_internal
from kbroker.timers import WheelTimer

if TYPE_CHECKING:
    from kbroker.broker import Broker

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"


class CoordinatorBridge:
    def __init__(self, broker: "Broker") -> None:
        self.broker = broker
        self.coordinator: GroupCoordinator | None = None

    async def start(self) -> None:
        broker = self.broker
        cfg = broker.config
        if OFFSETS_TOPIC not in broker.topics and broker.cluster is None:
            self._create_offsets_topic(1)
        info = broker.topics.get(OFFSETS_TOPIC)
        partitions = len(info.assignment) if info is not None else cfg.offsets_topic_num_partitions
        group_config = dataclasses.replace(GroupConfig.from_broker_config(cfg), offsets_topic_num_partitions=partitions)
        # Session, rebalance and join deadlines run on a Cython timing wheel driven by the loop.
        self.timer = WheelTimer(wall_clock_ms)
        clustered = broker.cluster is not None
        self.coordinator = GroupCoordinator(group_config, append=self._append, clock=wall_clock_ms, timer=self.timer,
                                            active_partitions=() if clustered else None)
        for p in range(partitions):
            if not clustered or broker.partition(TopicPartition(OFFSETS_TOPIC, p)) is not None:
                self.coordinator.begin_loading(p)
                self.coordinator.load_partition(p, self._stored_batches(p))

    def _create_offsets_topic(self, factor: int) -> None:
        cfg = self.broker.config
        self.broker.create_topic(OFFSETS_TOPIC, self.coordinator.config.offsets_topic_num_partitions
                                 if self.coordinator is not None else cfg.offsets_topic_num_partitions, factor,
                                 configs={"cleanup.policy": "compact",
                                          "segment.bytes": str(cfg.offsets_topic_segment_bytes),
                                          "compression.type": "producer"})

    def ensure_offsets_topic(self) -> None:
        """ZooKeeper mode creates ``__consumer_offsets`` on the first FindCoordinator, as Kafka
        does, and only once enough brokers are alive for offsets.topic.replication.factor."""
        ensure_internal_topic(self.broker, OFFSETS_TOPIC, self.broker.config.offsets_topic_replication_factor,
                              "offsets.topic.replication.factor", self._create_offsets_topic)

    def leadership_changed(self, partition: int, leader: bool) -> None:
        """This broker became (or stopped being) the leader of ``__consumer_offsets-<partition>``."""
        if self.coordinator is None:
            return  # start() loads what this broker leads by then
        if leader:
            self.coordinator.begin_loading(partition)
            self.coordinator.load_partition(partition, self._stored_batches(partition))
        else:
            self.coordinator.unload_partition(partition)

    async def stop(self) -> None:
        if self.coordinator is not None:
            self.coordinator.shutdown()
            self.timer.wheel.close()

    def _append(self, partition: int, batch: bytearray):
        try:
            return append_internal(self.broker, TopicPartition(OFFSETS_TOPIC, partition), batch,
                                   self.broker.config.offsets_commit_timeout_ms)
        except errors.NotLeaderOrFollowerError:
            raise errors.NotCoordinatorError(f"{OFFSETS_TOPIC}-{partition} is not led here") from None

    def _stored_batches(self, partition: int) -> Iterator[memoryview]:
        return stored_batches(self.broker, TopicPartition(OFFSETS_TOPIC, partition))


def ensure_internal_topic(broker, name: str, factor: int, factor_key: str, create) -> None:
    """Create an internal topic with ``create(factor)`` unless it exists; refuse with
    COORDINATOR_NOT_AVAILABLE while fewer brokers live than its replication factor."""
    if name in broker.topics:
        return
    live = len(broker.live_brokers())
    if live < factor:
        raise errors.CoordinatorNotAvailableError(
            f"{live} live broker(s) do not meet {factor_key}={factor} for {name}")
    try:
        create(factor)
    except errors.TopicAlreadyExistsError:
        pass  # another broker created it meanwhile


def stored_batches(broker, tp: TopicPartition) -> Iterator[memoryview]:
    """Every whole batch of a partition this broker leads, for loading a coordinator's state."""
    target = broker.partition(tp)
    if target is None:
        return
    plog = target.log
    offset = plog.log_start_offset
    while offset < plog.log_end_offset:
        chunk = plog.read_bytes(offset, 1 << 20)
        headers, valid, _ = records.scan_batches(chunk, verify_crc=True)
        if not headers:
            log.warning("%s: unreadable batch at offset %d; stopping the load there", tp, offset)
            return
        view = memoryview(chunk)
        for h in headers:
            yield view[h.position:h.position + h.size]
        offset = headers[-1].last_offset + 1
