"""What `kbroker ui` makes of its snapshots: each group's lag, lag in seconds and status, and the charts' series.

``ingest`` stores a round in the history (log ends, new commits with the lag they had when made, each group's lag,
the cluster's rates) and keeps in memory what the views read at every page: the last ``window`` commits of each
(group, partition) for Burrow's rules, the last ``window`` log-end samples of each partition, and each group's last
60 total lags for its sparkline. All of it is reloaded from the history at start, so a restart keeps statuses.

Views are as of the last snapshot: lag, lag in seconds and status are evaluated at its time (``taken_ms``), so a
collector that cannot reach the cluster freezes them rather than turning every group STOP. Charts end at the
injected clock's now. The sampler is synchronous like the history under it: the web app calls it from threads, and
a lock makes a round and a read take turns.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Literal

from kbroker.ui.history import History, Round, Span
from kbroker.ui.model import Commit, Group, GroupView, PartitionLag, Points, Snapshot, Storage
from kbroker.ui.status_rules import CommitPoint, group_status, partition_status

SPARKLINE = 60  # total-lag samples in a group's sparkline
TopicPartition = tuple[str, int]
GroupKey = tuple[str, Storage]


class Sampler:
    def __init__(self, history: History, *, clock: Callable[[], float] = time.time, window: int = 10) -> None:
        if window < 2:
            raise ValueError(f"the commit window must hold at least 2 commits, not {window}")
        self._history = history
        self._clock = clock
        self._window = window
        self._snapshot: Snapshot | None = None
        self._views: tuple[GroupView, ...] | None = None  # of the last snapshot, made at the first read
        self._commits: dict[tuple[str, Storage, str, int], deque[CommitPoint]] = {
            key: deque(points, maxlen=window) for key, points in history.commit_windows(window).items()}
        self._log_ends: dict[TopicPartition, deque[tuple[int, int]]] = {
            key: deque(samples, maxlen=window) for key, samples in history.recent_log_ends(window).items()}
        self._sparklines: dict[GroupKey, deque[int]] = {
            key: deque(lags, maxlen=SPARKLINE) for key, lags in history.recent_group_lags(SPARKLINE).items()}
        self._passed: dict[tuple[str, int, int], float | None] = {}  # (topic, partition, offset) -> ms
        self._lock = threading.RLock()

    # -- a new round ----------------------------------------------------------------------------------------------

    def ingest(self, snapshot: Snapshot) -> None:
        """Store the snapshot's log ends, new commits, group lags and rates; its views are made at the next read."""
        with self._lock:
            self._ingest(snapshot)

    def _ingest(self, snapshot: Snapshot) -> None:
        now = snapshot.taken_ms
        ends = {(p.topic, p.partition): p.log_end for t in snapshot.topics for p in t.partitions if p.log_end >= 0}
        commits = []
        for commit in snapshot.commits:
            key = (commit.group, commit.storage, commit.topic, commit.partition)
            window = self._commits.get(key)
            last = window[-1] if window else None
            if last is not None and (commit.timestamp_ms, commit.offset) == (last.timestamp_ms, last.offset):
                continue  # the same commit seen again
            if last is not None and commit.timestamp_ms < last.timestamp_ms:
                continue  # older than one already known: nothing new
            end = self._log_end_at((commit.topic, commit.partition), commit.timestamp_ms, ends, now)
            lag = None if end is None else max(0, int(end) - commit.offset)
            point = CommitPoint(commit.offset, commit.timestamp_ms, lag)
            self._commits.setdefault(key, deque(maxlen=self._window)).append(point)
            commits.append((commit.group, commit.storage, commit.topic, commit.partition, point))
        for tp, log_end in ends.items():
            self._log_ends.setdefault(tp, deque(maxlen=self._window)).append((now, log_end))
        group_lags, partition_lags = [], []
        by_group = _commits_by_group(snapshot)
        for group in _groups(snapshot):
            total = 0
            for (topic, partition), (committed, _) in _committed(by_group, group).items():
                if (topic, partition) not in ends:
                    continue
                lag = _lag(committed, ends[(topic, partition)])
                total += lag
                partition_lags.append((group.name, group.storage, topic, partition, lag))
            group_lags.append((group.name, group.storage, total))
            self._sparklines.setdefault((group.name, group.storage), deque(maxlen=SPARKLINE)).append(total)
        self._history.add(Round(now, log_ends=[(t, p, e) for (t, p), e in ends.items()], group_lags=group_lags,
                                partition_lags=partition_lags, commits=commits, rates=snapshot.rates))
        self._snapshot = snapshot
        self._views = None

    def _log_end_at(self, key: TopicPartition, ts_ms: int, ends: dict[TopicPartition, int], now: int) -> float | None:
        """The log end when a commit was made: interpolated between the last sample and this one when it falls
        between them (nearly always), else read from the history; None before the first sample."""
        current = ends.get(key)
        previous = self._log_ends.get(key)
        if current is not None and ts_ms >= now:
            return float(current)
        if previous:
            before_ms, before = previous[-1]
            if current is not None and before_ms <= ts_ms < now:
                return before + (current - before) * (ts_ms - before_ms) / (now - before_ms)
            if current is None and ts_ms >= before_ms:
                return float(before)
        return self._history.log_end_at(key[0], key[1], ts_ms)

    # -- views ----------------------------------------------------------------------------------------------------

    def groups(self) -> list[GroupView]:
        """Every group of the last snapshot, ZooKeeper- and Kafka-stored alike, by name then storage."""
        with self._lock:
            if self._views is None:
                snapshot = self._snapshot
                self._views = self._make_views(snapshot) if snapshot else ()
                self._prune_passed()
            return list(self._views)

    def group(self, name: str, storage: Storage | None = None) -> GroupView | None:
        """One group of the last snapshot; a name stored both ways answers its Kafka-stored group unless told."""
        return next((v for v in self.groups() if v.name == name and storage in (None, v.storage)), None)

    def _make_views(self, snapshot: Snapshot) -> tuple[GroupView, ...]:
        ends = {(p.topic, p.partition): p.log_end for t in snapshot.topics for p in t.partitions}
        by_group = _commits_by_group(snapshot)
        return tuple(self._view(snapshot, g, ends, by_group) for g in _groups(snapshot))

    def _view(self, snapshot: Snapshot, group: Group, ends: dict[TopicPartition, int],
              by_group: dict[GroupKey, list[Commit]]) -> GroupView:
        owners = _owners(group)
        partitions = []
        for (topic, partition), (committed, commit_ms) in sorted(_committed(by_group, group).items()):
            log_end = ends.get((topic, partition), -1)
            lag = _lag(committed, log_end) if log_end >= 0 else 0
            window = self._commits.get((group.name, group.storage, topic, partition), ())
            recent = [end for _, end in self._log_ends.get((topic, partition), ())]
            status = partition_status(list(window), lag, recent, snapshot.taken_ms) if committed >= 0 else "OK"
            partitions.append(PartitionLag(
                topic=topic, partition=partition, committed=committed, log_end=log_end, lag=lag,
                lag_seconds=self._lag_seconds(topic, partition, committed, lag, snapshot.taken_ms),
                last_commit_ms=commit_ms, owner=owners.get((topic, partition)), status=status))
        seconds = [p.lag_seconds for p in partitions if p.lag_seconds is not None]
        commits = [p.last_commit_ms for p in partitions if p.last_commit_ms is not None]
        return GroupView(
            name=group.name, storage=group.storage, state=group.state,
            status=group_status(p.status for p in partitions), total_lag=sum(p.lag for p in partitions),
            lag_seconds=max(seconds) if seconds else None, last_commit_ms=max(commits) if commits else None,
            partitions=tuple(partitions), sparkline=tuple(self._sparklines.get((group.name, group.storage), ())))

    def _lag_seconds(self, topic: str, partition: int, committed: int, lag: int, now_ms: int) -> float | None:
        """How long ago the log end passed the committed offset: the age of the oldest message not consumed."""
        if lag == 0:
            return 0.0
        if committed < 0:
            return None
        passed = self._passed_in_memory((topic, partition), committed)
        if passed is None:
            key = (topic, partition, committed)
            if key not in self._passed:  # once found, when the log end passed an offset never changes
                self._passed[key] = self._history.passed_ms(topic, partition, committed)
            passed = self._passed[key]
        return None if passed is None else max(0.0, (now_ms - passed) / 1000)

    def _passed_in_memory(self, key: TopicPartition, offset: int) -> float | None:
        samples = self._log_ends.get(key, ())
        for (t0, e0), (t1, e1) in zip(samples, list(samples)[1:]):
            if e0 <= offset < e1:
                return t0 + (offset + 1 - e0) * (t1 - t0) / (e1 - e0)
        return None

    def _prune_passed(self) -> None:
        live = {(p.topic, p.partition, p.committed) for v in self._views or () for p in v.partitions}
        self._passed = {k: v for k, v in self._passed.items() if k in live}

    # -- charts and rates -----------------------------------------------------------------------------------------

    def lag_chart(self, group: str, span: Literal["1h", "24h", "7d"], per_partition: bool = False, *,
                  storage: Storage | None = None) -> dict[str, Points]:
        """The group's lag over the span: {"total": ...}, or per partition {"topic-partition": ...}."""
        stored = storage or self._storage_of(group)
        now_ms = int(self._clock() * 1000)
        if not per_partition:
            return {"total": self._history.group_lag_points(group, stored, span, now_ms)}
        series = self._history.partition_lag_points(group, stored, span, now_ms)
        return {f"{topic}-{partition}": points for (topic, partition), points in series.items()}

    def rate_chart(self, span: Span) -> dict[str, Points]:
        """The cluster's throughput over the span: "bytes_in", "bytes_out", "messages_in" per second."""
        return self._history.rate_points(span, int(self._clock() * 1000))

    def topic_rates(self) -> dict[str, float]:
        """Messages per second of each topic of the last snapshot, from its partitions' last two log-end samples
        (a topic none of whose partitions has two yet is left out)."""
        rates: dict[str, float] = {}
        with self._lock:
            for topic in self._snapshot.topics if self._snapshot else ():
                for p in topic.partitions:
                    samples = self._log_ends.get((p.topic, p.partition))
                    if samples and len(samples) >= 2 and samples[-1][0] > samples[-2][0]:
                        (t0, e0), (t1, e1) = samples[-2], samples[-1]
                        rates[topic.name] = rates.get(topic.name, 0.0) + max(0, e1 - e0) * 1000 / (t1 - t0)
        return rates

    def maintain(self) -> None:
        """The history's maintenance (rollups, deletes, the size cap): every few minutes, in a thread."""
        self._history.maintain()

    def _storage_of(self, group: str) -> Storage:
        view = self.group(group)
        return view.storage if view else "kafka"


