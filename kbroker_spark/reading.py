"""Batch and streaming reads: one Spark input partition per topic partition and offset range, read by an
executor with read_committed up to its end offset.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from pyspark.sql.datasource import (
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)

if TYPE_CHECKING:  # imported where used at run time: the driver needs confluent_kafka only to plan
    from pyspark.sql.streaming.datasource import ReadLimit
from kbroker_spark.options import (
    Marks,
    Offsets,
    Options,
    Record,
    new_consumer,
    resolve_offsets,
    resolve_topics,
    watermarks,
)

try:  # Spark >= 4.2: admission control for latestOffset(start, limit)
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows
except ImportError:  # pragma: no cover
    ReadAllAvailable = ReadMaxRows = None  # type: ignore[misc, assignment]  # Spark < 4.2: no limits to offer


class KafkaPartition(InputPartition):
    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        self.topic, self.partition, self.start, self.end = topic, partition, start, end

    def __repr__(self) -> str:
        return f"KafkaPartition({self.topic}-{self.partition} [{self.start}, {self.end}))"


def _plan(start: Mapping[str, Mapping[str, int]], end: Mapping[str, Mapping[str, int]]) -> list[KafkaPartition]:
    parts = []
    for t in sorted(end):
        for p in sorted(end[t], key=int):
            lo = int(start.get(t, {}).get(p, 0))
            hi = int(end[t][p])
            if hi > lo:
                parts.append(KafkaPartition(t, int(p), lo, hi))
    return parts


def _read(options: Options, part: KafkaPartition) -> Iterator[Record]:
    """Rows of [start, end) of one partition (transaction markers and aborted records are skipped)."""
    import time

    from confluent_kafka import KafkaError, TopicPartition

    if part.end <= part.start:
        return
    consumer = new_consumer(options)
    tp = TopicPartition(part.topic, part.partition, part.start)
    try:
        consumer.assign([tp])
        deadline = time.monotonic() + float(options.get("kbroker.read.timeout.ms", 120_000)) / 1000
        while True:
            msgs = consumer.consume(num_messages=2000, timeout=0.5)
            done = False
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise RuntimeError(f"reading {part}: {err}")
                off = m.offset()
                assert off is not None  # a record read has its offset
                if off >= part.end:
                    done = True
                    break
                ts_type, ts = m.timestamp()
                headers = m.headers()
                yield (m.key(), m.value(), part.topic, part.partition, off,
                       datetime.fromtimestamp(ts / 1000, tz=UTC) if ts >= 0 else None,
                       list(headers.items() if isinstance(headers, dict) else headers) if headers else [])
                if off + 1 >= part.end:
                    done = True
                    break
            if done:
                return
            pos: int = consumer.position([TopicPartition(part.topic, part.partition)])[0].offset
            if pos >= part.end:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {part}: stuck at offset {pos}")
    finally:
        consumer.close()


class BatchReader(DataSourceReader):
    def __init__(self, options: Options) -> None:
        self.options = options

    def partitions(self) -> list[KafkaPartition]:
        c = new_consumer(self.options)
        try:
            marks = watermarks(self.options, c, resolve_topics(self.options, c))
        finally:
            c.close()
        start = resolve_offsets(self.options.get("startingoffsets"), "earliest", marks)
        end = resolve_offsets(self.options.get("endingoffsets"), "latest", marks)
        return _plan(start, end)

    def read(self, partition: InputPartition) -> Iterator[Record]:
        assert isinstance(partition, KafkaPartition)  # what partitions() planned
        return _read(self.options, partition)


class StreamReader(DataSourceStreamReader):
    def __init__(self, options: Options) -> None:
        self.options = options
        self.max_per_trigger = int(options["maxoffsetspertrigger"]) if options.get("maxoffsetspertrigger") else None

    def _marks(self) -> Marks:
        c = new_consumer(self.options)
        try:
            return watermarks(self.options, c, resolve_topics(self.options, c))
        finally:
            c.close()

    def initialOffset(self) -> Offsets:
        return resolve_offsets(self.options.get("startingoffsets"), "latest", self._marks())

    def getDefaultReadLimit(self) -> ReadLimit:
        if ReadMaxRows is None or ReadAllAvailable is None:  # Spark < 4.2 has no admission control to ask this
            raise NotImplementedError("read limits need Spark 4.2")
        return ReadMaxRows(self.max_per_trigger) if self.max_per_trigger else ReadAllAvailable()

    def latestOffset(self, start: Offsets | None = None, limit: ReadLimit | None = None) -> Offsets:
        marks = self._marks()
        latest = {t: {p: hi for p, (lo, hi) in parts.items()} for t, parts in marks.items()}
        cap = None
        if ReadMaxRows is not None and isinstance(limit, ReadMaxRows):
            # maxRows: the name of a pyspark whose ReadMaxRows has no max_rows (this one's types know only max_rows)
            cap = limit.max_rows if hasattr(limit, "max_rows") else limit.maxRows  # type: ignore[attr-defined]
        elif limit is None and self.max_per_trigger:
            cap = self.max_per_trigger
        if cap is None or start is None:
            return latest
        # as Spark's Kafka source: share the cap between partitions in proportion to their backlog
        lows = {t: {p: int(start.get(t, {}).get(p, marks[t][p][0])) for p in parts} for t, parts in latest.items()}
        lag = {(t, p): max(0, latest[t][p] - lows[t][p]) for t in latest for p in latest[t]}
        total = sum(lag.values())
        if total <= cap:
            return latest
        out = {t: dict(parts) for t, parts in lows.items()}
        given = 0
        for (t, p), n in sorted(lag.items()):
            take = min(n, cap * n // total)
            out[t][p] += take
            given += take
        for t, p in sorted(lag):  # hand out the rounding remainder
            if given >= cap:
                break
            extra = min(cap - given, latest[t][p] - out[t][p])
            out[t][p] += extra
            given += extra
        return out

    def partitions(self, start: Offsets, end: Offsets) -> list[KafkaPartition]:
        return _plan(start, end)

    def read(self, partition: InputPartition) -> Iterator[Record]:
        assert isinstance(partition, KafkaPartition)  # what partitions() planned
        return _read(self.options, partition)

    def commit(self, end: Offsets) -> None:
        pass
