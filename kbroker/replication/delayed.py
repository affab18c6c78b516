"""The delayed operations of the data path (Kafka's DelayedProduce and DelayedFetch): the replica manager
parks them in the purgatory (``kbroker.replication.purgatory``), whose checks and timeouts complete them.

acks=all (``DelayedProduce``): a Produce whose batches are written on the leader waits until the high
watermark passes each partition's last offset, i.e. until every replica of the ISR has it. ``check`` runs
on every high watermark move and leadership change; the request's ``timeout_ms`` answers REQUEST_TIMED_OUT
for partitions still short.

min_bytes (``DelayedFetch``): a Fetch with less than ``min_bytes`` to read waits until an append or a high
watermark move gives it enough, or ``max_wait_ms``.
"""
from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import Literal, TypeVar

from kbroker import errors
from kbroker.log import TopicPartition
from kbroker.metrics.hops import HOPS
from kbroker.protocol import message_types as msg
from kbroker.replication.fetch_read import FetchRead, PartitionAnswers
from kbroker.replication.partition import Partition
from kbroker.replication.purgatory import DelayedOperation

R = TypeVar("R")


class PendingAck:
    __slots__ = ("partition", "required_offset", "out")

    def __init__(self, partition: Partition, required_offset: int, out: msg.ProduceResponse_PartitionResponse) -> None:
        self.partition = partition
        self.required_offset = required_offset
        self.out = out


class DelayedProduce(DelayedOperation[R]):
    """Answers ``response`` (whose partition answers the ``pending`` acknowledgements fill in) once the ISR has
    every write."""

    def __init__(self, hosted: Mapping[TopicPartition, Partition], response: R, pending: list[PendingAck]) -> None:
        super().__init__()
        self.hosted = hosted  # the replica manager's partitions: one gone or replaced has lost its leadership
        self.response = response
        self.pending = pending

    def ready(self) -> bool:
        still = []
        for ack in self.pending:
            error = self._check(ack)
            if error is False:
                still.append(ack)
            elif error is not None:
                self._fail(ack, error)
            elif HOPS.on:
                HOPS.mark("acked", ack.partition.tp.topic, ack.partition.tp.partition, ack.required_offset)
        self.pending = still
        return not still

    def _check(self, ack: PendingAck) -> errors.KafkaError | Literal[False] | None:
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
        ack.out["error_message"] = exc.message  # Produce v8+ carries it; older answers leave it out

    def result(self) -> R:
        for ack in self.pending:  # timed out
            self._fail(ack, errors.RequestTimedOutError(
                f"{ack.partition.tp}: the ISR did not reach offset {ack.required_offset} in time"))
        self.pending = []
        return self.response


class DelayedFetch(DelayedOperation[R]):
    """A fetch waiting for ``min_bytes`` (Kafka's DelayedFetch).

    ``ready`` runs in every purgatory check of its partitions: after each append and each high
    watermark move, so several times per produced batch on a replicated partition. As Kafka's
    tryComplete compares offsets before reading anything, it first compares what the evaluation
    depends on (``_inputs``: the partition hosted as leader, its epoch, whether its log is
    online, its log start offset and the end a read stops at: the log end offset for a follower,
    the high watermark or last stable offset for a consumer) with the last evaluation's, and
    evaluates the fetch again only when one of them moved: a follower's fetch is not read again
    for a high watermark move, a consumer's not for an append below the high watermark.

    A check names the partition that moved (``ready_after``): only that partition's inputs are compared, so
    a follower's fetch over thousands of partitions costs one comparison per append of one of them, not one
    per partition; the fetch is read again (all of it, for the answer) only when that partition moved.
    A follower's fetch also waits on its session's quiet partitions (``kbroker.replication.quiet``), which it
    did not read: a check of the session reads those that woke.

    ``fetch`` is ``fetch_messages``' evaluation, just made: ``_inputs`` are taken at construction, so
    the purgatory's first ``ready`` (in ``watch``) does not read the logs a second time. ``respond`` shapes the
    answer from what the fetch read (the Fetch handler's: session, quota, version)."""

    def __init__(self, fetch: FetchRead, min_bytes: int, respond: Callable[[PartitionAnswers], R]) -> None:
        super().__init__()
        self.fetch = fetch
        self.min_bytes = min_bytes
        self.respond = respond
        self._tps = [TopicPartition(topic, index) for topic, index, *_ in fetch.wanted]
        self._last_inputs = self._inputs()
        self._at: dict[TopicPartition, int] | None = None  # each partition's place in _tps (at the first check)
        self._satisfied = False  # the last ``ready`` evaluated the fetch and found enough

    def _inputs(self) -> list[tuple[object, ...] | None]:
        return [self._input(tp) for tp in self._tps]

    def _input(self, tp: TopicPartition) -> tuple[object, ...] | None:
        """What this fetch's read of ``tp`` depends on: the partition hosted as leader, its epoch, whether its log
        is online, its log start offset and where a read stops (a follower: the log end; a consumer: the high
        watermark or the last stable offset)."""
        fetch = self.fetch
        p = fetch.replicas.partition(tp)
        if p is None:
            return None
        plog = p.log
        end: tuple[int, bool] | int
        if fetch.from_follower:
            end = (plog.log_end_offset, fetch.params.replica_id in p.followers)
        else:
            end = p.last_stable_offset if fetch.params.isolation_level == 1 else plog.high_watermark
        return (p, p.leader_epoch, plog.offline, plog.log_start_offset, end)

    def ready(self) -> bool:
        inputs = self._inputs()
        if inputs == self._last_inputs:
            return False  # the first evaluation (or the last check) found too little, and nothing it read moved
        self._last_inputs = inputs
        return self._evaluate()

    def ready_after(self, key: Hashable) -> bool:
        if self._at is None:
            self._at = {tp: i for i, tp in enumerate(self._tps)}
        i = self._at.get(key) if isinstance(key, TopicPartition) else None
        if i is None:
            if key is self.fetch.quiet and self.fetch.quiet is not None:
                return self._woken(self.fetch.quiet.take_moved())
            return self.ready()
        now = self._input(self._tps[i])
        if now == self._last_inputs[i]:
            return False  # what this fetch reads of that partition did not move
        self._last_inputs[i] = now
        return self._evaluate()

    def _woken(self, entries: list[tuple[str, int, int, int, int]]) -> bool:
        """Quiet partitions of the follower's session that this fetch skipped moved: it reads them from now on."""
        if not entries:
            return False
        assert self._at is not None
        for entry in entries:
            tp = TopicPartition(entry[0], entry[1])
            if tp not in self._at:
                self.fetch.add(entry)
                self._at[tp] = len(self._tps)
                self._tps.append(tp)
                self._last_inputs.append(self._input(tp))
        return self._evaluate()

    def _evaluate(self) -> bool:
        self.fetch.run()
        self._satisfied = self.fetch.bytes >= self.min_bytes or self.fetch.errors
        return self._satisfied

    def result(self) -> R:
        if not self._satisfied:
            # Timed out: evaluate once more so the answer carries the current offsets (a follower's
            # high watermark may have moved since the first evaluation without a new read).
            self.fetch.run()
        return self.respond(self.fetch.answers())
