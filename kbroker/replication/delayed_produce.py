"""acks=all (Kafka's DelayedProduce): a Produce whose batches are written on the leader waits in
the purgatory until the high watermark passes each partition's last offset, i.e. until every
replica of the ISR has it. ``check`` runs on every high watermark move and leadership change;
the request's ``timeout_ms`` answers REQUEST_TIMED_OUT for partitions still short."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kbroker import errors
from kbroker.log import TopicPartition
from kbroker.partition import Partition
from kbroker.purgatory import DelayedOperation


class PendingAck:
    __slots__ = ("partition", "required_offset", "out")

    def __init__(self, partition: Partition, required_offset: int, out: dict) -> None:
        self.partition = partition
        self.required_offset = required_offset
        self.out = out


class DelayedProduce(DelayedOperation):
    def __init__(self, hosted: Mapping[TopicPartition, Partition], response: Any, pending: list[PendingAck],
                 version: int) -> None:
        super().__init__()
        self.hosted = hosted  # the replica manager's partitions: one gone or replaced has lost its leadership
        self.response = response
        self.pending = pending
        self.version = version

    def ready(self) -> bool:
        still = []
        for ack in self.pending:
            error = self._check(ack)
            if error is False:
                still.append(ack)
            elif error is not None:
                self._fail(ack, error)
        self.pending = still
        return not still

    def _check(self, ack: PendingAck):
        """None: acknowledged; False: keep waiting; an error: answer it."""
        p = ack.partition
        if self.hosted.get(p.tp) is not p or not p.is_leader:
            return errors.NotLeaderOrFollowerError(f"{p.tp}: leadership moved while waiting for the ISR")
        if p.high_watermark >= ack.required_offset:
            if len(p.isr) < p.log.config.min_insync_replicas:
                return errors.NotEnoughReplicasAfterAppendError(
                    f"{p.tp}: written, but the ISR {p.isr} shrank below min.insync.replicas="
                    f"{p.log.config.min_insync_replicas}")
            return None
        return False

    def _fail(self, ack: PendingAck, exc: errors.KafkaError) -> None:
        ack.out["error_code"] = exc.code
        ack.out["base_offset"] = -1
        if self.version >= 8:
            ack.out["error_message"] = exc.message

    def result(self) -> Any:
        for ack in self.pending:  # timed out
            self._fail(ack, errors.RequestTimedOutError(
                f"{ack.partition.tp}: the ISR did not reach offset {ack.required_offset} in time"))
        self.pending = []
        return self.response

