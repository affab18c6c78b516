"""Log compaction (Kafka's LogCleaner): keep only the latest record of each key.

For logs whose ``cleanup.policy`` includes ``compact``. Kafka's model:

* **Cleaner checkpoint.** Per log the first dirty offset, in ``cleaner-offset-checkpoint`` of its
  log dir: below it the log was cleaned before, from it on it is dirty.
* **Choosing a log.** The cleanable section ends at the first uncleanable offset: the smallest of
  the active segment's base, the high watermark (and the last stable offset when the broker gives
  one), and the base of the first segment holding a record newer than ``min.compaction.lag.ms``;
  rounded down to a segment boundary, so only whole, inactive segments are ever cleaned. The dirty
  ratio is the bytes of the dirty cleanable segments over the bytes of every cleanable segment; the
  log with the highest ratio >= ``min.cleanable.dirty.ratio`` is cleaned first, and so is a log whose
  first dirty batch is older than ``max.compaction.lag.ms`` whatever its ratio.
* **Cleaning.** An offset map key -> last offset is built over the dirty section (compressed
  batches are decompressed; control batches and keyless records are not keys; nor are records
  of transactions not known committed in the cleanable range, which are kept untouched). Then every
  cleanable segment from the log start is rewritten: a record survives if it is the latest of its
  key (or its key is not in the map) and it has a key; a tombstone (null value) survives only in a
  segment modified after the delete horizon (the last modified time of the last segment cleaned
  before, minus ``delete.retention.ms``), so tombstones take two passes and at least
  ``delete.retention.ms`` to vanish. Offsets never change: a batch whose records all survive is
  copied byte for byte; a batch that lost some keeps its header (base offset, last offset delta,
  producer id/epoch/base sequence, leader epoch, codec) with the surviving records' bytes,
  recompressed with the same codec; a batch that lost all is dropped, unless it is a control batch
  (kept whole) or the last batch of its producer in the cleaned range (kept as an empty batch, so
  the producer state rebuilt from batch headers keeps its last sequence). Consecutive segments are
  grouped into one cleaned segment while their sizes add up to at most ``segment.bytes``; a
  segment with a ``.txnindex`` always starts a group, so that file (named after its base, never
  touched here) stays right: aborted transactions and their markers are never removed.
* **Swap** (in ``PartitionLog.replace_segments``, on the log's own thread; the file steps are in
  ``swap.py``): ``<base>.log.cleaned`` and its indexes are renamed ``.swap``, the old segments
  ``.deleted`` (removed after ``file.delete.delay.ms``, a fetch may still send from them), the
  ``.swap`` files to their final names. ``swap.complete_interrupted_swaps`` finishes or rolls back
  on the next start.

Records are read and batches rebuilt with ``batches.py``; this module decides what survives.

Threading: the scan and copy (``run_job``) read only inactive segments, through duplicated file
descriptors taken when the job is prepared, and write only ``*.cleaned`` files; they run in a
cleaner process (``cleaner_worker``, one per cleaner thread of ``cleaner_threads``) or on the
cleaner thread itself. Preparing a job and swapping its result in happen on the thread that owns the logs
(``LogManager.clean``), which checks that the source segments are still the same objects before
swapping: a log truncated, deleted or shrunk by retention in between just discards the result.
"""
from __future__ import annotations

import bisect
import dataclasses
import fcntl
import logging
import mmap
import os
import random
import struct
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from kbroker._core import records
from kbroker._core.index import OffsetIndex, TimeIndex
from kbroker.config.topic import INT64_MAX, LogConfig
from kbroker.crashpoints import crash_point
from kbroker.log import batches, legacy
from kbroker.log.names import CLEANED_SUFFIX, TopicPartition, segment_file_stem, segment_paths
from kbroker.log.producer_snapshot import TXN_INDEX_SUFFIX
from kbroker.log.swap import remove_segment_files

if TYPE_CHECKING:
    from kbroker.log.partition_log import PartitionLog
    from kbroker.log.segment import Segment

log = logging.getLogger(__name__)

INT32_MAX = (1 << 31) - 1
_WRITE_CHUNK = 1 << 20

# Run before a crash point in this module kills the process: a cleaner process (cleaner_worker) kills its broker
# first, as the machine's crash that the point stands for would.
before_crash: Callable[[random.Random], object] | None = None


