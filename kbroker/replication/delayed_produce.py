"""acks=all (Kafka's DelayedProduce): a Produce whose batches are written on the leader waits in
the purgatory until the high watermark passes each partition's last offset, i.e. until every
replica of the ISR has it. ``check`` runs on every high watermark move and leadership change;
the request's ``timeout_ms`` answers REQUEST_TIMED_OUT for partitions still short."""
from __future__ import annotations

from kbroker import errors
from kbroker.purgatory import DelayedOperation


class PendingAck:
    __slots__ = ("partition", "required_offset", "out")

    def __init__(self, partition, required_offset: int, out: dict) -> None:
        self.partition = partition
        self.required_offset = required_offset
        self.out = out


class DelayedProduce(DelayedOperation):
    def __init__(self, broker, response: dict, pending: list[PendingAck], version: int) -> None:
        super().__init__()
        self.broker = broker
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
        if self.broker.partitions.get(p.tp) is not p or not p.is_leader:
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

    def result(self) -> dict:
        for ack in self.pending:  # timed out
            self._fail(ack, errors.RequestTimedOutError(
                f"{ack.partition.tp}: the ISR did not reach offset {ack.required_offset} in time"))
        self.pending = []
        return self.response


def append_internal(broker, tp, batch: bytearray, timeout_ms: int):
    """Write ``batch`` to an internal topic's partition this broker leads, with acks=all (as Kafka
    writes __consumer_offsets and __transaction_state): the first offset, or an awaitable of it
    when the ISR does not have it yet. Raises the KafkaError of a refusal."""
    partition = broker.partition(tp)
    if partition is None:
        raise errors.NotLeaderOrFollowerError(f"{tp} is not led here")
    result = partition.append_as_leader(memoryview(batch), -1, from_client=False)
    broker.on_append(partition)
    if partition.high_watermark > result.last_offset:
        return result.first_offset
    return _replicated(broker, partition, result.first_offset, result.last_offset + 1, timeout_ms)


async def _replicated(broker, partition, first_offset: int, required_offset: int, timeout_ms: int) -> int:
    out = {"error_code": 0}
    await broker.purgatory.watch(DelayedProduce(broker, out, [PendingAck(partition, required_offset, out)], 0),
                                 [partition.tp], timeout_ms)
    if out["error_code"]:
        raise errors.for_code(out["error_code"])(f"{partition.tp}: not replicated")
    return first_offset