def _groups(snapshot: Snapshot | None) -> list[Group]:
    """The snapshot's groups, with a group known only by its commits (no member or owner listed) added, empty."""
    if snapshot is None:
        return []
    found = {(g.name, g.storage): g for g in snapshot.groups}
    for c in snapshot.commits:
        found.setdefault((c.group, c.storage), Group(name=c.group, storage=c.storage, state="Empty", members=()))
    return [found[key] for key in sorted(found)]


def _commits_by_group(snapshot: Snapshot) -> dict[GroupKey, list[Commit]]:
    found: dict[GroupKey, list[Commit]] = {}
    for c in snapshot.commits:
        found.setdefault((c.group, c.storage), []).append(c)
    return found


def _committed(by_group: dict[GroupKey, list[Commit]], group: Group) -> dict[TopicPartition, tuple[int, int | None]]:
    """The group's partitions -> (committed offset or -1, commit time or None): those it committed and those
    assigned to it (a member's assignment, a ZooKeeper owner)."""
    found: dict[TopicPartition, tuple[int, int | None]] = {}
    for c in by_group.get((group.name, group.storage), ()):
        held = found.get((c.topic, c.partition))
        if held is None or (held[1] or 0) <= c.timestamp_ms:
            found[(c.topic, c.partition)] = (c.offset, c.timestamp_ms)
    for key in _assigned(group):
        found.setdefault(key, (-1, None))
    return found


def _assigned(group: Group) -> Iterable[TopicPartition]:
    for member in group.members:
        yield from member.assignment
    for topic, partition, _ in group.owners:
        yield topic, partition


def _owners(group: Group) -> dict[TopicPartition, str]:
    """Who reads each partition: a Kafka member as "client_id/host", a ZooKeeper owner by its consumer id (the
    owner node says it; the collector also lists a ZooKeeper group's consumers as members, with no host)."""
    owners = {(t, p): consumer for t, p, consumer in group.owners}
    for member in group.members:
        for key in member.assignment:
            owners.setdefault(key, f"{member.client_id}/{member.host.lstrip('/')}")
    return owners


def _lag(committed: int, log_end: int) -> int:
    """Never below 0; the whole log end when nothing is committed."""
    return max(0, log_end - committed) if committed >= 0 else max(0, log_end)