class CleanerAborted(Exception):
    """The job was cancelled (its log is being deleted or the broker stops)."""


# -- jobs -----------------------------------------------------------------------------------------

@dataclass
class Source:
    """An inactive segment as the job saw it: the object (to check it is still there at swap
    time), a duplicated fd (reads survive a concurrent delete), its size and mtime."""
    segment: Segment
    fd: int
    base_offset: int
    size: int
    mtime_ns: int
    index_entries: int
    has_txn_index: bool = False  # a <base>.txnindex (aborted transactions) belongs to this base


@dataclass
class CleanStats:
    logs_cleaned: int = 0
    segments_read: int = 0
    segments_written: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_removed: int = 0
    batches_emptied: int = 0
    discarded: int = 0  # results thrown away because the log changed under the job

    def add(self, other: CleanStats) -> None:
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


@dataclass(eq=False)  # a job is itself (the cleaner's set of jobs in flight)
class CleanJob:
    plog: PartitionLog
    tp: TopicPartition
    directory: Path
    config: LogConfig
    first_dirty: int
    end_offset: int             # first uncleanable offset: a segment boundary
    delete_horizon_ms: int
    sources: list[Source]        # every cleanable segment, from the log start
    dirty_from: int              # index in sources of the first dirty segment
    groups: list[list[int]] = field(default_factory=list)  # indexes into sources
    cleaned: list[int] = field(default_factory=list)        # group indexes whose .cleaned files exist
    stats: CleanStats = field(default_factory=CleanStats)
    error: BaseException | None = None
    cancelled: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    throttle: Callable[[int], None] | None = None  # log.cleaner.io.max.bytes.per.second, given the bytes read

    def close_fds(self) -> None:
        for source in self.sources:
            if source.fd >= 0:
                os.close(source.fd)
                source.fd = -1

    def remove_cleaned_files(self, groups: list[list[int]] | None = None) -> None:
        for group in self.groups if groups is None else groups:
            for path in segment_paths(self.directory, self.sources[group[0]].base_offset, CLEANED_SUFFIX):
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
                except OSError as exc:  # its directory failed: the next start deletes *.cleaned
                    log.warning("could not remove %s: %s", path, exc)


@dataclass(frozen=True)
class Cleanable:
    """What ``cleanable_range`` found for one log."""
    first_dirty: int
    end_offset: int
    first_dirty_index: int
    end_index: int
    dirty_bytes: int
    total_bytes: int
    must_clean: bool

    @property
    def ratio(self) -> float:
        return self.dirty_bytes / self.total_bytes if self.total_bytes else 0.0


def cleanable_range(plog: PartitionLog, checkpoint_offset: int | None, now: int,
                    last_stable_offset: int | None = None) -> Cleanable | None:
    """The cleanable section of a compacted log (see the module doc); None when it has none."""
    if plog.offline or not plog.config.compact:
        return None
    segments = plog.segments
    bases = [s.base_offset for s in segments]
    first_dirty = checkpoint_offset if checkpoint_offset is not None else plog.log_start_offset
    if first_dirty < plog.log_start_offset or first_dirty > plog.log_end_offset:
        first_dirty = plog.log_start_offset
    uncleanable = min(plog.active.base_offset, plog.high_watermark)
    if last_stable_offset is not None:
        uncleanable = min(uncleanable, last_stable_offset)
    first_dirty_index = max(0, bisect.bisect_right(bases, first_dirty) - 1)
    lag = plog.config.min_compaction_lag_ms
    if lag > 0:
        for segment in segments[first_dirty_index:-1]:
            if segment.largest_timestamp() > now - lag:
                uncleanable = min(uncleanable, segment.base_offset)
                break
    end_index = bisect.bisect_right(bases, uncleanable) - 1  # segments [0, end_index) are whole below it
    if end_index <= 0 or first_dirty_index >= end_index:
        return None
    # A checkpoint inside a segment (it never is after our own cleaning) counts that segment dirty.
    dirty = sum(s.size for s in segments[first_dirty_index:end_index])
    total = sum(s.size for s in segments[:end_index])
    must = False
    if plog.config.max_compaction_lag_ms < INT64_MAX:
        first = segments[first_dirty_index]
        ts = first.rolling_base_timestamp if first.rolling_base_timestamp >= 0 else first.created_ms
        must = ts < now - plog.config.max_compaction_lag_ms
    return Cleanable(bases[first_dirty_index], bases[end_index], first_dirty_index, end_index, dirty, total, must)


