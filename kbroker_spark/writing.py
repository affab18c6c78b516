"""Batch and streaming writes; streaming writes exactly once, through one Kafka transaction per task and
micro-batch with a marker in a compacted commit topic (see the package docstring).
"""
from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSourceStreamWriter,
    DataSourceWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import Row

if TYPE_CHECKING:  # imported where used at run time: the driver needs confluent_kafka only to plan
    from confluent_kafka import KafkaError, Producer
from kbroker_spark.options import (
    Options,
    client_config,
    new_consumer,
    option_timeout,
)
from kbroker_spark.partitioner import murmur2, partition_for


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
            md = self.producer.list_topics(topic, timeout=option_timeout(self.options))
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


class BatchWriter(DataSourceWriter):
    def __init__(self, options: Options) -> None:
        self.options = options

    def write(self, iterator: Iterator[Row]) -> KafkaCommitMessage:
        from confluent_kafka import Producer

        producer = Producer({"enable.idempotence": True, "linger.ms": 5, **client_config(self.options)})
        rp = _RowProducer(self.options, producer)
        for row in iterator:
            rp.send(row)
        left = producer.flush(option_timeout(self.options))
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
    u = new_consumer(options, **{"group.id": f"kbroker-spark-marker-{uuid.uuid4().hex}",
                              "isolation.level": "read_uncommitted"})
    try:
        _, hi = u.get_watermark_offsets(tp, timeout=option_timeout(options), cached=False)  # the high watermark
    finally:
        u.close()
    c = new_consumer(options, **{"group.id": f"kbroker-spark-marker-{uuid.uuid4().hex}"})
    try:
        lo, _ = c.get_watermark_offsets(tp, timeout=option_timeout(options), cached=False)
        last = None
        if hi <= lo:
            return None
        c.assign([TopicPartition(commit_topic, marker_partition, lo)])
        deadline = time.monotonic() + option_timeout(options)
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

    admin = AdminClient(client_config(options))
    md = admin.list_topics(timeout=option_timeout(options))
    if name in md.topics and md.topics[name].error is None:
        return
    fut = admin.create_topics([NewTopic(name, partitions, 1, config={"cleanup.policy": "compact"})])[name]
    try:
        fut.result(option_timeout(options))
    except KafkaException as e:
        if "TOPIC_ALREADY_EXISTS" not in str(e) and "already exists" not in str(e):
            raise


class StreamWriter(DataSourceStreamWriter):
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
        timeout = option_timeout(self.options)
        producer = Producer({"transactional.id": f"kbroker-spark-{sink}-{part}", "enable.idempotence": True,
                             "linger.ms": 5, **client_config(self.options)})
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
