"""The history `kbroker ui` keeps of a cluster: one SQLite file (the standard library's), bounded in age and size.

What is kept, per sampling round: each partition's log end, each group's total lag and per-partition lag (all of a
group's partitions packed in one row), the cluster's rates, and each group's last commits per partition (Burrow's
window, with the lag each had when made).
Every sample table is keyed by time first: a round appends at the end of each table (a few pages written, however
many series), old rows go from the front, a rollup reads one range; a chart of one series steps through the sample
times, one index seek each. Samples are kept in three tiers:

* raw samples, for ``raw_hours`` (a day);
* 5-minute buckets, for ``five_minute_hours`` (7 days, Kafka's default ``log.retention.hours``);
* 1-hour buckets, for ``hourly_hours`` (30 days).

A bucket holds the largest lag or log end of its samples (a spike stays visible) and the mean of the rates.
``maintain()`` rolls complete buckets up, deletes what is past its age in bounded chunks (each its own short
transaction, so a chart read is never held up for long), and keeps the file under ``cap_bytes``: over 90% of it, it
shortens every tier's age by one factor, dropping each tier's oldest samples first, until under 75%, then gives the
freed pages back (incremental vacuum) and truncates the write-ahead log, so the file shrinks.

Charts pick the tier by span (1 h: raw, 24 h: 5-minute buckets, 7 d: hourly buckets); the newest part of a span,
not rolled up yet, is bucketed on the fly from the finer tier.

Threads: History is synchronous (the web app calls it through ``asyncio.to_thread``). It holds one connection
(``check_same_thread=False``) behind a lock, so calls from any thread are safe and run one at a time; maintain()
takes the lock per statement, so reads slip in between. Sample times are stored in seconds, commit times in
milliseconds (a commit is told apart from a repeat of it by its exact time).

One module: the schema, the writes, the chart reads and the maintenance share one connection, its lock and the
tiers' tables and watermarks; the packing of per-partition rows is apart (kbroker/ui/packed_rows.py).
"""
from __future__ import annotations

import bisect
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

from kbroker.ui.model import Points, Rates, Storage
from kbroker.ui.packed_rows import largest_per_series, pack_pairs, unpacked_rows
from kbroker.ui.status_rules import CommitPoint

log = logging.getLogger(__name__)

Span = Literal["1h", "24h", "7d"]
SPAN_SECONDS: dict[str, int] = {"1h": 3600, "24h": 86400, "7d": 7 * 86400}
SPAN_TIER: dict[str, int] = {"1h": 0, "24h": 1, "7d": 2}
TIERS: tuple[tuple[str, int], ...] = (("raw", 1), ("m5", 300), ("h1", 3600))  # (table suffix, bucket seconds)
ROLLUP_GRACE_S = 120  # a bucket is rolled up this long after it ends: a round taken before then may still arrive
DELETE_SLICE_S = (120, 1200, 4 * 3600)  # per tier, the most time one delete statement takes off the front
COMMIT_CHUNK = 500  # (group, partition) pairs per transaction when trimming commit windows
HIGH_WATER, LOW_WATER = 0.90, 0.75  # of cap_bytes: when to drop the oldest data, and down to where
PACKED_COLUMN = "packed"

# One tier's (topic, partition) or (group, partition) key -> its points.
TopicPartition = tuple[str, int]
GroupKey = tuple[str, Storage]
CommitKey = tuple[str, Storage, str, int]  # (group, storage, topic, partition)


@dataclass(frozen=True)
class _Kind:
    """One kind of series: a table per tier, keyed (ts[, series[, sub]]): a round appends at the end of each table
    (a few pages written however many series), old rows go from the front, a rollup reads one range."""
    name: str
    series: str | None  # the column naming the series; None: the kind is one series
    series_table: str | None
    sub: str | None  # a second key after ts (per-partition lag: the partition of the group)
    values: tuple[tuple[str, str, str], ...]  # (column, SQL type, aggregate over a bucket)
    packed: bool = False  # a (ts, series)'s subs in one row: a blob of (sub, value) pairs (see PARTITION_LAG)

    @property
    def key(self) -> tuple[str, ...]:
        return tuple(c for c in ("ts", self.series, None if self.packed else self.sub) if c)

    @property
    def columns(self) -> tuple[str, ...]:
        return self.key + (PACKED_COLUMN,) if self.packed else self.key + tuple(v[0] for v in self.values)


