"""A PySpark data source for kbroker (and any Kafka broker), on Spark 4's Python Data Source API.

    import kbroker_spark
    kbroker_spark.register(spark)
    df = (spark.read.format("kbroker").option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "t").load())
    df.selectExpr("key", "value").write.format("kbroker")
        .option("kafka.bootstrap.servers", "127.0.0.1:9092").option("topic", "out").save()

Options follow Spark's Kafka source: ``kafka.bootstrap.servers``, ``subscribe`` (comma-separated topics) or
``subscribePattern`` (a regex), ``startingOffsets`` / ``endingOffsets`` ("earliest", "latest" or JSON such as
``{"t": {"0": 23, "1": -2}}`` with -2 = earliest, -1 = latest), ``maxOffsetsPerTrigger``. Any other
``kafka.*`` option is passed to librdkafka. Rows: key, value (binary), topic, partition, offset, timestamp,
headers (array of struct<key string, value binary>).

Reading: one Spark input partition per topic partition and offset range; an executor assigns the partition,
seeks to the start and reads (read_committed) until its position reaches the end offset.

Writing: rows carry ``value`` and optionally ``key``, ``topic`` (else the ``topic`` option), ``partition``
and ``headers``. Without a partition, a keyed row goes to ``toPositive(murmur2(key)) % partitions``, Kafka's
Java default partitioner and librdkafka's ``murmur2_random``, so Spark, Java and librdkafka producers put a
key in the same partition; a row without a key goes to a random partition.

Streaming writes are exactly once. Each Spark task of micro-batch B writes its rows in one Kafka transaction
whose transactional.id is ``kbroker-spark-<sink id>-<task partition>``; the same transaction writes a marker
``<sink id>/<task partition> -> B`` to a compacted commit topic (``<topic>.kbroker-spark-commits`` unless
``kbroker.sink.commitTopic`` says otherwise). Before writing, the task calls init_transactions (which fences
any earlier attempt of the same task and completes or aborts its transaction) and then reads the last marker
of its key with read_committed: if it is already >= B, the batch was written by an earlier attempt (a task
retry, or a replay after a restart of a batch that was written but not recorded in Spark's commit log) and
the task writes nothing. Replays see the same rows per task because Spark replays a batch with the offsets
recorded in its offset log and this source plans the same input partitions for the same offsets. The sink
id is the ``kbroker.sink.id`` option, else the streaming query id (kept in the checkpoint).
"""
from __future__ import annotations

import json
import random
import re
import uuid
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import Row, StructType

if TYPE_CHECKING:  # imported where used at run time: the driver needs confluent_kafka only to plan
    from confluent_kafka import Consumer, KafkaError, Producer
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.datasource import ReadLimit

try:  # Spark >= 4.2: admission control for latestOffset(start, limit)
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows
except ImportError:  # pragma: no cover
    ReadAllAvailable = ReadMaxRows = None  # type: ignore[misc, assignment]  # Spark < 4.2: no limits to offer

SCHEMA = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
          "headers array<struct<key: string, value: binary>>")
EARLIEST, LATEST = -2, -1
DEFAULT_TIMEOUT = 60.0

Options = dict[str, str]                          # lower-cased option name -> value
Marks = dict[str, dict[str, tuple[int, int]]]     # topic -> partition (a string, as in JSON) -> (low, high)
Offsets = dict[str, dict[str, int]]               # topic -> partition -> offset: Spark's offsets for a stream
Record = tuple[Any, ...]                          # one row of SCHEMA
ClientConfig = dict[str, str | int | float | bool]  # librdkafka's configuration


# ---------------------------------------------------------------------------------------------- partitioner

