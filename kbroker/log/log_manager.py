"""All partition logs of a broker, spread over ``log.dirs`` (JBOD: one directory per disk).

New partitions go to the online directory holding the fewest partitions, as Kafka does. At start
each directory is locked, its checkpoint files read and its logs loaded; without the clean-shutdown
marker every log is recovered from its recovery point. An I/O error in one directory takes that
directory offline (its partitions answer KAFKA_STORAGE_ERROR) while the others keep serving.

A partition moves to another dir of this broker (AlterReplicaLogDirs) through a future log there
(``kbroker.log.future_replica``): ``create_future_log``, caught up by ``kbroker.log.log_dir_mover``, then
``replace_current_with_future``. Its checkpoints live in its own dir, so they follow the partition.

Compaction (``kbroker.log.cleaner``): ``clean()``, called from the owner's thread (the broker's
housekeeping; ``cleanup()`` calls it too), swaps finished cleanings in and hands the dirtiest
compacted logs to the cleaner threads (``log.cleaner.threads`` logs at once), which ``startup()`` starts
(``log.cleaner.enable``) and ``shutdown()`` stops.

Dynamic broker configs (KIP-226): ``reconfigure`` takes a new broker config; the ``log.*`` defaults reach every
log whose topic does not override them, and the cleaner takes its thread count and I/O rate.

One module: the directories, their checkpoints and the moves between them share the manager's per-dir state
(locks, offline dirs, each dir's logs); the pieces that stand alone are their own modules already
(``future_replica``, ``log_dir_mover``, ``appenders``, ``cleaner_threads``, ``partition_log`` and its parts).
"""
from __future__ import annotations

import fcntl
import itertools
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Protocol

from kbroker import errors
from kbroker._core.appender import Appender, open_appender
from kbroker.clock import wall_ms
from kbroker.config.errors import ConfigError
from kbroker.config.topic import LogConfig
from kbroker.crashpoints import crash_point
from kbroker.log import checkpoint, future_replica
from kbroker.log.appenders import DirAppenders
from kbroker.log.cleaner import (
    CleanJob,
    CleanStats,
    apply_job,
    cleanable_range,
    prepare_job,
    should_clean,
)
from kbroker.log.cleaner_threads import CleanerThread
from kbroker.log.disk_space import DiskSpace
from kbroker.log.names import CLEAN_SHUTDOWN_FILE, TopicPartition, parse_log_dir_name, validate_topic_name
from kbroker.log.partition_log import PartitionLog
from kbroker.log.swap import fsync_dir

log = logging.getLogger(__name__)

LOCK_FILE = ".lock"


# New logs created between two turns of the event loop (CreateTopics on a single broker, LeaderAndIsr in a
# cluster): each costs a directory, its files and a checkpoint, and a 1,000-partition topic must not hold
# every connection for seconds.
HOSTING_CHUNK = 16
# A LeaderAndIsr gives the loop back at least this often while it creates logs (about a millisecond each).
HOSTING_TURN_S = 0.005


class LogSettings(Protocol):
    """What the log manager takes of a broker config (kbroker.config.broker.BrokerConfig) at run time."""
    @property
    def log(self) -> LogConfig: ...

    @property
    def log_cleaner_threads(self) -> int: ...

    @property
    def log_cleaner_io_max_bytes_per_second(self) -> float: ...