def should_clean(found: Cleanable | None, config: LogConfig) -> bool:
    return (found is not None and found.dirty_bytes > 0
            and (found.must_clean or found.ratio >= config.min_cleanable_dirty_ratio))


def prepare_job(plog: PartitionLog, found: Cleanable) -> CleanJob:
    """On the log's thread: snapshot the cleanable segments (duplicated fds) and group them."""
    segments = plog.segments[:found.end_index]
    sources = []
    try:
        for segment in segments:
            fd = os.dup(segment.fd)
            txn_index = plog.directory / f"{segment_file_stem(segment.base_offset)}{TXN_INDEX_SUFFIX}"
            sources.append(Source(segment, fd, segment.base_offset, segment.size,
                                  os.fstat(fd).st_mtime_ns, segment.offset_index.entries, txn_index.exists()))
    except OSError:
        for source in sources:
            os.close(source.fd)
        raise
    # Kafka's delete horizon: the last modified time of the last segment cleaned before.
    horizon = 0
    if found.first_dirty_index > 0:
        horizon = sources[found.first_dirty_index - 1].mtime_ns // 1_000_000 - plog.config.delete_retention_ms
    job = CleanJob(plog, plog.tp, plog.directory, plog.config, found.first_dirty, found.end_offset, horizon,
                   sources, found.first_dirty_index)
    job.groups = group_sources(sources, found.end_offset, plog.config)
    return job


def group_sources(sources: list[Source], end_offset: int, config: LogConfig) -> list[list[int]]:
    """Consecutive segments whose sizes add up to at most segment.bytes, whose index entries fit
    one index, and whose offsets stay addressable from the group's base (Kafka's groupSegmentsBySize)."""
    max_entries = config.segment_index_bytes // 8
    groups: list[list[int]] = []
    i = 0
    while i < len(sources):
        group = [i]
        size, entries = sources[i].size, sources[i].index_entries
        j = i + 1
        while j < len(sources):
            nxt = sources[j + 1].base_offset if j + 1 < len(sources) else end_offset
            if (sources[j].has_txn_index  # its .txnindex is named after its base: it starts a group
                    or size + sources[j].size > config.segment_bytes
                    or entries + sources[j].index_entries + 1 > max_entries
                    or nxt - 1 - sources[i].base_offset > INT32_MAX):
                break
            size += sources[j].size
            entries += sources[j].index_entries
            group.append(j)
            j += 1
        groups.append(group)
        i = j
    return groups


def _source_batches(job: CleanJob, source: Source) -> Iterator[tuple[records.BatchHeader, mmap.mmap]]:
    """(header, the segment mapped read-only) for each batch of a source segment, read through its
    own fd; a batch's bytes are ``mapping[header.position:header.position + header.size]`` (a
    copy). Raises CleanerAborted once the job is cancelled."""
    if source.size == 0:
        return
    with mmap.mmap(source.fd, source.size, prot=mmap.PROT_READ) as mm:
        with memoryview(mm) as view:  # released before the mapping closes
            headers, _, _ = records.scan_batches(view, verify_crc=False)
        for header in headers:
            if job.cancelled.is_set():
                raise CleanerAborted()
            if job.throttle is not None:
                job.throttle(header.size)
            yield header, mm


def scan_producers(job: CleanJob) -> tuple[dict[int, int], set[int]]:
    """Over every cleanable segment: producer id -> last offset of its last batch, and the base
    offsets of transactional batches that are not known committed (aborted, or no marker yet in
    the cleanable range). Those never enter the offset map and are kept as they are: an aborted
    or undecided record must not hide the committed value before it."""
    last_batch: dict[int, int] = {}
    open_txn: dict[int, list[int]] = {}
    unsafe: set[int] = set()
    for source in job.sources:
        for header, mm in _source_batches(job, source):
            pid = header.producer_id
            if pid >= 0:
                last_batch[pid] = header.last_offset
            if not header.is_transactional:
                continue
            if not header.is_control:
                open_txn.setdefault(pid, []).append(header.base_offset)
                continue
            marker = batches.read_marker(mm[header.position:header.position + header.size])
            transaction = open_txn.pop(pid, [])
            if marker is None or marker[0] != batches.COMMIT:
                unsafe.update(transaction)
    for transaction in open_txn.values():
        unsafe.update(transaction)
    return last_batch, unsafe


