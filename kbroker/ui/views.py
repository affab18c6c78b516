"""What each page of `kbroker ui` shows, as JSON-ready dicts: the answer of ``/api/`` + the page's path.

Pure functions of one sampling round (the collector's ``Snapshot`` and what the sampler made of it), so the pages'
content is tested without a server or a cluster. Nothing here reads message contents: the collector never fetches
records, and the views only count offsets and bytes.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from typing import Literal

from kbroker.ui.model import GroupView, Partition, Points, Snapshot, Status, Storage, Topic

JsonObject = dict[str, object]

Span = Literal["1h", "24h", "7d"]  # a chart's time span
SPAN_MS: dict[Span, int] = {"1h": 3_600_000, "24h": 86_400_000, "7d": 7 * 86_400_000}
STATUSES: tuple[Status, ...] = ("OK", "WARN", "ERR", "STOP", "STALL", "REWIND", "NOTFOUND")


@dataclass(frozen=True)
class Round:
    """One sampling round as the pages see it: the snapshot and the sampler's answers computed right after it."""
    seq: int  # 1 for the first round since the UI started
    snapshot: Snapshot
    groups: tuple[GroupView, ...]
    topic_rates: dict[str, float]  # messages in per second, by topic


def series(points: dict[str, Points], span: Span, now_ms: int) -> JsonObject:
    """A chart's series in the columnar shape uPlot draws: shared x (seconds), one y column per name (None where a
    series has no point at that time); ``from`` and ``to`` are the span's ends, so the time axis is the span's
    even when the history is younger than it."""
    times = sorted({t for pts in points.values() for t, _ in pts})
    index = {t: i for i, t in enumerate(times)}
    columns: dict[str, list[float | None]] = {}
    for name in sorted(points):
        column: list[float | None] = [None] * len(times)
        for t, value in points[name]:
            column[index[t]] = value
        columns[name] = column
    return {"x": [t / 1000 for t in times], "names": list(columns), "y": list(columns.values()),
            "from": (now_ms - SPAN_MS[span]) / 1000, "to": now_ms / 1000}


def _partition(p: Partition, topic: Topic) -> JsonObject:
    return {"topic": p.topic, "partition": p.partition, "leader": p.leader, "replicas": list(p.replicas),
            "isr": list(p.isr), "log_start": p.log_start, "log_end": p.log_end, "size_bytes": p.size_bytes,
            "offline": p.leader < 0, "under_replicated": p.under_replicated,
            "under_min_isr": p.leader >= 0 and len(p.isr) < topic.min_insync_replicas,
            "preferred_leader": p.preferred_leader}


def _brokers(snapshot: Snapshot) -> list[JsonObject]:
    return [{**asdict(b), "controller": b.id == snapshot.controller}
            for b in sorted(snapshot.brokers, key=lambda b: b.id)]


def _header(r: Round) -> JsonObject:
    return {"seq": r.seq, "taken_ms": r.snapshot.taken_ms, "errors": list(r.snapshot.errors)}


def overview(r: Round, rate_chart: dict[str, Points], span: Span) -> JsonObject:
    s = r.snapshot
    problems: dict[str, list[JsonObject]] = {"offline": [], "under_replicated": [], "under_min_isr": []}
    total = 0
    for topic in s.topics:
        for p in topic.partitions:
            total += 1
            row = _partition(p, topic)
            for kind, rows in problems.items():
                if row[kind]:
                    rows.append(row)
    by_status: Counter[str] = Counter(g.status for g in r.groups)
    return {
        **_header(r),
        "brokers": _brokers(s),
        "brokers_up": sum(b.up for b in s.brokers),
        "brokers_down": sum(not b.up for b in s.brokers),
        "controller": s.controller,
        "partitions": total,
        **problems,
        "groups_by_status": {status: by_status.get(status, 0) for status in STATUSES},
        "rates": asdict(s.rates) if s.rates else None,
        # bytes and messages differ by orders of magnitude: a chart each
        "throughput_bytes": series({k: v for k, v in rate_chart.items() if k.startswith("bytes")}, span, s.taken_ms),
        "throughput_messages": series({k: v for k, v in rate_chart.items() if not k.startswith("bytes")}, span,
                                      s.taken_ms),
    }