class LogManager:
    def __init__(self, log_dirs: Iterable[str | os.PathLike[str]], config: LogConfig | None = None, *,
                 appender: Appender | None = None, clock: Callable[[], int] = wall_ms,
                 cleaner_thread: bool = True, cleaner_threads: int = 1,
                 last_stable_offset: Callable[[TopicPartition], int | None] | None = None,
                 on_all_dirs_offline: Callable[[], None] | None = None,
                 on_dir_offline: Callable[[Path, list[TopicPartition]], None] | None = None) -> None:
        self.log_dirs = [Path(d).resolve() for d in log_dirs]
        if not self.log_dirs:
            raise ValueError("log.dirs is empty: give at least one directory")
        if len(set(self.log_dirs)) != len(self.log_dirs):
            raise ValueError(f"log.dirs names a directory twice: {[str(d) for d in self.log_dirs]}")
        self.config = config or LogConfig()
        # each dir's appender (io_uring or pwritev, probed per dir at startup; ``appender``: that one for every dir)
        self.appenders = DirAppenders(appender)
        self._clock = clock
        self.logs: dict[TopicPartition, PartitionLog] = {}
        # Partitions moving to another dir: the copy there (Kafka's future logs), the dir AlterReplicaLogDirs
        # asked for a partition not hosted yet, copies a worker is appending to (removed only once it is
        # done), copies whose dir failed under the worker, and replaced logs closed once no fetch reads them.
        self.future_logs: dict[TopicPartition, PartitionLog] = {}
        self.preferred_dirs: dict[TopicPartition, Path] = {}
        self.copying: dict[TopicPartition, PartitionLog] = {}
        self._orphans: list[PartitionLog] = []
        self.future_errors: dict[TopicPartition, OSError] = {}
        self._retiring: list[tuple[int, PartitionLog, Path]] = []
        # Future logs are written by the mover's worker thread: a stateless pwritev appender of their own.
        self.future_appender = open_appender("pwritev")
        self.offline_dirs: set[Path] = set()
        self.disk_space = DiskSpace()  # each online dir's usable and total bytes, for /metrics
        # called once every log dir is offline: the broker cannot serve anything (Kafka halts then)
        self.on_all_dirs_offline = on_all_dirs_offline
        # told of each dir that goes offline, with the partitions it held (the replica manager: KIP-112)
        self.on_dir_offline = on_dir_offline
        self._locks: dict[Path, int] = {}
        self.topic_overrides: dict[str, Mapping[str, str]] = {}
        # Compaction: first dirty offset per log (cleaner-offset-checkpoint), the workers, the jobs
        # in flight, when to look for work again, what was done so far.
        self.cleaner_offsets: dict[TopicPartition, int] = {}
        self.cleaner = CleanerThread(cleaner_threads)
        self._cleaner_thread = cleaner_thread
        self._cleaning: dict[TopicPartition, CleanJob] = {}
        self._cleaner_next_check = 0
        self.cleaner_stats = CleanStats()
        # The broker's last stable offset of a partition (None: unknown); the high watermark and
        # the active segment bound cleaning anyway.
        self.last_stable_offset = last_stable_offset

    # -- start and stop ------------------------------------------------------------------

    def startup(self) -> None:
        log.info("log dirs %s", [str(d) for d in self.log_dirs])
        for directory in self.log_dirs:
            try:
                directory.mkdir(parents=True, exist_ok=True)
                self._lock(directory)
                self.appenders.of(directory)  # chosen and logged now, not at the first new log
            except OSError as exc:
                self.mark_dir_offline(directory, exc)
        try:
            self._resolve_moves()
        except OSError as exc:  # a rename or removal failed: that disk is failing
            path = Path(exc.filename) if exc.filename else None
            failed = next((d for d in self.online_dirs if path is not None and d in path.parents), None)
            if failed is None:
                raise
            self.mark_dir_offline(failed, exc)
        for directory in self.online_dirs:
            try:
                self._load_dir(directory)
            except OSError as exc:
                self.mark_dir_offline(directory, exc)
        self.disk_space.measure(self.online_dirs)  # the first figures; then housekeeping's, off the loop
        if self.config.cleaner_enable and self._cleaner_thread:
            self.cleaner.start()

    def reconfigure(self, config: LogSettings, changed: frozenset[str]) -> None:
        """A dynamic broker config change (DynamicLogConfig, LogCleaner.reconfigure): new log defaults for every
        log (its topic's overrides still win), the cleaner's thread count and I/O rate."""
        if config.log != self.config:
            self.config = config.log
            for plog in itertools.chain(self.logs.values(), self.future_logs.values()):
                try:
                    plog.config = self.config.with_overrides(self.topic_overrides.get(plog.tp.topic, {}))
                except ConfigError as exc:
                    log.warning("%s keeps its log config: %s", plog.tp, exc)
            log.info("log defaults changed (%s): every log without its own override takes them",
                     ", ".join(sorted(changed)))
        if config.log_cleaner_threads != self.cleaner.threads:
            self.cleaner.resize(config.log_cleaner_threads)
        self.cleaner.set_io_rate(config.log_cleaner_io_max_bytes_per_second)

    def _lock(self, directory: Path) -> None:
        fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RuntimeError(f"log dir {directory} is in use by another broker process (its .lock is held)") from None
        self._locks[directory] = fd

    def _load_dir(self, directory: Path) -> None:
        marker = directory / CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        recovery_points = self._read_checkpoint(directory / checkpoint.RECOVERY_POINT)
        start_offsets = self._read_checkpoint(directory / checkpoint.LOG_START_OFFSET)
        high_watermarks = self._read_checkpoint(directory / checkpoint.HIGH_WATERMARK)
        cleaner_offsets = self._read_checkpoint(directory / checkpoint.CLEANER_OFFSET)
        if not clean:
            log.info("%s: no clean shutdown marker, recovering logs from their recovery points", directory)
        for entry in sorted(os.scandir(directory), key=lambda e: e.name):
            tp = parse_log_dir_name(entry.name) if entry.is_dir() else None
            if tp is None:
                moving = future_replica.parse_moving_dir(Path(entry.path)) if entry.is_dir() else None
                if moving is not None and moving.future:  # _resolve_moves kept it: the move resumes
                    self.future_logs[moving.tp] = self._open_future(
                        moving.path, moving.tp, recover=not clean, recovery_point=recovery_points.get(moving.tp, 0),
                        log_start_offset=start_offsets.get(moving.tp, 0),
                        high_watermark=high_watermarks.get(moving.tp, 0))
                    log.info("%s: resuming its move to %s", moving.tp, directory)
                continue
            if tp in self.logs:
                raise RuntimeError(f"partition {tp} has a log in both {self.logs[tp].directory} and {entry.path}")
            self.logs[tp] = self._open_log(directory, tp, recover=not clean,
                                           recovery_point=recovery_points.get(tp, 0),
                                           log_start_offset=start_offsets.get(tp, 0),
                                           high_watermark=high_watermarks.get(tp, 0))
            if tp in cleaner_offsets:
                self.cleaner_offsets[tp] = cleaner_offsets[tp]
        if clean:
            marker.unlink()  # from now on a crash must be detectable
        self._write_checkpoints(directory)

    def _read_checkpoint(self, path: Path) -> dict[TopicPartition, int]:
        try:
            return checkpoint.read_checkpoint(path)
        except checkpoint.MalformedCheckpointError as exc:
            log.warning("ignoring malformed checkpoint file: %s", exc)
            return {}

    def _open_log(self, directory: Path, tp: TopicPartition, **kwargs: object) -> PartitionLog:
        config = self.config.with_overrides(self.topic_overrides.get(tp.topic, {}))
        return PartitionLog(directory / str(tp), tp, config, self.appenders.of(directory), clock=self._clock,
                            on_io_error=self._on_io_error, **kwargs)  # type: ignore[arg-type]

    def _open_future(self, path: Path, tp: TopicPartition, **kwargs: object) -> PartitionLog:
        config = self.config.with_overrides(self.topic_overrides.get(tp.topic, {}))
        return PartitionLog(path, tp, config, self.future_appender, clock=self._clock,
                            on_io_error=self._on_future_io_error, **kwargs)  # type: ignore[arg-type]

    def _on_future_io_error(self, plog: PartitionLog, exc: OSError) -> None:
        # Maybe on the mover's worker thread: only noted here; the mover takes the dir offline on the loop.
        self.future_errors[plog.tp] = exc

    def shutdown(self) -> None:
        """Flush, checkpoint, close every log, then leave the clean-shutdown marker."""
        self.cleaner.stop()
        for job in self._cleaning.values():
            job.done.wait()
            job.remove_cleaned_files()
        self._cleaning.clear()
        self.copying.clear()  # the mover stopped first: no worker appends any more
        for plog in self._orphans:
            self._remove_future_files(plog)
        self._orphans.clear()
        for plog in itertools.chain(self.logs.values(), self.future_logs.values()):
            try:
                plog.flush()
            except errors.KafkaStorageError:
                pass  # its directory went offline; logged already
        for directory in self.online_dirs:
            self._write_checkpoints(directory)
        for plog in itertools.chain(self.logs.values(), self.future_logs.values()):
            if not plog.offline:
                plog.close()
        self._remove_retired(None)
        for directory in self.online_dirs:
            (directory / CLEAN_SHUTDOWN_FILE).touch()
        for fd in self._locks.values():
            os.close(fd)
        self._locks.clear()
        self.logs.clear()
        self.future_logs.clear()
        self.appenders.close()
        self.future_appender.close()

    # -- partitions ----------------------------------------------------------------------

    @property
    def online_dirs(self) -> list[Path]:
        return [d for d in self.log_dirs if d not in self.offline_dirs]

    def get_log(self, tp: TopicPartition) -> PartitionLog | None:
        return self.logs.get(tp)

    def get_or_create_log(self, tp: TopicPartition) -> PartitionLog:
        existing = self.logs.get(tp)
        if existing is not None:
            return existing
        validate_topic_name(tp.topic)
        preferred = self.preferred_dirs.pop(tp, None)
        directory = preferred if preferred in self.online_dirs else self.next_log_dir()
        try:
            plog = self._open_log(directory, tp, recover=False)
        except OSError as exc:
            self.mark_dir_offline(directory, exc)
            raise errors.KafkaStorageError(f"{tp}: could not create its log in {directory}: {exc}") from None
        self.logs[tp] = plog
        log.info("created log for %s in %s", tp, directory)
        return plog

    def next_log_dir(self) -> Path:
        """The online directory with the fewest partitions (ties: the order of log.dirs)."""
        online = self.online_dirs
        if not online:
            raise errors.KafkaStorageError("every log directory is offline")
        if len(online) == 1:
            return online[0]
        # by name: a fresh Path per log would hash its parts again (seconds for a 1,000-partition topic)
        counts = {str(d): 0 for d in online}
        for plog in self.logs.values():
            parent = os.path.dirname(plog.directory_name)
            if parent in counts:
                counts[parent] += 1
        return min(online, key=lambda d: counts[str(d)])

    def delete_log(self, tp: TopicPartition) -> None:
        self.remove_future_log(tp)
        self.preferred_dirs.pop(tp, None)
        self.abort_cleaning(tp)
        self.cleaner_offsets.pop(tp, None)
        plog = self.logs.pop(tp, None)
        if plog is not None:
            plog.remove()

    # -- periodic work ---------------------------------------------------------------------

    def cleanup(self, now: int | None = None) -> int:
        """Apply retention to every online log (cleanup.policy with ``delete``; below the log start
        offset for every log), then run a compaction step (``clean``). Returns the number of
        segments retention deleted."""
        now = self._clock() if now is None else now
        self.clean(now)
        deleted = 0
        for plog in list(self.logs.values()):
            if not plog.offline:
                try:
                    deleted += plog.delete_old_segments(now)
                    plog.remove_deleted_files(now)
                except errors.KafkaStorageError:
                    pass
        return deleted

    def clean(self, now: int | None = None, wait: bool = False) -> CleanStats:
        """One compaction step on the owner's thread; cheap unless a swap is due. Swaps in the
        result of a finished cleaning (and moves the log's cleaner checkpoint); then, when the
        worker is idle and ``log.cleaner.backoff.ms`` has passed since nothing was found, picks the
        compacted log with the highest dirty ratio and hands it to the worker (with ``wait``, or
        without a cleaner thread, it is cleaned before this returns). Returns what this call did."""
        now = self._clock() if now is None else now
        self._remove_retired(now)
        stats = CleanStats()
        self._finish_done(stats, wait)
        inline = not self.cleaner.running
        while self.config.cleaner_enable and now >= self._cleaner_next_check \
                and len(self._cleaning) < self.cleaner.capacity:
            job = self._next_job(now)
            if job is None:
                self._cleaner_next_check = now + self.config.cleaner_backoff_ms
                break
            self._cleaning[job.tp] = job
            self.cleaner.submit(job)
            if inline:  # cleaned on this thread (no workers): one log per call
                self._finish_done(stats, False)
                break
        if wait:
            self._finish_done(stats, True)
        return stats

    def _finish_done(self, stats: CleanStats, wait: bool) -> None:
        """Swap in the cleanings that are done (with ``wait``: every one in flight, once done)."""
        for tp, job in list(self._cleaning.items()):
            if wait:
                job.done.wait()
            if job.done.is_set():
                del self._cleaning[tp]
                self._finish(job, stats)

    def _next_job(self, now: int) -> CleanJob | None:
        best = None
        for tp, plog in self.logs.items():
            if plog.offline or not plog.config.compact or tp in self.future_logs or tp in self._cleaning:
                continue  # a moving log is not cleaned (Kafka pauses its cleaning): the copy reads it
            if plog.truncated_to is not None:
                if tp in self.cleaner_offsets:
                    self.cleaner_offsets[tp] = min(self.cleaner_offsets[tp], plog.truncated_to)
                plog.truncated_to = None
            lso = self.last_stable_offset(tp) if self.last_stable_offset is not None else None
            found = cleanable_range(plog, self.cleaner_offsets.get(tp), now, lso)
            if found is not None and should_clean(found, plog.config) and (best is None or found.ratio > best[1].ratio):
                best = (plog, found)
        if best is None:
            return None
        plog, found = best
        try:
            return prepare_job(plog, found)
        except OSError as exc:
            plog._io_failure(exc)
            return None

    def _finish(self, job: CleanJob, stats: CleanStats) -> None:
        if self.logs.get(job.tp) is not job.plog or job.plog.offline:
            job.remove_cleaned_files()
            return
        try:
            ok = apply_job(job)
        except errors.KafkaStorageError:
            return
        if ok:
            job.stats.logs_cleaned = 1
            self.cleaner_offsets[job.tp] = job.end_offset
            directory = job.plog.directory.parent
            try:
                self._write_cleaner_checkpoint(directory)
            except OSError as exc:
                self.mark_dir_offline(directory, exc)
        self._cleaner_next_check = 0  # look for the next log at once, as Kafka's cleaner does
        stats.add(job.stats)
        self.cleaner_stats.add(job.stats)

    def abort_cleaning(self, tp: TopicPartition) -> None:
        """Cancel and wait out a cleaning of ``tp`` in flight (before its log is deleted)."""
        job = self._cleaning.pop(tp, None)
        if job is not None:
            job.cancelled.set()
            job.done.wait()
            job.remove_cleaned_files()

    def _write_cleaner_checkpoint(self, directory: Path) -> None:
        offsets = {tp: o for tp, o in self.cleaner_offsets.items()
                   if tp in self.logs and self.logs[tp].directory.parent == directory}
        checkpoint.write_checkpoint(directory / checkpoint.CLEANER_OFFSET, offsets)

    def measure_disk_space(self) -> None:
        """Housekeeping's: the online dirs' usable and total bytes, measured in a thread (``DiskSpace``)."""
        self.disk_space.measure_in_thread(self.online_dirs)

    def flush_dirty(self, now: int | None = None) -> None:
        """``flush.ms`` policy: fdatasync logs whose oldest unflushed data is old enough."""
        now = self._clock() if now is None else now
        for plog in self.logs.values():
            if not plog.offline:
                try:
                    plog.maybe_flush(now)
                except errors.KafkaStorageError:
                    pass

    def checkpoint(self) -> None:
        for directory in self.online_dirs:
            try:
                self._write_checkpoints(directory)
            except OSError as exc:
                self.mark_dir_offline(directory, exc)

    def _write_checkpoints(self, directory: Path) -> None:
        logs = [p for p in itertools.chain(self.logs.values(), self.future_logs.values())
                if p.directory.parent == directory]
        checkpoint.write_checkpoint(directory / checkpoint.RECOVERY_POINT, {p.tp: p.recovery_point for p in logs})
        checkpoint.write_checkpoint(directory / checkpoint.LOG_START_OFFSET, {p.tp: p.log_start_offset for p in logs})
        checkpoint.write_checkpoint(directory / checkpoint.HIGH_WATERMARK, {p.tp: p.high_watermark for p in logs})
        self._write_cleaner_checkpoint(directory)

    # -- moving a partition between log dirs (AlterReplicaLogDirs) ---------------------------

    def find_log_dir(self, path: str) -> Path:
        """The configured log dir named by ``path`` (an absolute path, as Kafka compares them);
        LogDirNotFoundError for any other, KafkaStorageError for an offline one."""
        found = None
        if os.path.isabs(path):
            wanted = os.path.normpath(path)
            found = next((d for d in self.log_dirs if str(d) == wanted), None)
            if found is None:
                found = next((d for d in self.log_dirs if Path(wanted).resolve() == d), None)
        if found is None:
            raise errors.LogDirNotFoundError(f"log dir {path} is not found in the config")
        if found in self.offline_dirs:
            raise errors.KafkaStorageError(f"log dir {path} is offline")
        return found

    def maybe_update_preferred_dir(self, tp: TopicPartition, directory: Path) -> None:
        """Remember where ``tp`` should live when this broker creates its log later (Kafka's preferred dir)."""
        current, future = self.logs.get(tp), self.future_logs.get(tp)
        if not any(p is not None and p.directory.parent == directory for p in (current, future)):
            self.preferred_dirs[tp] = directory

    def create_future_log(self, tp: TopicPartition, directory: Path) -> PartitionLog:
        """An empty future log for ``tp`` in ``directory``, starting at the current log's start."""
        current = self.logs[tp]
        path = directory / future_replica.future_dir_name(tp, future_replica.new_uid())
        try:
            future = self._open_future(path, tp, recover=False, log_start_offset=current.log_start_offset,
                                       recovery_point=current.log_start_offset)
            fsync_dir(directory)
        except OSError as exc:
            self.mark_dir_offline(directory, exc)
            raise errors.KafkaStorageError(f"{tp}: could not create its future log in {directory}: {exc}") from None
        self.future_logs[tp] = future
        self.abort_cleaning(tp)
        self.take_truncation(current)  # earlier truncations do not concern a copy starting now
        log.info("%s: moving from %s to %s", tp, current.directory.parent, directory)
        crash_point("future.created")
        return future

    def take_truncation(self, plog: PartitionLog) -> int | None:
        """The lowest offset ``plog`` was truncated to since last asked (the mover follows it), also
        lowering its cleaner checkpoint as the cleaner would have."""
        cut = plog.truncated_to
        if cut is not None:
            plog.truncated_to = None
            if plog.tp in self.cleaner_offsets:
                self.cleaner_offsets[plog.tp] = min(self.cleaner_offsets[plog.tp], cut)
        return cut

    def remove_future_log(self, tp: TopicPartition) -> None:
        """Stop a move: the future log goes (once the worker is done with it, if it is copying)."""
        future = self.future_logs.pop(tp, None)
        self.future_errors.pop(tp, None)
        if future is None:
            return
        if self.copying.get(tp) is future:
            self._orphans.append(future)
        else:
            self._remove_future_files(future)

    def end_copy(self, tp: TopicPartition, future: PartitionLog) -> None:
        """The worker finished a round on ``future``: remove it if the move was stopped meanwhile."""
        if self.copying.get(tp) is future:
            del self.copying[tp]
        if future in self._orphans:
            self._orphans.remove(future)
            self._remove_future_files(future)

    def _remove_future_files(self, future: PartitionLog) -> None:
        try:
            if not future.offline:
                future.close()
        except OSError:
            pass
        for segment in future.segments:
            segment.close()
        future_replica.remove_dir(future.directory)
        log.info("%s: future log %s removed", future.tp, future.directory)

    def replace_current_with_future(self, tp: TopicPartition,
                                    prepare: Callable[[PartitionLog], None] | None = None) -> PartitionLog:
        """Swap in the future log of ``tp``, which must hold all of the current log (the caller, on the
        owner's thread, lets nothing append meanwhile). ``prepare(future)`` writes what else must
        follow the partition (producer state) into the future's dir first. Crash-safe order, each
        rename made durable before the next: the future is flushed; the current dir becomes
        ``-delete``; the future dir takes the plain name. ``_resolve_moves`` completes a swap a crash
        interrupted. The replaced log is closed and removed after file.delete.delay.ms (a fetch may
        still be sending from it). Returns the new current log."""
        current, future = self.logs[tp], self.future_logs[tp]
        if future.log_end_offset != current.log_end_offset:
            raise RuntimeError(f"{tp}: future log ends at {future.log_end_offset}, current at {current.log_end_offset}")
        source, target = current.directory.parent, future.directory.parent
        uid = future_replica.uid_of(future.directory)
        deleted = source / future_replica.delete_dir_name(tp, uid)
        final = target / str(tp)
        try:
            if current.log_start_offset > future.log_start_offset:
                future.update_high_watermark(current.log_start_offset)
                future.delete_records_before(current.log_start_offset)
            future.update_high_watermark(current.high_watermark)
            future.leader_epochs.rebuild(current.leader_epochs.entries)
            if prepare is not None:
                prepare(future)
            future.flush()
            crash_point("future.swap.prepared")
            os.rename(current.directory, deleted)
            fsync_dir(source)
            crash_point("future.swap.current_renamed")
            os.rename(future.directory, final)
            fsync_dir(target)
            crash_point("future.swap.future_renamed")
            state = {"recovery_point": future.recovery_point, "log_start_offset": future.log_start_offset,
                     "high_watermark": future.high_watermark}
            future.close()
            replacement = self._open_log(target, tp, recover=False, **state)
        except OSError as exc:
            self.mark_dir_offline(target, exc)
            raise errors.KafkaStorageError(f"{tp}: moving to {target} failed: {exc}") from None
        self.future_logs.pop(tp, None)
        self.logs[tp] = replacement
        self._retiring.append((self._clock() + self.config.file_delete_delay_ms, current, deleted))
        for directory in (target, source):
            try:
                self._write_checkpoints(directory)
            except OSError as exc:
                self.mark_dir_offline(directory, exc)
        crash_point("future.swap.checkpointed")
        log.info("%s: moved from %s to %s (log end %d)", tp, source, target, replacement.log_end_offset)
        return replacement

    def _remove_retired(self, now: int | None) -> None:
        """Close and delete replaced logs whose delay passed (every one when ``now`` is None)."""
        keep = []
        for due, plog, path in self._retiring:
            if now is not None and due > now:
                keep.append((due, plog, path))
                continue
            try:
                plog.close()
            except OSError:
                pass
            for segment in plog.segments:
                segment.close()
            future_replica.remove_dir(path)
            crash_point("future.old_deleted")
        self._retiring = keep

    def _resolve_moves(self) -> None:
        """What a crash left of moves, before any log is opened: a ``-future`` whose partition has a current
        log is kept (its move resumes); one without, beside that partition's ``-delete`` (the swap was cut
        between its two renames), becomes the current log; any other is discarded. A ``-delete`` whose
        partition has a current log is removed; one without is renamed back (its data is never lost)."""
        currents: dict[TopicPartition, Path] = {}
        moving: list[future_replica.MovingDir] = []
        for directory in self.online_dirs:
            try:
                for entry in os.scandir(directory):
                    if not entry.is_dir():
                        continue
                    tp = parse_log_dir_name(entry.name)
                    if tp is not None:
                        currents[tp] = Path(entry.path)
                    else:
                        found = future_replica.parse_moving_dir(Path(entry.path))
                        if found is not None:
                            moving.append(found)
            except OSError as exc:
                self.mark_dir_offline(directory, exc)
        deleting = {m.tp for m in moving if not m.future}
        kept: set[TopicPartition] = set()
        for m in sorted((m for m in moving if m.future), key=lambda m: str(m.path)):
            if m.tp in kept:
                log.warning("%s: a second future log %s: removed", m.tp, m.path)
                future_replica.remove_dir(m.path)
            elif m.tp in currents:
                kept.add(m.tp)
            elif m.tp in deleting:
                final = m.path.parent / str(m.tp)
                log.warning("%s: completing its move to %s (the last run stopped in the swap)", m.tp, m.path.parent)
                os.rename(m.path, final)
                fsync_dir(m.path.parent)
                currents[m.tp] = final
            else:
                log.warning("%s: future log %s has no current log: removed", m.tp, m.path)
                future_replica.remove_dir(m.path)
        for m in moving:
            if m.future:
                continue
            if m.tp in currents:
                future_replica.remove_dir(m.path)
            else:
                log.error("%s: only its replaced log %s is left: restoring it", m.tp, m.path)
                os.rename(m.path, m.path.parent / str(m.tp))
                fsync_dir(m.path.parent)
                currents[m.tp] = m.path.parent / str(m.tp)

    # -- failure ---------------------------------------------------------------------------

    def _on_io_error(self, plog: PartitionLog, exc: OSError) -> None:
        self.mark_dir_offline(plog.directory.parent, exc)

    def mark_dir_offline(self, directory: Path, exc: OSError) -> None:
        if directory in self.offline_dirs:
            return
        self.offline_dirs.add(directory)
        affected = [p for p in self.logs.values() if p.directory.parent == directory]
        log.error("log directory %s is offline after %s (errno %s: %s); its %d partitions stop serving, "
                  "the other directories keep working", directory, type(exc).__name__, exc.errno,
                  exc.strerror, len(affected))
        for job in self._cleaning.values():
            if job.plog.directory.parent == directory:
                job.cancelled.set()
        for plog in affected:
            plog.offline = True
            try:
                plog.close()
            except OSError:
                pass
        for tp, future in list(self.future_logs.items()):
            current = self.logs.get(tp)
            if future.directory.parent == directory or (current is not None and current.offline):
                log.warning("%s: its move to %s stops (log dir %s is offline)", tp, future.directory.parent, directory)
                self.remove_future_log(tp)
        if self.on_dir_offline is not None:
            self.on_dir_offline(directory, [p.tp for p in affected])
        if self.on_all_dirs_offline is not None and set(self.log_dirs) <= self.offline_dirs:
            self.on_all_dirs_offline()


def halt_without_log_dirs(log_dirs: Iterable[Path]) -> None:
    """What a broker does once every log dir failed (a full or broken disk): halt, as Kafka's
    ``LogManager.handleLogDirFailure`` does. A broker left running would keep its ZooKeeper registration and its
    leaderships while serving none of them, so nothing would move them; gone, its session ends and the controller
    elects other leaders. Restarting it (after the disk is fixed) recovers its logs."""
    log.critical("every log dir (%s) is offline: halting the broker", ", ".join(map(str, log_dirs)))
    logging.shutdown()
    os._exit(1)