def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (org.apache.kafka.common.utils.Utils.murmur2) as an unsigned 32-bit value."""
    m = 0x5BD1E995
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    end4 = length & ~3
    for i in range(0, end4, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    extra = length & 3
    if extra == 3:
        h ^= data[end4 + 2] << 16
    if extra >= 2:
        h ^= data[end4 + 1] << 8
    if extra >= 1:
        h ^= data[end4]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h


def partition_for(key: bytes | None, partitions: int) -> int:
    """librdkafka's murmur2_random (= Java's default partitioner for keyed records)."""
    if key is None:
        return random.randrange(partitions)
    return (murmur2(key) & 0x7FFFFFFF) % partitions


# ---------------------------------------------------------------------------------------------- options

def _client_config(options: Options) -> ClientConfig:
    servers = options.get("kafka.bootstrap.servers")
    if not servers:
        raise ValueError("the kbroker data source needs the kafka.bootstrap.servers option")
    conf: ClientConfig = {"bootstrap.servers": servers}
    for k, v in options.items():
        if k.startswith("kafka.") and k != "kafka.bootstrap.servers":
            conf[k[len("kafka."):]] = v
    return conf


def _timeout(options: Options) -> float:
    return float(options.get("kbroker.timeout.ms", DEFAULT_TIMEOUT * 1000)) / 1000


def _consumer(options: Options, **extra: Any) -> Consumer:
    from confluent_kafka import Consumer

    conf = {"group.id": "kbroker-spark", "enable.auto.commit": False, "enable.partition.eof": True,
            "isolation.level": "read_committed", **_client_config(options), **extra}
    return Consumer(conf)


def _topics(options: Options, consumer: Consumer) -> dict[str, int]:
    """topic -> partition count for subscribe / subscribePattern."""
    md = consumer.list_topics(timeout=_timeout(options))
    if options.get("subscribe"):
        names = [t.strip() for t in options["subscribe"].split(",") if t.strip()]
        missing = [t for t in names if t not in md.topics or md.topics[t].error is not None]
        if missing:
            raise ValueError(f"unknown topics: {missing}")
    elif options.get("subscribepattern"):
        rx = re.compile(options["subscribepattern"])
        names = sorted(t for t in md.topics if rx.fullmatch(t) and not t.startswith("__"))
    else:
        raise ValueError("the kbroker source needs subscribe or subscribePattern")
    return {t: len(md.topics[t].partitions) for t in names}


def _watermarks(options: Options, consumer: Consumer, topics: dict[str, int]) -> Marks:
    from confluent_kafka import TopicPartition

    out: Marks = {}
    for t, n in topics.items():
        out[t] = {}
        for p in range(n):
            lo, hi = consumer.get_watermark_offsets(TopicPartition(t, p), timeout=_timeout(options), cached=False)
            out[t][str(p)] = (lo, hi)
    return out


def _resolve(spec: str | None, default: str, marks: Marks) -> Offsets:
    """startingOffsets / endingOffsets -> {topic: {"p": offset}}."""
    spec = (spec or default).strip()
    if spec.startswith("{"):
        explicit, fallback = json.loads(spec), default
    else:
        explicit, fallback = {}, spec
    if fallback not in ("earliest", "latest"):
        raise ValueError(f"offsets must be earliest, latest or JSON, not {spec!r}")
    out: Offsets = {}
    for t, parts in marks.items():
        out[t] = {}
        for p, (lo, hi) in parts.items():
            v = int(explicit.get(t, {}).get(p, EARLIEST if fallback == "earliest" else LATEST))
            out[t][p] = lo if v == EARLIEST else hi if v == LATEST else v
    return out


# ---------------------------------------------------------------------------------------------- reading

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
    consumer = _consumer(options)
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


class _BatchReader(DataSourceReader):
    def __init__(self, options: Options) -> None:
        self.options = options

    def partitions(self) -> list[KafkaPartition]:
        c = _consumer(self.options)
        try:
            marks = _watermarks(self.options, c, _topics(self.options, c))
        finally:
            c.close()
        start = _resolve(self.options.get("startingoffsets"), "earliest", marks)
        end = _resolve(self.options.get("endingoffsets"), "latest", marks)
        return _plan(start, end)

    def read(self, partition: InputPartition) -> Iterator[Record]:
        assert isinstance(partition, KafkaPartition)  # what partitions() planned
        return _read(self.options, partition)


class _StreamReader(DataSourceStreamReader):
    def __init__(self, options: Options) -> None:
        self.options = options
        self.max_per_trigger = int(options["maxoffsetspertrigger"]) if options.get("maxoffsetspertrigger") else None

    def _marks(self) -> Marks:
        c = _consumer(self.options)
        try:
            return _watermarks(self.options, c, _topics(self.options, c))
        finally:
            c.close()

    def initialOffset(self) -> Offsets:
        return _resolve(self.options.get("startingoffsets"), "latest", self._marks())

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


# ---------------------------------------------------------------------------------------------- writing

class KafkaCommitMessage(WriterCommitMessage):
    def __init__(self, partition: int, count: int, skipped: bool = False) -> None:
        self.partition, self.count, self.skipped = partition, count, skipped


def _as_bytes(v: str | bytes | bytearray | None) -> bytes | None:
    if v is None:
        return None
    if isinstance(v, str):
        return v.encode()
    return bytes(v)


class _RowProducer:
    """Turns rows into produce calls with murmur2 placement; counts deliveries and keeps the first error."""

    def __init__(self, options: Options, producer: Producer) -> None:
        self.options = options
        self.producer = producer
        self.default_topic = options.get("topic")
        self.counts: dict[str, int] = {}
        self.error: KafkaError | None = None
        self.sent = 0

    def _partitions(self, topic: str) -> int:
        n = self.counts.get(topic)
        if n is None:
            md = self.producer.list_topics(topic, timeout=_timeout(self.options))
            t = md.topics.get(topic)
            if t is None or t.error is not None or not t.partitions:
                raise ValueError(f"cannot write to topic {topic!r}: {t.error if t else 'unknown'}")
            n = self.counts[topic] = len(t.partitions)
        assert n is not None
        return n

    def _on_delivery(self, err: KafkaError | None, msg: object) -> None:
        if err is not None and self.error is None:
            self.error = err

    def send(self, row: Row | Mapping[str, Any]) -> None:
        d = row.asDict() if hasattr(row, "asDict") else dict(row)
        topic = d.get("topic") or self.default_topic
        if not topic:
            raise ValueError("a row has no topic and the topic option is not set")
        key = _as_bytes(d.get("key"))
        part = d.get("partition")
        if part is None or part < 0:
            part = partition_for(key, self._partitions(topic))
        headers = [(h["key"], _as_bytes(h["value"])) for h in d.get("headers") or []] or None
        kwargs: dict[str, Any] = {"key": key, "value": _as_bytes(d.get("value")), "partition": int(part),
                                  "on_delivery": self._on_delivery}
        if headers:
            kwargs["headers"] = headers
        while True:
            try:
                self.producer.produce(topic, **kwargs)
                break
            except BufferError:
                self.producer.poll(0.05)
        self.sent += 1
        if self.sent % 1000 == 0:
            self.producer.poll(0)

    def check(self) -> None:
        if self.error is not None:
            raise RuntimeError(f"kbroker write failed: {self.error}")


def _task_partition() -> int:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return ctx.partitionId() if ctx is not None else 0


class _BatchWriter(DataSourceWriter):
    def __init__(self, options: Options) -> None:
        self.options = options

    def write(self, iterator: Iterator[Row]) -> KafkaCommitMessage:
        from confluent_kafka import Producer

        producer = Producer({"enable.idempotence": True, "linger.ms": 5, **_client_config(self.options)})
        rp = _RowProducer(self.options, producer)
        for row in iterator:
            rp.send(row)
        left = producer.flush(_timeout(self.options))
        rp.check()
        if left:
            raise RuntimeError(f"kbroker write: {left} records not delivered")
        return KafkaCommitMessage(_task_partition(), rp.sent)


def _last_committed_batch(options: Options, commit_topic: str, marker_partition: int, marker_key: bytes) -> int | None:
    """The highest batch id committed under marker_key: read_committed up to the partition's high watermark as
    it is now. Reading only to the last stable offset is not enough: a transaction left open by a task of a
    stopped query (its owner's init_transactions aborts it when the owner runs again, in this same batch)
    holds the LSO below markers committed after it, and a task that missed its own marker there would write
    its batch twice. So this waits until every transaction begun before now is settled."""
    import time

    from confluent_kafka import KafkaError, TopicPartition

    tp = TopicPartition(commit_topic, marker_partition)
    u = _consumer(options, **{"group.id": f"kbroker-spark-marker-{uuid.uuid4().hex}",
                              "isolation.level": "read_uncommitted"})
    try:
        _, hi = u.get_watermark_offsets(tp, timeout=_timeout(options), cached=False)  # the high watermark
    finally:
        u.close()
    c = _consumer(options, **{"group.id": f"kbroker-spark-marker-{uuid.uuid4().hex}"})
    try:
        lo, _ = c.get_watermark_offsets(tp, timeout=_timeout(options), cached=False)
        last = None
        if hi <= lo:
            return None
        c.assign([TopicPartition(commit_topic, marker_partition, lo)])
        deadline = time.monotonic() + _timeout(options)
        while True:
            for m in c.consume(num_messages=1000, timeout=0.2):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise RuntimeError(f"reading commit markers: {err}")
                value = m.value()
                if m.key() == marker_key and value:
                    last = max(last if last is not None else -1, int(json.loads(value)["batch"]))
            if c.position([tp])[0].offset >= hi:
                return last
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading commit markers of {commit_topic}-{marker_partition}")
    finally:
        c.close()


def _ensure_topic(options: Options, name: str, partitions: int) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    admin = AdminClient(_client_config(options))
    md = admin.list_topics(timeout=_timeout(options))
    if name in md.topics and md.topics[name].error is None:
        return
    fut = admin.create_topics([NewTopic(name, partitions, 1, config={"cleanup.policy": "compact"})])[name]
    try:
        fut.result(_timeout(options))
    except KafkaException as e:
        if "TOPIC_ALREADY_EXISTS" not in str(e) and "already exists" not in str(e):
            raise


class _StreamWriter(DataSourceStreamWriter):
    def __init__(self, options: Options) -> None:
        self.options = options
        topic = options.get("topic") or "kbroker"
        self.commit_topic = options.get("kbroker.sink.committopic", f"{topic}.kbroker-spark-commits")
        self.commit_partitions = int(options.get("kbroker.sink.committopicpartitions", 4))
        _ensure_topic(options, self.commit_topic, self.commit_partitions)

    def write(self, iterator: Iterator[Row]) -> KafkaCommitMessage:
        from confluent_kafka import Producer
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx is None:
            raise RuntimeError("kbroker stream writer: not in a Spark task")
        part = ctx.partitionId()
        batch_id = ctx.getLocalProperty("streaming.sql.batchId")
        sink = self.options.get("kbroker.sink.id") or ctx.getLocalProperty("sql.streaming.queryId")
        if batch_id is None or sink is None:
            raise RuntimeError("kbroker stream writer: no micro-batch id / query id in the task context")
        batch = int(batch_id)
        marker_key = f"{sink}/{part}".encode()
        marker_partition = (murmur2(marker_key) & 0x7FFFFFFF) % self.commit_partitions
        timeout = _timeout(self.options)
        producer = Producer({"transactional.id": f"kbroker-spark-{sink}-{part}", "enable.idempotence": True,
                             "linger.ms": 5, **_client_config(self.options)})
        producer.init_transactions(timeout)  # fences earlier attempts of this task, settles their transaction
        last = _last_committed_batch(self.options, self.commit_topic, marker_partition, marker_key)
        if last is not None and last >= batch:
            return KafkaCommitMessage(part, 0, skipped=True)
        producer.begin_transaction()
        rp = _RowProducer(self.options, producer)
        try:
            for row in iterator:
                rp.send(row)
            producer.produce(self.commit_topic, key=marker_key, partition=marker_partition,
                             value=json.dumps({"batch": batch, "rows": rp.sent}).encode(),
                             on_delivery=rp._on_delivery)
            producer.flush(timeout)
            rp.check()
            producer.commit_transaction(timeout)
        except BaseException:
            try:
                producer.abort_transaction(timeout)
            except Exception:
                pass
            raise
        return KafkaCommitMessage(part, rp.sent)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass  # the tasks committed their transactions; their markers make a replay of batchId a no-op

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass  # transactions that committed stay; a replay of batchId skips their task partitions


# ---------------------------------------------------------------------------------------------- source

class KBrokerDataSource(DataSource):
    """``format("kbroker")``: batch and streaming reads and writes of Kafka topics."""

    @classmethod
    def name(cls) -> str:
        return "kbroker"

    def schema(self) -> str:
        return SCHEMA

    def _options(self) -> Options:
        # Spark hands options over case-insensitively: keep them lower-cased
        return {str(k).lower(): v for k, v in self.options.items()}

    def reader(self, schema: StructType) -> _BatchReader:
        return _BatchReader(self._options())

    def streamReader(self, schema: StructType) -> _StreamReader:
        return _StreamReader(self._options())

    def writer(self, schema: StructType, overwrite: bool) -> _BatchWriter:
        return _BatchWriter(self._options())

    def streamWriter(self, schema: StructType, overwrite: bool) -> _StreamWriter:
        return _StreamWriter(self._options())


def register(spark: SparkSession) -> None:
    """Make ``format("kbroker")`` available in a SparkSession."""
    spark.dataSource.register(KBrokerDataSource)
