"""The checks after the faults stop and the cluster heals.

- acknowledged sends: each present exactly once, at its acknowledged offset, and each producer's values in send
  order per partition (read back with a plain read_uncommitted consumer from offset 0 to the high watermark);
- replicas: the record batches below the high watermark byte for byte equal in every replica's segment files
  (read straight from the brokers' log dirs; followers may hold more than the high watermark, which is not compared);
- transactions: a committed one's output complete, an aborted one's invisible to read_committed, one of unknown
  outcome all or nothing, and no input's output visible twice;
- group offsets: never observed going backwards, nor below an acknowledged commit.
"""
from __future__ import annotations

import struct
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from bench.reliability.chaos.workload import PARTITIONS, PLAIN_TOPICS, TXN_IN, TXN_OUT, Records

BATCH_HEADER = 12  # base offset (8) + batch length (4)


def read_partition(bootstrap: str, topic: str, partition: int, committed_only: bool,
                   timeout: float = 120.0) -> tuple[list[tuple[int, bytes]], int]:
    """Every record of one partition from offset 0: [(offset, value)], and the end offset read to."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"chaos-check-{time.monotonic_ns()}",
                         "enable.auto.commit": False,
                         "isolation.level": "read_committed" if committed_only else "read_uncommitted"})
    try:
        tp = TopicPartition(topic, partition)
        _, end = consumer.get_watermark_offsets(tp, timeout=30, cached=False)
        consumer.assign([TopicPartition(topic, partition, 0)])
        out: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + timeout
        position = 0
        while position < end and time.monotonic() < deadline:
            for m in consumer.consume(500, timeout=1.0):
                if m.error() is None:
                    out.append((m.offset() or 0, m.value() or b""))
            got = consumer.position([tp])[0].offset
            position = max(position, got if got >= 0 else 0)
        if position < end:
            raise RuntimeError(f"{topic}-{partition}: read to {position} of {end} within {timeout}s")
        return out, end
    finally:
        consumer.close()


def check_acks(bootstrap: str, records: Records, started: float = 0.0) -> dict[str, Any]:
    logs: dict[tuple[str, int], list[tuple[int, bytes]]] = {}
    for topic in (*PLAIN_TOPICS, TXN_IN):
        for p in range(PARTITIONS):
            logs[(topic, p)], _ = read_partition(bootstrap, topic, p, committed_only=False)
    lost = moved = duplicated = reordered = 0
    examples: list[str] = []
    for (topic, p), entries in logs.items():
        where = _index(entries)
        duplicated += sum(len(o) - 1 for o in where.values() if len(o) > 1)
        if len(examples) < 10:
            acked = {a.value: a for a in records.acks if a.topic == topic and a.partition == p}
            examples += [f"duplicate {v!r} at {o} in {topic}-{p}" + (
                f" (acked at {acked[v].offset}, {acked[v].at - started:.1f} s into the run)" if v in acked else "")
                for v, o in where.items() if len(o) > 1][:3]
        last_seq = -1
        for _, value in entries:  # one producer per topic: its sequence numbers must rise through the log
            seq = int(value.rsplit(b":", 1)[1])
            if seq <= last_seq:
                reordered += 1
                if len(examples) < 10:
                    examples.append(f"reordered {value!r} after seq {last_seq} in {topic}-{p}")
            last_seq = max(last_seq, seq)
    positions = {key: _index(entries) for key, entries in logs.items()}
    for ack in records.acks:
        offsets = positions.get((ack.topic, ack.partition), {}).get(ack.value)
        if not offsets:
            lost += 1
            if len(examples) < 10:
                examples.append(f"lost {ack.value!r} acked at {ack.topic}-{ack.partition}@{ack.offset}")
        elif ack.offset not in offsets:
            moved += 1
            if len(examples) < 10:
                examples.append(f"{ack.value!r} acked at offset {ack.offset}, found at {offsets}")
    return {"acknowledged": len(records.acks), "send_failures": records.failed, "lost": lost,
            "offset_mismatch": moved, "duplicated": duplicated, "reordered": reordered,
            "log_records": sum(len(e) for e in logs.values()), "examples": examples}


def _index(entries: list[tuple[int, bytes]]) -> dict[bytes, list[int]]:
    where: dict[bytes, list[int]] = defaultdict(list)
    for offset, value in entries:
        where[value].append(offset)
    return where


def batches(partition_dir: Path) -> list[tuple[int, bytes]]:
    """(base offset, whole batch bytes) of every complete batch in a partition directory's segments, in order."""
    out: list[tuple[int, bytes]] = []
    for segment in sorted(partition_dir.glob("*.log")):
        data = segment.read_bytes()
        pos = 0
        while pos + BATCH_HEADER <= len(data):
            base, length = struct.unpack_from(">qi", data, pos)
            end = pos + BATCH_HEADER + length
            if length <= 0 or end > len(data):
                break
            out.append((base, data[pos:end]))
            pos = end
    return out


def last_offset(batch: bytes) -> int:
    base, = struct.unpack_from(">q", batch, 0)
    delta, = struct.unpack_from(">i", batch, 23)  # base offset 8, length 4, leader epoch 4, magic 1, crc 4, attrs 2
    return int(base + delta)