LOG_END = _Kind("log_end", "pid", "topic_partition", None, (("end_offset", "INTEGER", "max"),))
GROUP_LAG = _Kind("group_lag", "gid", "consumer_group", None, (("lag", "INTEGER", "max"),))
# a group's per-partition lags of one time in one row: ~4 bytes a partition, not ~18 (kbroker/ui/packed_rows.py)
PARTITION_LAG = _Kind("partition_lag", "gid", "consumer_group", "pid", (("lag", "INTEGER", "max"),), packed=True)
RATES = _Kind("rates", None, None, None,
              (("bytes_in", "REAL", "avg"), ("bytes_out", "REAL", "avg"), ("messages_in", "REAL", "avg")))
KINDS = (LOG_END, GROUP_LAG, PARTITION_LAG, RATES)


@dataclass(frozen=True)
class Round:
    """What one sampling round adds to the history."""
    taken_ms: int
    log_ends: Sequence[tuple[str, int, int]] = ()  # (topic, partition, log end)
    group_lags: Sequence[tuple[str, Storage, int]] = ()  # (group, storage, total lag)
    partition_lags: Sequence[tuple[str, Storage, str, int, int]] = ()  # (group, storage, topic, partition, lag)
    commits: Sequence[tuple[str, Storage, str, int, CommitPoint]] = ()  # new commits only
    rates: Rates | None = None


class HistoryError(Exception):
    """The history file cannot be opened or is not one."""


