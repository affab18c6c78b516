"""Moves partitions between the log dirs of this broker (Kafka's ReplicaAlterLogDirsThread): one loop task
per moving partition catches its future log up with the current one and swaps it in.

Each round plans on the event loop what the future lacks (``future_replica.plan``) and copies it on the
mover's worker thread, so the loop keeps serving while most of the log is copied. Once what is left is
small (``SWAP_BYTES``), or a round found nothing new, the rest is copied and the logs swapped in one go
on the loop: nothing appends to the partition meanwhile (the loop is its append lock), so the writes
that landed during the copy are all in the new log.

``replica.alter.log.dirs.io.max.bytes.per.second`` bounds the copy (Kafka's ReplicaAlterLogDirsThread
fetches nothing while its quota is exceeded and records what it appended): while the quota is exceeded a
move waits, and a throttled round copies at most about one second's worth of the bound.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from kbroker import errors
from kbroker.log import future_replica
from kbroker.log.log_manager import LogManager
from kbroker.log.names import TopicPartition
from kbroker.log.partition_log import PartitionLog

log = logging.getLogger(__name__)

# Copied on the loop before the swap, at most: a few milliseconds of disk work that holds every request.
SWAP_BYTES = 1 << 20
# A throttled move: how long it waits while the quota is exceeded, and the least it copies in a round.
THROTTLE_WAIT_S = 0.1
MIN_THROTTLED_ROUND = 64 << 10


class ByteQuota(Protocol):
    """A bytes/s ceiling (kbroker.replication.throttle.ReplicationQuota): asked first, told after."""

    @property
    def bounded(self) -> bool: ...

    @property
    def bound(self) -> int: ...

    def exceeded(self) -> bool: ...

    def record(self, size: int) -> None: ...


class LogDirMover:
    def __init__(self, log_manager: LogManager,
                 prepare: Callable[[TopicPartition, PartitionLog], None] | None = None,
                 swapped: Callable[[TopicPartition, PartitionLog], None] | None = None,
                 quota: ByteQuota | None = None) -> None:
        self.log_manager = log_manager
        self.prepare = prepare    # write what else follows the partition into the future's dir
        self.swapped = swapped    # the new current log is in place
        self.quota = quota        # replica.alter.log.dirs.io.max.bytes.per.second
        self.tasks: dict[TopicPartition, asyncio.Task[None]] = {}
        self._executor: ThreadPoolExecutor | None = None
        self.bytes_copied = 0
        self._flushed_size: dict[TopicPartition, int] = {}
        self._too_short: dict[TopicPartition, int] = {}  # throttled rounds in a row that copied nothing
        self._stopping = threading.Event()

    def start(self, tp: TopicPartition) -> None:
        """Catch ``tp``'s future log up and swap it in (nothing if a task does already)."""
        task = self.tasks.get(tp)
        if task is None or task.done():
            self.tasks[tp] = asyncio.get_running_loop().create_task(self._run(tp), name=f"move {tp}")

    def stop(self) -> None:
        """Cancel every move (each resumes at the next start); a worker round in flight stops after
        its current chunk, and this returns once it has."""
        self._stopping.set()
        for task in self.tasks.values():
            task.cancel()
        self.tasks.clear()
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    def _worker(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="log-dir-mover")
        return self._executor

    async def _run(self, tp: TopicPartition) -> None:
        try:
            while await self._round(tp):
                pass
        except asyncio.CancelledError:
            raise
        except errors.KafkaError as exc:
            log.warning("%s: move stopped: %s", tp, exc)
            self._abandon(tp)
        except Exception:
            log.exception("%s: move failed", tp)
            self._abandon(tp)
        finally:
            self._flushed_size.pop(tp, None)
            self._too_short.pop(tp, None)
            if self.tasks.get(tp) is asyncio.current_task():
                del self.tasks[tp]

    def _abandon(self, tp: TopicPartition) -> None:
        """Stop the move; a write to the future log that failed takes its log dir offline, as any I/O error."""
        lm = self.log_manager
        future, failed = lm.future_logs.get(tp), lm.future_errors.get(tp)
        lm.remove_future_log(tp)
        if future is not None and failed is not None:
            lm.mark_dir_offline(future.directory.parent, failed)

    async def _round(self, tp: TopicPartition) -> bool:
        """One catch-up round; False once the move is over (swapped, or the future log is gone)."""
        lm = self.log_manager
        current, future = lm.logs.get(tp), lm.future_logs.get(tp)
        if current is None or future is None:
            return False
        if tp in lm.future_errors or future.offline:
            self._abandon(tp)
            return False
        self._follow_truncation(current, future)
        try:
            ranges = future_replica.plan(current, future.log_end_offset)
        except errors.OffsetOutOfRangeError:  # retention or DeleteRecords passed the copy's end
            future.truncate_fully_and_start_at(current.log_start_offset)
            return True
        loop = asyncio.get_running_loop()
        pending = future_replica.pending_bytes(ranges)
        quota = self.quota if self.quota is not None and self.quota.bounded else None
        if quota is not None and pending and quota.exceeded():
            future_replica.close_ranges(ranges)
            await asyncio.sleep(THROTTLE_WAIT_S)
            return True
        if pending > SWAP_BYTES:
            trimmed = quota is not None
            if quota is not None:
                # about a second of the bound; twice as much after a round too short for one whole batch
                limit = max(MIN_THROTTLED_ROUND, min(quota.bound, 4 * SWAP_BYTES)) << self._too_short.get(tp, 0)
                ranges = _first_bytes(ranges, limit)
            lm.copying[tp] = future
            try:
                copied = await loop.run_in_executor(
                    self._worker(), future_replica.copy, future, ranges, future_replica.COPY_CHUNK, self._stopping)
            finally:
                lm.end_copy(tp, future)
            self._copied(copied)
            if trimmed:
                self._too_short[tp] = self._too_short.get(tp, 0) + 1 if copied == 0 else 0
            return True
        if future.size_bytes - self._flushed_size.get(tp, 0) > 4 * SWAP_BYTES:
            # The swap makes the copy durable first: most of it on the worker, not on the loop.
            future_replica.close_ranges(ranges)
            lm.copying[tp] = future
            try:
                await loop.run_in_executor(self._worker(), future.flush)
                self._flushed_size[tp] = future.size_bytes
            finally:
                lm.end_copy(tp, future)
            return True
        # The rest, then the swap, without yielding: no append can come in between.
        self._copied(future_replica.copy(future, ranges))
        if lm.future_logs.get(tp) is not future or future.offline:
            return True  # the next round sees why
        self._follow_truncation(current, future)
        if future.log_end_offset != current.log_end_offset:
            return True
        replacement = lm.replace_current_with_future(
            tp, None if self.prepare is None else (lambda f: self.prepare(tp, f)))  # type: ignore[misc]
        if self.swapped is not None:
            self.swapped(tp, replacement)
        return False

    def _copied(self, size: int) -> None:
        self.bytes_copied += size
        if self.quota is not None:
            self.quota.record(size)

    def _follow_truncation(self, current: PartitionLog, future: PartitionLog) -> None:
        """The current log was truncated (a follower diverging from its leader) or is shorter (recovered
        shorter after a crash): the copy drops what the current log no longer has."""
        cut = self.log_manager.take_truncation(current)
        if cut is not None and future.log_end_offset > cut:
            future.truncate_to(cut)
        if future.log_end_offset > current.log_end_offset:
            future.truncate_to(current.log_end_offset)


def _first_bytes(ranges: list[future_replica.CopyRange], limit: int) -> list[future_replica.CopyRange]:
    """The first ``limit`` bytes of ``ranges`` (the last one cut; ``copy`` appends only whole batches and the
    next round plans from where the copy ended); the ranges left out are closed."""
    kept = []
    for r in ranges:
        if limit <= 0:
            future_replica.close_ranges([r])
            continue
        r.end = min(r.end, r.start + limit)
        limit -= r.end - r.start
        kept.append(r)
    return kept
