"""Binds the group coordinator to this broker: the ``__consumer_offsets`` topic it writes to, the
loading of that topic at start, and FindCoordinator's answer."""
from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Iterator

from kbroker import errors
from kbroker._core import records
from kbroker.coordinator.coordinator import GroupCoordinator
from kbroker.coordinator.group import GroupConfig
from kbroker.coordinator.timer import wall_clock_ms
from kbroker.timers import WheelTimer
from kbroker.log import TopicPartition

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
        partitions = cfg.offsets_topic_num_partitions
        if OFFSETS_TOPIC not in broker.topics:
            live = len(broker.live_brokers())
            factor = cfg.offsets_topic_replication_factor
            if factor > live:
                log.warning("offsets.topic.replication.factor=%d but %d broker(s) are alive: creating %s with "
                            "replication factor %d", factor, live, OFFSETS_TOPIC, live)
                factor = live
            try:
                broker.create_topic(OFFSETS_TOPIC, partitions, factor, configs={
                    "cleanup.policy": "compact", "segment.bytes": str(cfg.offsets_topic_segment_bytes),
                    "compression.type": "producer"})
            except errors.TopicAlreadyExistsError:  # ZooKeeper mode: another broker created it meanwhile
                await broker.cluster.refresh()
        partitions = len(broker.topics[OFFSETS_TOPIC].assignment)
        group_config = dataclasses.replace(GroupConfig.from_broker_config(cfg), offsets_topic_num_partitions=partitions)
        # Session, rebalance and join deadlines run on a Cython timing wheel driven by the loop.
        self.timer = WheelTimer(wall_clock_ms)
        self.coordinator = GroupCoordinator(group_config, append=self._append, clock=wall_clock_ms, timer=self.timer)
        for p in range(partitions):
            self.coordinator.begin_loading(p)
            self.coordinator.load_partition(p, self._stored_batches(p))

    async def stop(self) -> None:
        if self.coordinator is not None:
            self.coordinator.shutdown()
            self.timer.wheel.close()

    def _append(self, partition: int, batch: bytearray) -> int:
        target = self.broker.partition(TopicPartition(OFFSETS_TOPIC, partition))
        if target is None:
            from kbroker import errors
            raise errors.NotCoordinatorError(f"{OFFSETS_TOPIC}-{partition} is not hosted here")
        result = target.append_as_leader(memoryview(batch))
        self.broker.on_append(target)
        return result.first_offset

    def _stored_batches(self, partition: int) -> Iterator[memoryview]:
        target = self.broker.partition(TopicPartition(OFFSETS_TOPIC, partition))
        if target is None:
            return
        plog = target.log
        offset = plog.log_start_offset
        while offset < plog.log_end_offset:
            chunk = plog.read_bytes(offset, 1 << 20)
            headers, valid, _ = records.scan_batches(chunk, verify_crc=True)
            if not headers:
                log.warning("%s-%d: unreadable batch at offset %d; stopping the load there",
                            OFFSETS_TOPIC, partition, offset)
                return
            view = memoryview(chunk)
            for h in headers:
                yield view[h.position:h.position + h.size]
            offset = headers[-1].last_offset + 1