def build_offset_map(job: CleanJob) -> tuple[dict[bytes, int], dict[int, int], set[int]]:
    """key -> last offset over the dirty segments, plus what ``scan_producers`` found."""
    last_batch, unsafe = scan_producers(job)
    offset_map: dict[bytes, int] = {}
    for source in job.sources[job.dirty_from:]:
        for header, mm in _source_batches(job, source):
            if header.is_control or header.base_offset in unsafe:
                continue
            if header.magic < 2:  # magic 0/1 messages (message.format.version < 0.11)
                for m in legacy.read_records(mm[header.position:header.position + header.size], verify_crc=False):
                    if m.key is not None:
                        offset_map[m.key] = m.offset
                continue
            section = batches.records_section(mm[header.position:header.position + header.size], header)
            for _, _, offset_delta, _, key, _ in batches.iter_records(section, header.record_count):
                if key is not None:
                    offset_map[key] = header.base_offset + offset_delta
    return offset_map, last_batch, unsafe


class _CleanedWriter:
    """``<base>.log.cleaned`` and its two indexes, filled batch by batch as Segment.append would."""

    def __init__(self, directory: Path, base: int, config: LogConfig) -> None:
        self.paths = segment_paths(directory, base, CLEANED_SUFFIX)
        remove_segment_files(directory, base, CLEANED_SUFFIX)
        self.config = config
        self.fd = os.open(self.paths[0], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        self.offset_index = OffsetIndex(str(self.paths[1]), base, config.segment_index_bytes, True)
        self.time_index = TimeIndex(str(self.paths[2]), base, config.segment_index_bytes, True)
        self.buffer = bytearray()
        self.position = 0
        self.since_index = 0
        self.max_timestamp, self.offset_of_max = -1, base

    def add(self, batch: records.Buffer, last_offset: int, max_timestamp: int) -> None:
        if max_timestamp > self.max_timestamp:
            self.max_timestamp, self.offset_of_max = max_timestamp, last_offset
        if self.since_index > self.config.index_interval_bytes:
            try:
                self.offset_index.append(last_offset, self.position)
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max)
            except IndexError:
                pass  # full: lookups scan a little further
            self.since_index = 0
        self.since_index += len(batch)
        self.position += len(batch)
        self.buffer += batch
        if len(self.buffer) >= _WRITE_CHUNK:
            self._write()

    def _write(self) -> None:
        pos = 0
        while pos < len(self.buffer):
            with memoryview(self.buffer)[pos:] as view:
                pos += os.write(self.fd, view)
        self.buffer.clear()

    def finish(self, mtime_ns: int) -> int:
        """Write the rest, fsync everything, give the log file the sources' mtime; returns its size."""
        try:
            self._write()
            crash_point("cleaner.cleaned.before_fsync", before_crash)
            try:
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max)
            except IndexError:
                pass
            self.offset_index.trim()
            self.time_index.trim()
            self.offset_index.flush()
            self.time_index.flush()
            os.fsync(self.fd)
        finally:
            self.close()
        os.utime(self.paths[0], ns=(mtime_ns, mtime_ns))
        return self.position

    def close(self) -> None:
        if self.fd >= 0:
            self.offset_index.close()
            self.time_index.close()
            os.close(self.fd)
            self.fd = -1