class History:
    def __init__(self, path: str | os.PathLike[str], *, cap_bytes: int = 256 * 1024 * 1024,
                 clock: Callable[[], float] = time.time, raw_hours: float = 24, five_minute_hours: float = 168,
                 hourly_hours: float = 720, commits_kept: int = 10) -> None:
        if cap_bytes < 1024 * 1024:
            raise ValueError(f"the history's size cap must be at least 1 MiB, not {cap_bytes} bytes")
        if not 0 < raw_hours <= five_minute_hours <= hourly_hours:
            raise ValueError("history retention must grow with the tier: raw <= 5-minute <= hourly hours, all > 0")
        self.path = os.fspath(path)
        self.cap_bytes = cap_bytes
        self._clock = clock
        self._retention_s = (int(raw_hours * 3600), int(five_minute_hours * 3600), int(hourly_hours * 3600))
        self._commits_kept = max(1, commits_kept)
        self._lock = threading.RLock()
        self._pids: dict[TopicPartition, int] = {}
        self._gids: dict[GroupKey, int] = {}
        self._times: list[list[int]] = [[] for _ in TIERS]  # each log-end tier's sample times, oldest first
        try:
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        except sqlite3.DatabaseError as exc:  # no such folder, no permission
            raise HistoryError(f"cannot use {self.path} as the history file: {exc}") from exc
        try:
            self._open()
        except sqlite3.DatabaseError as exc:  # not a SQLite file, or not ours
            self._db.close()
            raise HistoryError(f"cannot use {self.path} as the history file: {exc}") from exc
        self._load_times()

    # -- set-up ---------------------------------------------------------------------------------------------------

    def _open(self) -> None:
        db = self._db
        fresh = db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0
        if fresh:  # auto_vacuum must be chosen before the first table
            db.execute("PRAGMA auto_vacuum = INCREMENTAL")
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = NORMAL")  # WAL stays consistent; a crash may lose the last rounds only
        page_size = db.execute("PRAGMA page_size").fetchone()[0]
        # the write-ahead log counts against the cap too: keep it a small part of it
        db.execute(f"PRAGMA wal_autocheckpoint = {max(64, min(1000, self.cap_bytes // page_size // 32))}")
        db.execute(f"PRAGMA journal_size_limit = {self.cap_bytes // 32}")
        with self._transaction():
            self._drop_unpacked_tables()
            for statement in _schema():
                db.execute(statement)
        if not fresh and db.execute("PRAGMA auto_vacuum").fetchone()[0] != 2:
            db.execute("PRAGMA auto_vacuum = INCREMENTAL")
            db.execute("VACUUM")  # a file made without it: once, so that maintain() can shrink it
        self._reload_names()

    def _drop_unpacked_tables(self) -> None:
        """A file from before the packing (a row per partition) loses those rows with a warning, keeps the rest."""
        for kind in KINDS:
            columns = {row[1] for row in self._db.execute(f"PRAGMA table_info({kind.name}_raw)")}
            if not kind.packed or not columns or PACKED_COLUMN in columns:
                continue
            log.warning("history %s: its per-partition lags are in the older layout (a row per partition): dropped, "
                        "per-partition charts start again; totals, log ends, rates and commits kept", self.path)
            for tier, _ in TIERS:
                self._db.execute(f"DROP TABLE IF EXISTS {kind.name}_{tier}")
            self._db.execute("DELETE FROM meta WHERE key LIKE ?", (f"rolled:{kind.name}:%",))

    def _reload_names(self) -> None:
        with self._lock:
            rows = self._db.execute("SELECT id, topic, partition FROM topic_partition").fetchall()
            self._pids = {(t, p): i for i, t, p in rows}
            rows = self._db.execute("SELECT id, name, storage FROM consumer_group").fetchall()
            self._gids = {(n, s): i for i, n, s in rows}

    def close(self) -> None:
        with self._lock:
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self._db.close()

    def __enter__(self) -> History:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _pid(self, topic: str, partition: int) -> int:
        found = self._pids.get((topic, partition))
        if found is None:
            cursor = self._db.execute("INSERT INTO topic_partition(topic, partition) VALUES (?, ?)", (topic, partition))
            found = self._pids[(topic, partition)] = int(cursor.lastrowid or 0)
        return found

    def _gid(self, group: str, storage: Storage) -> int:
        found = self._gids.get((group, storage))
        if found is None:
            cursor = self._db.execute("INSERT INTO consumer_group(name, storage) VALUES (?, ?)", (group, storage))
            found = self._gids[(group, storage)] = int(cursor.lastrowid or 0)
        return found

    # -- writing a round ------------------------------------------------------------------------------------------

    def add(self, round_: Round) -> None:
        """Store one sampling round in one transaction (a commit already stored is ignored)."""
        ts = round_.taken_ms // 1000
        try:
            self._add(round_, ts)
        except BaseException:
            self._reload_names()  # ids handed out in the transaction rolled back are gone
            raise

    def _add(self, round_: Round, ts: int) -> None:
        # rows sorted by key: with the time first, a round appends at the end of each table
        with self._transaction() as db:
            db.executemany("INSERT OR REPLACE INTO log_end_raw(ts, pid, end_offset) VALUES (?, ?, ?)",
                           sorted((ts, self._pid(t, p), end) for t, p, end in round_.log_ends))
            db.executemany("INSERT OR REPLACE INTO group_lag_raw(ts, gid, lag) VALUES (?, ?, ?)",
                           sorted((ts, self._gid(g, s), lag) for g, s, lag in round_.group_lags))
            by_group: dict[int, dict[int, int]] = {}
            for g, s, t, p, lag in round_.partition_lags:
                by_group.setdefault(self._gid(g, s), {})[self._pid(t, p)] = lag
            db.executemany("INSERT OR REPLACE INTO partition_lag_raw(ts, gid, packed) VALUES (?, ?, ?)",
                           [(ts, gid, pack_pairs(lags)) for gid, lags in sorted(by_group.items())])
            pairs = [(self._gid(g, s), self._pid(t, p), c) for g, s, t, p, c in round_.commits]
            db.executemany("INSERT OR IGNORE INTO group_partition(gid, pid) VALUES (?, ?)",
                           sorted({(gid, pid) for gid, pid, _ in pairs}))
            db.executemany("INSERT OR IGNORE INTO commits(gid, pid, ts, committed, lag) VALUES (?, ?, ?, ?, ?)",
                           [(gid, pid, c.timestamp_ms, c.offset, c.lag) for gid, pid, c in pairs])
            if round_.rates is not None:
                r = round_.rates
                db.execute("INSERT OR REPLACE INTO rates_raw(ts, bytes_in, bytes_out, messages_in) VALUES (?, ?, ?, ?)",
                           (ts, r.bytes_in, r.bytes_out, r.messages_in))
        times = self._times[0]
        if round_.log_ends and (not times or times[-1] != ts):
            if not times or times[-1] < ts:
                times.append(ts)
            elif ts not in times:
                bisect.insort(times, ts)

    # -- what the sampler reloads after a restart -----------------------------------------------------------------

    def commit_windows(self, n: int) -> dict[CommitKey, list[CommitPoint]]:
        """The last ``n`` stored commits of every (group, partition), oldest first."""
        groups, partitions = self._names()
        found: dict[CommitKey, list[CommitPoint]] = {}
        with self._lock:
            rows = self._db.execute("SELECT gid, pid, ts, committed, lag FROM commits ORDER BY gid, pid, ts").fetchall()
        for gid, pid, ts, offset, lag in rows:
            if gid in groups and pid in partitions:
                found.setdefault(groups[gid] + partitions[pid], []).append(CommitPoint(offset, ts, lag))
        return {key: points[-n:] for key, points in found.items()}

    def recent_log_ends(self, n: int) -> dict[TopicPartition, list[tuple[int, int]]]:
        """The last ``n`` raw log-end samples of every partition as (ms, log end), oldest first."""
        partitions = self._names()[1]
        found: dict[TopicPartition, list[tuple[int, int]]] = {}
        with self._lock:
            rows = self._db.execute("SELECT ts, pid, end_offset FROM log_end_raw WHERE ts >= ? ORDER BY ts",
                                    (self._nth_newest("log_end_raw", n),)).fetchall()
        for ts, pid, end in rows:
            if pid in partitions:
                found.setdefault(partitions[pid], []).append((ts * 1000, end))
        return found

    def recent_group_lags(self, n: int) -> dict[GroupKey, list[int]]:
        """The last ``n`` raw total-lag samples of every group, oldest first."""
        groups = self._names()[0]
        found: dict[GroupKey, list[int]] = {}
        with self._lock:
            rows = self._db.execute("SELECT gid, lag FROM group_lag_raw WHERE ts >= ? ORDER BY ts",
                                    (self._nth_newest("group_lag_raw", n),)).fetchall()
        for gid, lag in rows:
            if gid in groups:
                found.setdefault(groups[gid], []).append(lag)
        return found

    def _nth_newest(self, table: str, n: int) -> int:
        """The ``n``-th newest distinct sample time of a table (its oldest when it holds fewer), stepping back one
        time at a time through the primary key."""
        row = self._db.execute(
            f"WITH RECURSIVE r(ts, k) AS (SELECT (SELECT max(ts) FROM {table}), 1 UNION ALL "
            f"SELECT (SELECT max(ts) FROM {table} WHERE ts < r.ts), k + 1 FROM r WHERE r.ts IS NOT NULL AND k < ?) "
            "SELECT min(ts) FROM r", (n,)).fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    def _names(self) -> tuple[dict[int, GroupKey], dict[int, TopicPartition]]:
        with self._lock:
            return {i: k for k, i in self._gids.items()}, {i: k for k, i in self._pids.items()}

    # -- log-end lookups (binary searches over the sample times: a log end only grows) ---------------------------

    def _load_times(self) -> None:
        """The distinct sample times of each log-end tier, oldest first."""
        with self._lock:
            self._times = [[ts for (ts,) in self._db.execute(
                f"WITH RECURSIVE r(ts) AS (SELECT (SELECT min(ts) FROM log_end_{tier}) UNION ALL "
                f"SELECT (SELECT min(ts) FROM log_end_{tier} WHERE ts > r.ts) FROM r WHERE r.ts IS NOT NULL) "
                "SELECT ts FROM r WHERE ts IS NOT NULL")] for tier, _ in TIERS]

    def _end(self, tier: int, pid: int, index: int, step: int) -> tuple[int, int, int] | None:
        """The partition's (index, time, log end) at the tier's ``index``-th sample time, or the nearest one
        stepping by ``step`` where the partition was sampled; None past the end. A bucket's log end is its largest,
        the last of its samples: it stands at the bucket's end."""
        times, shift = self._times[tier], TIERS[tier][1] if tier else 0
        while 0 <= index < len(times):
            row = self._db.execute(f"SELECT end_offset FROM log_end_{TIERS[tier][0]} WHERE ts = ? AND pid = ?",
                                   (times[index], pid)).fetchone()
            if row is not None:
                return index, times[index] + shift, int(row[0])
            index += step
        return None

    def log_end_at(self, topic: str, partition: int, ts_ms: int) -> float | None:
        """The partition's log end at ``ts_ms``, interpolated between stored samples; None before the first one."""
        with self._lock:
            pid = self._pids.get((topic, partition))
            for tier in range(len(TIERS)) if pid is not None else ():
                assert pid is not None
                shift = TIERS[tier][1] if tier else 0
                index = bisect.bisect_right(self._times[tier], ts_ms / 1000 - shift) - 1
                before = self._end(tier, pid, index, -1)
                if before is None:
                    continue
                after = self._end(tier, pid, before[0] + 1, 1)
                if after is None:
                    return float(before[2])
                (_, t0, e0), (_, t1, e1) = before, after
                return e0 + (e1 - e0) * (ts_ms / 1000 - t0) / (t1 - t0)
        return None

    def passed_ms(self, topic: str, partition: int, offset: int) -> float | None:
        """When the partition's log end passed ``offset`` (the message at ``offset`` was written), interpolated
        between the stored samples around it; before every sample, extrapolated back at the mean rate of the
        samples. None when nothing is stored, or the log end is still at or below ``offset``."""
        with self._lock:
            pid = self._pids.get((topic, partition))
            if pid is None:
                return None
            newest = self._end(0, pid, len(self._times[0]) - 1, -1)
            if newest is not None and newest[2] <= offset:
                return None
            oldest = None
            for tier in range(len(TIERS)):  # newest tier first: the crossing is most likely recent
                first = self._end(tier, pid, 0, 1)
                last = self._end(tier, pid, len(self._times[tier]) - 1, -1)
                if first is None or last is None:
                    continue
                oldest = first if oldest is None or first[1] < oldest[1] else oldest
                if first[2] > offset or last[2] <= offset:
                    continue  # not in this tier's time
                low, high = first, last  # low: at or below the offset, high: past it
                while high[0] - low[0] > 1:
                    middle = self._end(tier, pid, (low[0] + high[0]) // 2, -1)
                    if middle is None or middle[0] == low[0]:
                        middle = self._end(tier, pid, (low[0] + high[0]) // 2 + 1, 1)
                        if middle is None or middle[0] == high[0]:
                            break
                    low, high = (middle, high) if middle[2] <= offset else (low, middle)
                return 1000 * _interpolate_time(low[1:], high[1:], offset + 1)
        if oldest is None or newest is None or newest[1] <= oldest[1] or newest[2] <= oldest[2]:
            return None
        return 1000 * _interpolate_time(oldest[1:], newest[1:], offset + 1)

    # -- charts ---------------------------------------------------------------------------------------------------

    def group_lag_points(self, group: str, storage: Storage, span: Span, now_ms: int | None = None) -> Points:
        gid = self._gids.get((group, storage))
        if gid is None:
            return ()
        rows = self._read(GROUP_LAG, span, now_ms, gid)
        return tuple((ts * 1000, float(lag)) for ts, lag in rows)

    def partition_lag_points(self, group: str, storage: Storage, span: Span,
                             now_ms: int | None = None) -> dict[TopicPartition, Points]:
        gid = self._gids.get((group, storage))
        if gid is None:
            return {}
        names = self._names()[1]
        points: dict[TopicPartition, list[tuple[int, float]]] = {}
        for ts, pid, lag in self._read(PARTITION_LAG, span, now_ms, gid):
            if pid in names:
                points.setdefault(names[pid], []).append((ts * 1000, float(lag)))
        return {key: tuple(series) for key, series in sorted(points.items())}

    def rate_points(self, span: Span, now_ms: int | None = None) -> dict[str, Points]:
        rows = self._read(RATES, span, now_ms, None)
        return {name: tuple((row[0] * 1000, float(row[i])) for row in rows)
                for i, name in enumerate(("bytes_in", "bytes_out", "messages_in"), 1)}

    def _read(self, kind: _Kind, span: Span, now_ms: int | None, series: int | None) -> list[tuple[int, ...]]:
        """A span of one series at its tier's resolution, oldest first: (ts[, sub], values...) rows. The span's tier
        up to its watermark, then each finer tier from the coarser one's watermark on, bucketed alike."""
        if span not in SPAN_SECONDS:
            raise ValueError(f"unknown chart span {span!r}: one of {', '.join(SPAN_SECONDS)}")
        now_s = int((self._clock() * 1000 if now_ms is None else now_ms) // 1000)
        tier = SPAN_TIER[span]
        bucket = TIERS[tier][1]
        start = (now_s - SPAN_SECONDS[span]) // bucket * bucket
        sub = f"t.{kind.sub}, " if kind.sub and not kind.packed else ""
        names = f"t.{PACKED_COLUMN}" if kind.packed else ", ".join(f"t.{v[0]}" for v in kind.values)
        with self._lock:
            marks = [self._watermark(kind, i) for i in range(len(TIERS))]
            steps, parts, lower = [], [], start
            for i in range(tier, -1, -1):
                table, upper = f"{kind.name}_{TIERS[i][0]}", marks[i]
                if kind.series is None:
                    parts.append(f"SELECT {sub}t.ts AS ts, {names} FROM {table} AS t "
                                 f"WHERE t.ts >= {lower} AND t.ts < {upper}")
                else:  # one seek per sample time: the series' rows sit among every other series' at that time
                    steps.append(f"r{i}(ts) AS (SELECT (SELECT min(ts) FROM {table} WHERE ts >= {lower}) UNION ALL "
                                 f"SELECT (SELECT min(ts) FROM {table} WHERE ts > r{i}.ts) FROM r{i} "
                                 f"WHERE r{i}.ts < {upper})")
                    parts.append(f"SELECT {sub}t.ts AS ts, {names} FROM r{i} JOIN {table} AS t ON t.ts = r{i}.ts "
                                 f"AND t.{kind.series} = :series WHERE r{i}.ts < {upper}")
                lower = max(lower, upper) if i > 0 else lower
            with_ = f"WITH RECURSIVE {', '.join(steps)} " if steps else ""
            if kind.packed:
                rows = self._db.execute(f"{with_}" + " UNION ALL ".join(parts), {"series": series}).fetchall()
                return unpacked_rows(rows, bucket if tier else 0)
            value_names = ", ".join(v[0] for v in kind.values)
            by_sub = f", {kind.sub}" if kind.sub else ""
            if tier == 0:
                sql = f"{with_}SELECT ts{by_sub}, {value_names} FROM ({parts[0]}) ORDER BY ts{by_sub}"
            else:
                aggregates = ", ".join(f"{agg}({col})" for col, _, agg in kind.values)
                sql = (f"{with_}SELECT ts / {bucket} * {bucket} AS bucket{by_sub}, {aggregates} FROM ("
                       + " UNION ALL ".join(parts) + f") GROUP BY bucket{by_sub} ORDER BY bucket{by_sub}")
            return self._db.execute(sql, {"series": series}).fetchall()

    def _watermark(self, kind: _Kind, tier: int) -> int:
        """Up to when (seconds) tier ``tier`` of ``kind`` holds rolled-up buckets; the raw tier: always."""
        if tier == 0:
            return 2 ** 62
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (f"rolled:{kind.name}:{TIERS[tier][0]}",))
        found = row.fetchone()
        return int(found[0]) if found else 0

    # -- maintenance ----------------------------------------------------------------------------------------------

    def maintain(self) -> None:
        """Roll complete buckets up, delete what is past its age, keep the file under its cap (see the module)."""
        now_s = int(self._clock())
        self._roll_up(now_s)
        self._expire(now_s)
        if self.used_bytes() > HIGH_WATER * self.cap_bytes:
            self._drop_oldest(now_s)
        with self._lock:
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self._load_times()

    def used_bytes(self) -> int:
        """The bytes the database's pages hold (its free pages left out)."""
        with self._lock:
            pages = self._db.execute("PRAGMA page_count").fetchone()[0]
            free = self._db.execute("PRAGMA freelist_count").fetchone()[0]
            return int((pages - free) * self._db.execute("PRAGMA page_size").fetchone()[0])

    def size_bytes(self) -> int:
        """The file's size on disk, its write-ahead log included."""
        return sum(os.path.getsize(p) for p in (self.path, self.path + "-wal") if os.path.exists(p))

    def _roll_up(self, now_s: int) -> None:
        """Roll complete buckets of each tier into the next, one bucket per transaction."""
        for kind in KINDS:
            for tier in range(1, len(TIERS)):
                bucket = TIERS[tier][1]
                with self._lock:
                    low = self._watermark(kind, tier)
                    source_end = now_s - ROLLUP_GRACE_S if tier == 1 else self._watermark(kind, tier - 1)
                oldest = self._oldest(kind, tier - 1)
                if oldest is None:
                    continue  # nothing to roll up yet
                high = source_end // bucket * bucket
                low = max(low, oldest // bucket * bucket)  # skip what was never there or was dropped for the cap
                while low < high:
                    self._roll_bucket(kind, tier, low)
                    low += bucket

    def _roll_bucket(self, kind: _Kind, tier: int, low: int) -> None:
        bucket = TIERS[tier][1]
        source, target = f"{kind.name}_{TIERS[tier - 1][0]}", f"{kind.name}_{TIERS[tier][0]}"
        if kind.packed:  # each sub's largest value over the bucket, per series, in Python: SQLite cannot see in
            with self._transaction() as db:
                rows = db.execute(f"SELECT {kind.series}, {PACKED_COLUMN} FROM {source} WHERE ts >= ? AND ts < ?",
                                  (low, low + bucket))
                db.executemany(f"INSERT OR REPLACE INTO {target}({', '.join(kind.columns)}) VALUES ({low}, ?, ?)",
                               largest_per_series(rows))
                db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)",
                           (f"rolled:{kind.name}:{TIERS[tier][0]}", low + bucket))
            return
        aggregates = ", ".join(f"{agg}({col})" for col, _, agg in kind.values)
        keys = "".join(f", {c}" for c in (kind.series, kind.sub) if c)
        with self._transaction() as db:
            db.execute(f"INSERT OR REPLACE INTO {target}({', '.join(kind.columns)}) "
                       f"SELECT {low}{keys}, {aggregates} FROM {source} WHERE ts >= ? AND ts < ? "
                       f"GROUP BY {keys.lstrip(', ') or 'NULL'}", (low, low + bucket))
            db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)",
                       (f"rolled:{kind.name}:{TIERS[tier][0]}", low + bucket))

    def _oldest(self, kind: _Kind, tier: int) -> int | None:
        """The oldest sample time of a kind's tier (seconds), None when it is empty."""
        with self._lock:
            row = self._db.execute(f"SELECT min(ts) FROM {kind.name}_{TIERS[tier][0]}").fetchone()
        return int(row[0]) if row and row[0] is not None else None

    def _expire(self, now_s: int, scale: float = 1.0) -> None:
        """Delete samples past their tier's age times ``scale``; at full age, raw ones only once rolled up."""
        for kind in KINDS:
            for tier in range(len(TIERS)):
                cutoff = now_s - int(self._retention_s[tier] * scale)
                if tier + 1 < len(TIERS) and scale >= 1.0:
                    with self._lock:
                        cutoff = min(cutoff, self._watermark(kind, tier + 1))
                self._delete_before(f"{kind.name}_{TIERS[tier][0]}", cutoff, DELETE_SLICE_S[tier])
        self._expire_commits(now_s, scale)

    def _delete_before(self, table: str, cutoff: int, slice_s: int) -> None:
        """Delete a table's rows older than ``cutoff`` from its front, at most ``slice_s`` of time per statement,
        each statement its own transaction."""
        sql = f"DELETE FROM {table} WHERE ts < min(?, (SELECT min(ts) FROM {table}) + ?)"
        while True:
            with self._transaction() as db:
                if db.execute(sql, (cutoff, slice_s)).rowcount <= 0:
                    return

    def _expire_commits(self, now_s: int, scale: float) -> None:
        """Commits keep Burrow's window: all but the last ``commits_kept`` of each (group, partition) go; a group
        silent for the hourly age goes whole."""
        gone_cutoff = (now_s - int(self._retention_s[-1] * scale)) * 1000
        keep = ("DELETE FROM commits WHERE gid = ? AND pid = ? AND ts < coalesce((SELECT ts FROM commits "
                "WHERE gid = ? AND pid = ? ORDER BY ts DESC LIMIT 1 OFFSET ?), -1)")
        with self._lock:
            pairs = self._db.execute("SELECT gid, pid FROM group_partition").fetchall()
        for i in range(0, len(pairs), COMMIT_CHUNK):
            chunk = pairs[i:i + COMMIT_CHUNK]
            with self._transaction() as db:
                db.executemany(keep, [(g, p, g, p, self._commits_kept - 1) for g, p in chunk])
        with self._transaction() as db:
            db.execute("DELETE FROM commits WHERE (gid, pid) IN (SELECT gid, pid FROM commits GROUP BY gid, pid "
                       "HAVING max(ts) < ?)", (gone_cutoff,))
            db.execute("DELETE FROM group_partition WHERE NOT EXISTS (SELECT 1 FROM commits AS c "
                       "WHERE c.gid = group_partition.gid AND c.pid = group_partition.pid)")

    def _drop_oldest(self, now_s: int) -> None:
        """Over the cap: shorten every tier's age by the same factor, a step at a time, so each tier loses its oldest
        samples first and every chart keeps its shape (a day, a week, a month become, say, 6 h, 42 h, a week), until
        the data fits under the low-water mark; then hand the freed pages back to the file system."""
        scale = 1.0
        while self.used_bytes() > LOW_WATER * self.cap_bytes and scale > 0.001:
            scale *= 0.8
            self._expire(now_s, scale)
        self._shrink()

    def _shrink(self) -> None:
        """Give free pages back to the file system, a bounded number per statement."""
        while True:
            with self._lock:
                free = self._db.execute("PRAGMA freelist_count").fetchone()[0]
                if not free:
                    return
                self._db.execute("PRAGMA incremental_vacuum(2048)").fetchall()
                if self._db.execute("PRAGMA freelist_count").fetchone()[0] >= free:
                    return  # nothing moved (a file without auto_vacuum): leave it