def check_replicas(bootstrap: str, log_dirs: dict[int, Path], topics: list[str]) -> dict[str, Any]:
    """Byte-for-byte equality of each partition's batches below its high watermark across the replicas."""
    divergent: list[str] = []
    short: list[str] = []
    compared = 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "chaos-check-hw"})
    try:
        metadata = consumer.list_topics(timeout=30)
        for topic in topics:
            for p in range(PARTITIONS):
                _, hw = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30, cached=False)
                prefixes: dict[int, list[bytes]] = {}
                replicas = set(metadata.topics[topic].partitions[p].replicas)  # more brokers than replicas: its own
                for broker, directory in log_dirs.items():
                    if broker not in replicas:
                        continue
                    below = [b for base, b in batches(directory / f"{topic}-{p}") if base < hw]
                    if hw > 0 and (not below or last_offset(below[-1]) < hw - 1):
                        short.append(f"{topic}-{p} on broker {broker}: log ends before the high watermark {hw}")
                    prefixes[broker] = below
                compared += 1
                reference = next(iter(prefixes.values()))
                for broker, prefix in prefixes.items():
                    if prefix != reference:
                        first = next((i for i, (a, b) in enumerate(zip(prefix, reference)) if a != b),
                                     min(len(prefix), len(reference)))
                        divergent.append(f"{topic}-{p}: broker {broker} differs from broker "
                                         f"{next(iter(prefixes))} at batch #{first} (hw {hw})")
    finally:
        consumer.close()
    return {"partitions_compared": compared, "replica_divergences": len(divergent) + len(short),
            "examples": (divergent + short)[:10]}


def check_transactions(bootstrap: str, records: Records) -> dict[str, Any]:
    visible: dict[int, list[bytes]] = defaultdict(list)
    for p in range(PARTITIONS):
        entries, _ = read_partition(bootstrap, TXN_OUT, p, committed_only=True)
        for _, value in entries:
            txn_number, _, source = value.partition(b"|")
            visible[int(txn_number)].append(source)
    outcomes = dict(records.txns)
    aborted_visible = incomplete = partial_unknown = 0
    examples: list[str] = []
    for number, (outcome, inputs) in outcomes.items():
        seen = sorted(visible.get(number, []))
        if outcome == "aborted" and seen:
            aborted_visible += 1
            examples.append(f"aborted transaction {number}: {len(seen)} of its outputs visible")
        elif outcome == "committed" and seen != sorted(inputs):
            incomplete += 1
            examples.append(f"committed transaction {number}: {len(seen)} of {len(inputs)} outputs visible")
        elif outcome == "unknown" and seen and seen != sorted(inputs):
            partial_unknown += 1
            examples.append(f"transaction {number} (outcome unknown): {len(seen)} of {len(inputs)} visible")
    strangers = [n for n in visible if n not in outcomes]
    sources: dict[bytes, int] = defaultdict(int)
    for outputs in visible.values():
        for source in outputs:
            sources[source] += 1
    twice = sum(1 for n in sources.values() if n > 1)
    counts: dict[str, int] = defaultdict(int)
    for outcome, _ in outcomes.values():
        counts[outcome] += 1
    return {"committed": counts["committed"], "aborted": counts["aborted"], "unknown": counts["unknown"],
            "aborted_visible": aborted_visible, "committed_incomplete": incomplete,
            "unknown_partial": partial_unknown, "unrecorded_visible": len(strangers),
            "inputs_processed_twice": twice, "examples": examples[:10]}


def check_group_offsets(records: Records) -> dict[str, Any]:
    regressions: list[str] = []
    events = sorted([(t, tp, p, o, "observed") for t, tp, p, o in records.observed]
                    + [(t, tp, p, o, "committed") for t, tp, p, o in records.commits])
    floor: dict[tuple[str, int], tuple[int, str]] = {}
    for _, topic, p, offset, kind in events:
        key = (topic, p)
        if kind == "observed" and key in floor and offset < floor[key][0]:
            regressions.append(f"{topic}-{p}: observed {offset} after {floor[key][1]} {floor[key][0]}")
        if key not in floor or offset > floor[key][0]:
            floor[key] = (offset, kind)
    return {"commits": len(records.commits), "observations": len(records.observed),
            "offset_regressions": len(regressions), "examples": regressions[:10]}


def unavailability(records: Records, start: float, end: float, min_gap: float = 1.0) -> dict[str, Any]:
    """Windows without an acknowledged produce on a partition (gaps of at least ``min_gap`` s between acks
    that left it, measured by when the acks arrived)."""
    times: dict[tuple[str, int], list[float]] = defaultdict(list)
    for ack in records.acks:
        times[(ack.topic, ack.partition)].append(ack.at)
    gaps: list[float] = []
    for series in times.values():
        series = sorted(t for t in series if start <= t <= end)
        gaps += [b - a for a, b in zip(series, series[1:]) if b - a >= min_gap]
    gaps.sort()

    def pct(q: float) -> float | None:
        return round(gaps[min(len(gaps) - 1, int(q * len(gaps)))], 2) if gaps else None
    return {"windows": len(gaps), "p50_s": pct(0.5), "p99_s": pct(0.99), "max_s": round(gaps[-1], 2) if gaps else None,
            "min_gap_s": min_gap}