def clean_group(job: CleanJob, group: list[int], offset_map: dict[bytes, int], last_batch: dict[int, int],
                unsafe: set[int] | frozenset[int] = frozenset()) -> None:
    sources = [job.sources[i] for i in group]
    writer = _CleanedWriter(job.directory, sources[0].base_offset, job.config)
    stats = job.stats
    try:
        for source in sources:
            stats.segments_read += 1
            stats.bytes_read += source.size
            retain_deletes = source.mtime_ns // 1_000_000 > job.delete_horizon_ms
            for header, mm in _source_batches(job, source):
                batch = mm[header.position:header.position + header.size]
                if header.magic < 2:  # magic 0/1 messages: the same rules, message by message
                    kept = legacy.retained(batch, _legacy_rule(offset_map, retain_deletes))
                    stats.records_read += kept.read
                    stats.records_removed += kept.read - kept.kept
                    if kept.data:
                        writer.add(kept.data, kept.last_offset, kept.max_timestamp)
                    continue
                out: tuple[bytes, int] | None
                if header.base_offset in unsafe:
                    stats.records_read += header.record_count
                    out = (batch, header.max_timestamp)
                else:
                    out = _filter_batch(batch, header, offset_map, last_batch, retain_deletes, stats)
                if out is not None:
                    writer.add(out[0], header.last_offset, out[1])
        stats.bytes_written += writer.finish(max(s.mtime_ns for s in sources))
        stats.segments_written += 1
    except BaseException:
        writer.close()
        remove_segment_files(job.directory, sources[0].base_offset, CLEANED_SUFFIX)
        raise


def _legacy_rule(offset_map: dict[bytes, int], retain_deletes: bool) -> legacy.Keep:
    """_filter_batch's rules for one magic 0/1 message: keyed, its key's latest, no tombstone past the horizon."""
    def keep(offset: int, key: bytes | None, value: bytes | None) -> bool:
        if key is None:
            return False
        latest = offset_map.get(key)
        if latest is not None and offset < latest:
            return False
        return value is not None or retain_deletes
    return keep


def _filter_batch(batch: bytes, header: records.BatchHeader, offset_map: dict[bytes, int],
                  last_batch: dict[int, int], retain_deletes: bool, stats: CleanStats) -> tuple[bytes, int] | None:
    """(bytes to write, max timestamp) for one batch, or None to drop it."""
    stats.records_read += header.record_count
    if header.is_control:
        return batch, header.max_timestamp
    section = batches.records_section(batch, header)
    kept: list[tuple[int, int]] = []
    max_ts = -1
    for start, end, offset_delta, timestamp_delta, key, value in batches.iter_records(section, header.record_count):
        if key is None:
            continue  # Kafka refuses keyless records on compacted topics; the cleaner drops them
        offset = header.base_offset + offset_delta
        latest = offset_map.get(key)
        if latest is not None and offset < latest:
            continue
        if value is None and not retain_deletes:
            continue  # a tombstone past the delete horizon
        kept.append((start, end))
        max_ts = max(max_ts, header.base_timestamp + timestamp_delta)
    stats.records_removed += header.record_count - len(kept)
    if len(kept) == header.record_count:
        return batch, header.max_timestamp
    if header.timestamp_type == 1:  # LogAppendTime: every record has the batch's time
        max_ts = header.max_timestamp
    if not kept:
        if header.producer_id >= 0 and last_batch.get(header.producer_id) == header.last_offset:
            stats.batches_emptied += 1
            return batches.rebuild_batch(batch, section, [], max_ts), header.max_timestamp
        return None
    return batches.rebuild_batch(batch, section, kept, max_ts), max_ts


def run_job(job: CleanJob) -> None:
    """The expensive part, safe on any thread: offset map, then the ``.cleaned`` files of every
    group. On failure or cancellation the ``.cleaned`` files made so far are removed."""
    try:
        offset_map, last_batch, unsafe = build_offset_map(job)
        for n, group in enumerate(job.groups):
            clean_group(job, group, offset_map, last_batch, unsafe)
            job.cleaned.append(n)
    except BaseException as exc:
        job.error = exc
        job.remove_cleaned_files()
        job.cleaned.clear()
        if not isinstance(exc, (CleanerAborted, Exception)):
            raise
    finally:
        job.close_fds()
        job.done.set()


def apply_job(job: CleanJob, fault: Callable[[str], None] | None = None) -> bool:
    """On the log's thread: swap every cleaned group in (``PartitionLog.replace_segments``).
    Returns True when all were, so the cleaner checkpoint may move to ``job.end_offset``."""
    if job.error is not None:
        if not isinstance(job.error, CleanerAborted):
            log.error("%s: cleaning failed: %r", job.tp, job.error)
        return False
    plog = job.plog
    # The offset map covers every source: if any changed (a follower truncated, retention deleted),
    # nothing cleaned with it may be swapped in.
    ok = not plog.offline and plog.find_segments([s.segment for s in job.sources],
                                                 [s.size for s in job.sources]) is not None
    if not ok:
        log.info("%s: the log changed while it was cleaned; discarding the result", job.tp)
    for group in job.groups:
        sources = [job.sources[i] for i in group]
        if not ok or plog.offline or not plog.replace_segments([s.segment for s in sources],
                                                               [s.size for s in sources], fault):
            if ok:
                log.info("%s: the log changed while it was cleaned; discarding the result", job.tp)
            ok = False
            job.remove_cleaned_files([group])
    if not ok:
        job.stats.discarded += 1
    return ok


