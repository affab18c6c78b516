"""One partition as this broker hosts it: its log, leader epoch, producer state and the offsets
consumers may see. Errors become Kafka codes here, at the partition boundary.

Single-replica partitions (the embedded, ZooKeeper-less mode) have an ISR of this broker only, so
the high watermark follows the log end offset as soon as an append is written.
"""
from __future__ import annotations

import logging
from typing import NamedTuple

from kbroker import errors
from kbroker.log import FileSlice, PartitionLog, TopicPartition
from kbroker.log.partition_log import AppendResult
from kbroker.log.producer_state import ProducerStateManager

log = logging.getLogger(__name__)

READ_UNCOMMITTED = 0
READ_COMMITTED = 1


class ReadResult(NamedTuple):
    records: FileSlice | None
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int


class Partition:
    def __init__(self, tp: TopicPartition, plog: PartitionLog, broker_id: int, leader_epoch: int = 0) -> None:
        self.tp = tp
        self.log = plog
        self.leader_epoch = leader_epoch
        self.replicas = [broker_id]
        self.isr = [broker_id]
        self.leader_id = broker_id
        self.producer_state = ProducerStateManager()
        self._rebuild_producer_state()
        if len(self.isr) == 1:
            plog.update_high_watermark(plog.log_end_offset)

    def _rebuild_producer_state(self) -> None:
        """Replay batch headers so sequence checks survive a restart."""
        for header in self.log.batch_headers(self.log.log_start_offset):
            if header.producer_id >= 0 and not header.is_control:
                self.producer_state.update(header.producer_id, header.producer_epoch, header.base_sequence,
                                           header.last_sequence, header.base_offset, header.last_offset,
                                           header.max_timestamp)

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    def append_as_leader(self, batches: memoryview) -> AppendResult:
        """Validate, check producer sequences, write. A duplicate of one of the producer's last
        five batches is answered with its original offsets and not written again."""
        plog = self.log
        info = plog.validate(batches)
        if info.producer_id >= 0:
            duplicate = self.producer_state.check(info.producer_id, info.producer_epoch, info.base_sequence,
                                                  info.last_sequence)
            if duplicate is not None:
                log.debug("%s: duplicate batch of producer %d (seq %d-%d)", self.tp, info.producer_id,
                          duplicate.first_sequence, duplicate.last_sequence)
                return AppendResult(duplicate.first_offset, duplicate.last_offset, -1, duplicate.timestamp,
                                    0, 0)
        result = plog.append_validated(batches, info, self.leader_epoch)
        if info.producer_id >= 0:
            self.producer_state.update(info.producer_id, info.producer_epoch, info.base_sequence,
                                       info.last_sequence, result.first_offset, result.last_offset,
                                       result.max_timestamp)
        if len(self.isr) == 1:
            plog.update_high_watermark(plog.log_end_offset)
        return result

    def read(self, offset: int, max_bytes: int, isolation_level: int, from_follower: bool,
             min_one_batch: bool) -> ReadResult:
        plog = self.log
        hw = plog.high_watermark
        upper = None if from_follower else hw  # no transactions yet: the LSO is the high watermark
        records = plog.read(offset, max_bytes, upper, min_one_batch)
        return ReadResult(records, hw, hw, plog.log_start_offset)

    def offset_for_timestamp(self, timestamp: int, isolation_level: int) -> tuple[int, int] | None:
        """ListOffsets: latest answers the high watermark (what consumers can read), as Kafka."""
        if timestamp == -1:
            return self.log.high_watermark, -1
        found = self.log.offset_for_timestamp(timestamp)
        if found is not None and found[0] >= self.log.high_watermark:
            return None
        return found


def error_code_of(exc: BaseException) -> int:
    return exc.code if isinstance(exc, errors.KafkaError) else errors.UnknownServerError.code