def _interpolate_time(before: tuple[int, int], after: tuple[int, int], value: float) -> float:
    """The time (seconds) the log end reached ``value`` on the line through two samples (ts, log end)."""
    (t0, e0), (t1, e1) = before, after
    if e1 == e0:
        return float(t1)
    return t0 + (value - e0) * (t1 - t0) / (e1 - e0)


def _schema() -> list[str]:
    statements = [
        "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID",
        "CREATE TABLE IF NOT EXISTS topic_partition(id INTEGER PRIMARY KEY, topic TEXT NOT NULL, "
        "partition INTEGER NOT NULL, UNIQUE(topic, partition))",
        "CREATE TABLE IF NOT EXISTS consumer_group(id INTEGER PRIMARY KEY, name TEXT NOT NULL, storage TEXT NOT NULL, "
        "UNIQUE(name, storage))",
        "CREATE TABLE IF NOT EXISTS group_partition(gid INTEGER NOT NULL, pid INTEGER NOT NULL, "
        "PRIMARY KEY(gid, pid)) WITHOUT ROWID",
        # one row per commit seen: its time (ms) and offset tell a new commit from the same one seen again
        "CREATE TABLE IF NOT EXISTS commits(gid INTEGER NOT NULL, pid INTEGER NOT NULL, ts INTEGER NOT NULL, "
        "committed INTEGER NOT NULL, lag INTEGER, PRIMARY KEY(gid, pid, ts, committed)) WITHOUT ROWID",
    ]
    for kind in KINDS:
        for tier, _ in TIERS:
            values = [f"{PACKED_COLUMN} BLOB NOT NULL"] if kind.packed else [
                f"{c} {t} NOT NULL" for c, t, _ in kind.values]
            columns = [f"{c} INTEGER NOT NULL" for c in kind.key] + values
            statements.append(f"CREATE TABLE IF NOT EXISTS {kind.name}_{tier}({', '.join(columns)}, "
                              f"PRIMARY KEY({', '.join(kind.key)})) WITHOUT ROWID")
    return statements