def clean_log(plog: PartitionLog, checkpoint_offset: int | None = None, now: int | None = None,
              last_stable_offset: int | None = None, force: bool = False,
              fault: Callable[[str], None] | None = None) -> tuple[int | None, CleanStats]:
    """Clean one log synchronously on the calling thread (tests, tools). Returns the new cleaner
    checkpoint (None if nothing was cleaned) and the statistics. ``force`` ignores the ratio."""
    now = plog._clock() if now is None else now
    found = cleanable_range(plog, checkpoint_offset, now, last_stable_offset)
    stats = CleanStats()
    if found is None or not (force or should_clean(found, plog.config)):
        return None, stats
    job = prepare_job(plog, found)
    run_job(job)
    if job.error is not None and not isinstance(job.error, Exception):
        raise job.error
    ok = apply_job(job, fault)
    job.stats.logs_cleaned = int(ok)
    return (job.end_offset if ok else None), job.stats


# -- the I/O rate of every cleaner --------------------------------------------------------------

class Throttler:
    """``log.cleaner.io.max.bytes.per.second`` across every cleaner thread, as Kafka's Throttler: the bytes seen
    are summed, and once a check interval has passed a thread ahead of the rate sleeps until it is not (the
    others wait on the lock meanwhile).

    The rate, the interval's start and the bytes seen live in a small shared memory file (``fd``), locked with
    ``lockf``, so that cleaner processes (``cleaner_worker``, ``attach``) share one ceiling with the broker, and a
    new rate reaches a cleaning in progress. Its clock must be system-wide for that (CLOCK_MONOTONIC is)."""

    CHECK_INTERVAL_S = 0.3
    _STATE = struct.Struct("=ddq")  # rate, interval start, bytes seen
    _INTERVAL = struct.Struct("=dq")

    def __init__(self, rate: float = float("inf"), clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep, *, fd: int | None = None) -> None:
        self._clock, self._sleep = clock, sleep
        self._lock = threading.Lock()  # lockf excludes other processes, not this one's threads
        self.fd = os.memfd_create("kbroker-cleaner-throttle") if fd is None else fd
        if fd is None:
            weakref.finalize(self, os.close, self.fd)  # the mapping holds its own reference
            os.ftruncate(self.fd, self._STATE.size)
        self._state = mmap.mmap(self.fd, self._STATE.size)
        if fd is None:
            self._STATE.pack_into(self._state, 0, rate, clock(), 0)

    @classmethod
    def attach(cls, fd: int) -> Throttler:
        """The throttler whose state another process created (its ``fd``, inherited)."""
        return cls(fd=fd)

    @property
    def rate(self) -> float:
        return float(self._STATE.unpack_from(self._state, 0)[0])

    @rate.setter
    def rate(self, rate: float) -> None:
        struct.pack_into("=d", self._state, 0, rate)

    def __call__(self, size: int) -> None:
        if self.rate >= UNLIMITED_RATE:
            return
        # Held while sleeping, as Kafka's: the other threads and processes wait for the same nap.
        with self._lock:
            fcntl.lockf(self.fd, fcntl.LOCK_EX)
            try:
                rate, start, seen = self._STATE.unpack_from(self._state, 0)
                seen += size
                elapsed = self._clock() - start
                if elapsed >= self.CHECK_INTERVAL_S:
                    pause = seen / max(rate, 1e-9) - elapsed
                    if pause > 0:
                        self._sleep(pause)
                    start, seen = self._clock(), 0
                self._INTERVAL.pack_into(self._state, 8, start, seen)  # not the rate: a setter may change it
            finally:
                fcntl.lockf(self.fd, fcntl.LOCK_UN)


UNLIMITED_RATE = 1.7976931348623157e308  # Kafka's default: Double.MaxValue
