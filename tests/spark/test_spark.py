"""kbroker_spark against a real broker: batch read, keyed writes placed like librdkafka, exactly-once streaming."""
from __future__ import annotations

import json
import threading
import time
from collections import Counter

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from tests.integration.helpers import create_topic

DEADLINE = 60.0


def read_all(bootstrap: str, topic: str, partitions: int) -> list:
    """Every committed record of a topic: (partition, offset, key, value)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "enable.auto.commit": False,
                  "enable.partition.eof": True, "isolation.level": "read_committed"})
    try:
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
                for p in range(partitions)}
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out, deadline = [], time.monotonic() + DEADLINE
        while time.monotonic() < deadline:
            for m in c.consume(500, timeout=0.2):
                if m.error() is None:
                    out.append((m.partition(), m.offset(), m.key(), m.value()))
                elif m.error().code() != KafkaError._PARTITION_EOF:
                    raise AssertionError(m.error())
            pos = c.position([TopicPartition(topic, p) for p in range(partitions)])
            if all(tp.offset >= ends[tp.partition] for tp in pos if ends[tp.partition] > 0):  # empty: no position
                return out
        raise AssertionError("could not read the topic to its end")
    finally:
        c.close()


def test_batch_read_every_record_with_partition_and_offset(spark, module_broker):
    bootstrap = module_broker.bootstrap
    create_topic(bootstrap, "sp-read", partitions=4)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    acked = {}

    def on_delivery(err, msg):
        assert err is None, err
        acked[(msg.partition(), msg.offset())] = (msg.key(), msg.value())

    for i in range(400):
        p.produce("sp-read", key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % 4,
                  headers=[("h", f"{i}".encode())], on_delivery=on_delivery)
    assert p.flush(30) == 0
    df = (spark.read.format("kbroker").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", "sp-read").load())
    assert df.rdd.getNumPartitions() == 4
    rows = df.collect()
    got = {(r.partition, r.offset): (bytes(r.key), bytes(r.value)) for r in rows}
    assert len(rows) == 400
    assert got == acked
    r = next(r for r in rows if r.key == b"k7")
    assert r.topic == "sp-read" and r.timestamp is not None
    assert [(h.key, bytes(h.value)) for h in r.headers] == [("h", b"7")]
    # an offset range per partition
    part = (spark.read.format("kbroker").option("kafka.bootstrap.servers", bootstrap).option("subscribe", "sp-read")
            .option("startingOffsets", '{"sp-read": {"0": 10, "1": -2}}')
            .option("endingOffsets", '{"sp-read": {"0": 20, "1": 5, "2": 0, "3": -1}}').load().collect())
    assert Counter(r.partition for r in part) == {0: 10, 1: 5, 3: 100}
    assert sorted(r.offset for r in part if r.partition == 0) == list(range(10, 20))


def test_keyed_write_lands_where_librdkafka_puts_keys(spark, module_broker):
    bootstrap = module_broker.bootstrap
    create_topic(bootstrap, "sp-keys-rd", partitions=6)
    create_topic(bootstrap, "sp-keys-spark", partitions=6)
    keys = [f"key-{i}".encode() for i in range(300)] + [b"", b"a", b"ab", b"abc"]
    p = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random", "linger.ms": 5})
    for k in keys:
        p.produce("sp-keys-rd", key=k, value=b"x")
    assert p.flush(30) == 0
    df = spark.createDataFrame([(k, b"x") for k in keys], "key binary, value binary").repartition(3)
    (df.write.format("kbroker").option("kafka.bootstrap.servers", bootstrap).option("topic", "sp-keys-spark")
     .mode("append").save())
    librdkafka = {k: part for part, _, k, _ in read_all(bootstrap, "sp-keys-rd", 6)}
    spark_side = {k: part for part, _, k, _ in read_all(bootstrap, "sp-keys-spark", 6)}
    assert len(spark_side) == len(keys)
    assert spark_side == librdkafka
    assert len(set(spark_side.values())) == 6


def _wait(cond, timeout=DEADLINE, what=""):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}")


def test_streaming_exactly_once_across_restart(spark, module_broker, tmp_path):
    bootstrap = module_broker.bootstrap
    create_topic(bootstrap, "sp-in", partitions=4)
    create_topic(bootstrap, "sp-out", partitions=4)
    checkpoint = tmp_path / "checkpoint"
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2})
    sent = []

    def send(lo, hi, pause=0.0):
        for i in range(lo, hi):
            v = f"r{i}".encode()
            producer.produce("sp-in", key=f"k{i % 37}".encode(), value=v)
            sent.append(v)
            if pause:
                producer.poll(0)
                time.sleep(pause)
        assert producer.flush(30) == 0

    def start():
        src = (spark.readStream.format("kbroker").option("kafka.bootstrap.servers", bootstrap)
               .option("subscribe", "sp-in").option("startingOffsets", "earliest")
               .option("maxOffsetsPerTrigger", "60").load())
        return (src.selectExpr("key", "value").writeStream.format("kbroker")
                .option("kafka.bootstrap.servers", bootstrap).option("topic", "sp-out")
                .option("checkpointLocation", str(checkpoint)).trigger(processingTime="300 milliseconds").start())

    def out_values():
        return [v for _, _, _, v in read_all(bootstrap, "sp-out", 4)]

    send(0, 100)
    q = start()
    try:
        # records keep arriving while the query runs
        feeder = threading.Thread(target=send, args=(100, 250, 0.01))
        feeder.start()
        _wait(lambda: len(out_values()) >= 100, what="the first records in sp-out")
        feeder.join()
        assert q.isActive
        _wait(lambda: len(out_values()) >= 250, what="all 250 records in sp-out")
        assert q.isActive and q.exception() is None
        assert q.lastProgress is not None
    finally:
        q.stop()
    # The last batch was written but Spark forgets it committed it: the restart replays it.
    commits = sorted((checkpoint / "commits").glob("[0-9]*"), key=lambda f: int(f.name))
    assert commits
    last_batch = int(commits[-1].name)
    commits[-1].unlink()
    crc = commits[-1].with_name(f".{commits[-1].name}.crc")
    if crc.exists():
        crc.unlink()
    send(250, 400)
    q = start()
    try:
        _wait(lambda: len(out_values()) >= 400, what="all 400 records in sp-out after the restart")
        _wait(lambda: q.lastProgress is not None and int(q.lastProgress["batchId"]) > last_batch,
              what="a batch after the replayed one")
        time.sleep(1.5)
        assert q.exception() is None
    finally:
        q.stop()
    # the replayed batch had written rows before the restart: without the markers they would be in sp-out twice
    # one read: keys and values of the same records (two reads of a 4-partition topic may interleave its
    # partitions differently, and zipping them paired one marker's key with another's batch)
    markers = [(k, json.loads(v)) for _, _, k, v in read_all(bootstrap, "sp-out.kbroker-spark-commits", 4)]
    assert any(m["batch"] == last_batch and m["rows"] > 0 for _, m in markers), markers
    twice = [km for km, n in Counter((k, m["batch"]) for k, m in markers).items() if n > 1]
    assert twice == [], f"a batch was written twice: {twice}"
    counts = Counter(out_values())
    assert set(counts) == set(sent)
    assert [v for v, n in counts.items() if n != 1] == []