def group_row(g: GroupView) -> JsonObject:
    return {"name": g.name, "storage": g.storage, "state": g.state, "status": g.status, "total_lag": g.total_lag,
            "lag_seconds": g.lag_seconds, "last_commit_ms": g.last_commit_ms, "partitions": len(g.partitions),
            "sparkline": list(g.sparkline)}


def groups(r: Round) -> JsonObject:
    return {**_header(r), "groups": [group_row(g) for g in sorted(r.groups, key=lambda g: (g.name, g.storage))]}


def group(r: Round, view: GroupView, chart: dict[str, Points], span: Span, per_partition: bool) -> JsonObject:
    members = [asdict(m) for g in r.snapshot.groups if g.name == view.name and g.storage == view.storage
               for m in g.members]
    return {**_header(r), "group": group_row(view),
            "partitions": [asdict(p) for p in sorted(view.partitions, key=lambda p: (p.topic, p.partition))],
            "members": members,
            "chart": {"span": span, "per_partition": per_partition, **series(chart, span, r.snapshot.taken_ms)}}


def topics(r: Round) -> JsonObject:
    rows = []
    for topic in sorted(r.snapshot.topics, key=lambda t: t.name):
        parts = [_partition(p, topic) for p in topic.partitions]
        sizes = [p.size_bytes for p in topic.partitions]
        rows.append({"name": topic.name, "internal": topic.internal, "partitions": len(parts),
                     "replication_factor": max((len(p.replicas) for p in topic.partitions), default=0),
                     "offline": sum(bool(p["offline"]) for p in parts),
                     "under_replicated": sum(bool(p["under_replicated"]) for p in parts),
                     "non_preferred_leaders": sum(not p["preferred_leader"] and not p["offline"] for p in parts),
                     # -1: a leader did not answer DescribeLogDirs, so the sum would understate it
                     "size_bytes": -1 if any(size < 0 for size in sizes) else sum(sizes),
                     "messages_per_second": r.topic_rates.get(topic.name)})
    return {**_header(r), "topics": rows}


def topic(r: Round, t: Topic) -> JsonObject:
    return {**_header(r), "name": t.name, "internal": t.internal, "min_insync_replicas": t.min_insync_replicas,
            "messages_per_second": r.topic_rates.get(t.name),
            "partitions": [_partition(p, t) for p in sorted(t.partitions, key=lambda p: p.partition)]}


def brokers(r: Round) -> JsonObject:
    dirs = [{**asdict(d), "offline": d.error is not None,
             "partitions": [{"topic": t, "partition": p, "size_bytes": size}
                            for t, p, size in sorted(d.partitions, key=lambda x: (-x[2], x[0], x[1]))]}
            for d in sorted(r.snapshot.log_dirs, key=lambda d: (d.broker, d.path))]
    return {**_header(r), "brokers": _brokers(r.snapshot), "controller": r.snapshot.controller, "log_dirs": dirs}


def find_group(r: Round, name: str, storage: str | None) -> GroupView | None:
    """A group of the round by name; a name stored both ways is told apart by its storage (Kafka's first)."""
    found = [g for g in r.groups if g.name == name and storage in (None, g.storage)]
    return min(found, key=lambda g: g.storage != "kafka", default=None)


def storage_of(text: str | None) -> Storage | None:
    return "kafka" if text == "kafka" else "zookeeper" if text == "zookeeper" else None


def find_topic(snapshot: Snapshot, name: str) -> Topic | None:
    return next((t for t in snapshot.topics if t.name == name), None)
