"""Old message formats end to end with librdkafka's legacy modes (``api.version.request=false``
and a ``broker.version.fallback``): every codec librdkafka offers there (none, gzip, snappy, lz4;
zstd needs the v2 format) under both timestamp types, a legacy producer (magic 1 from 0.10.1.0,
magic 0 from 0.9.0) read by a modern consumer, and a modern producer read by legacy consumers
(0.10.0.0 and 0.10.1.0 fetch magic 1, 0.9.0 magic 0), checking values, keys, offsets and
timestamps (type and value) as Kafka 2.8 converts them. The issue's case, a legacy gzip producer
read by group consumers (modern and legacy), runs with groups; the rest assign.
"""
from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    Producer,
    TopicPartition,
)

from .clients import DEADLINE
from .helpers import create_topic

CODECS = ["none", "gzip", "snappy", "lz4"]
TIMESTAMP_TYPES = ["CreateTime", "LogAppendTime"]
COUNT = 20
BASE_TS = 1_790_000_000_000  # within the default message.timestamp.difference.max.ms (unbounded)


def legacy(version: str) -> dict:
    return {"api.version.request": False, "broker.version.fallback": version}


def messages() -> list[tuple[bytes | None, bytes, int]]:
    """(key, value, CreateTime) with null keys, values of varied sizes and timestamps out of order."""
    return [(None if i % 5 == 0 else b"key-%d" % i, (b"value %d; " % i) * (1 + i * 7 % 40),
             BASE_TS + (i * 37 % 11) * 1000) for i in range(COUNT)]


def produce(bootstrap: str, topic: str, codec: str, config: dict) -> tuple[int, int]:
    """The messages, in order, to partition 0; returns the wall-clock window of the appends."""
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 50, **config})
    acks: list = []
    start = int(time.time() * 1000)
    for key, value, ts in messages():
        producer.produce(topic, key=key, value=value, partition=0, timestamp=ts,
                         on_delivery=lambda err, msg: acks.append((err, msg.offset())))
    assert producer.flush(DEADLINE) == 0
    end = int(time.time() * 1000)
    assert [err for err, _ in acks] == [None] * COUNT, acks
    assert sorted(offset for _, offset in acks) == list(range(COUNT))
    return start, end


def consume(bootstrap: str, topic: str, config: dict, group: bool = False) -> list:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"legacy-{uuid.uuid4().hex[:8]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False, **config})
    try:
        if group:
            consumer.subscribe([topic])
        else:
            consumer.assign([TopicPartition(topic, 0, 0)])
        got: list = []
        deadline = time.monotonic() + DEADLINE
        while len(got) < COUNT and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append((msg.offset(), msg.key(), msg.value(), msg.timestamp()))
        return got
    finally:
        consumer.close()


def check(got: list, ts_type: str, window: tuple[int, int], produced: int = 2, read: int = 2) -> None:
    """What a consumer must see of ``messages()`` produced in message format ``produced`` and
    fetched in format ``read``: magic 0 fetches carry no timestamp; under LogAppendTime every
    message has the broker's time of its append; under CreateTime the producer's, or -1 (still
    CreateTime) for messages produced as magic 0, which Kafka's up-conversion gives NO_TIMESTAMP."""
    assert [offset for offset, *_ in got] == list(range(COUNT)), "every message, in order, once"
    assert [(key, value) for _, key, value, _ in got] == [(k, v) for k, v, _ in messages()]
    for (_, _, _, (kind, ts)), (_, _, sent) in zip(got, messages()):
        if read == 0:
            assert kind == TIMESTAMP_NOT_AVAILABLE, (kind, ts)
        elif ts_type == "LogAppendTime":
            assert kind == TIMESTAMP_LOG_APPEND_TIME and window[0] - 1000 <= ts <= window[1] + 1000, (kind, ts)
        else:
            assert (kind, ts) == (TIMESTAMP_CREATE_TIME, sent if produced >= 1 else -1)


@pytest.fixture(scope="module")
def topics(module_broker):
    made: dict[tuple[str, str, str], str] = {}

    def topic(direction: str, codec: str, ts_type: str) -> str:
        key = (direction, codec, ts_type)
        if key not in made:
            made[key] = f"legacy-{direction}-{codec}-{ts_type}".lower()
            create_topic(module_broker.bootstrap, made[key], 1, {"message.timestamp.type": ts_type})
        return made[key]

    return topic


def test_issue_case_legacy_gzip_producer_read_by_group_consumers(module_broker, topics):
    topic = topics("issue", "gzip", "CreateTime")
    window = produce(module_broker.bootstrap, topic, "gzip", legacy("0.10.1.0"))
    check(consume(module_broker.bootstrap, topic, {}, group=True), "CreateTime", window, produced=1)
    check(consume(module_broker.bootstrap, topic, legacy("0.10.1.0"), group=True), "CreateTime", window,
          produced=1, read=1)


@pytest.mark.parametrize("ts_type", TIMESTAMP_TYPES)
@pytest.mark.parametrize("codec", CODECS)
def test_legacy_producer_modern_consumer(module_broker, topics, codec, ts_type):
    for fallback, magic in (("0.10.1.0", 1), ("0.9.0", 0)):
        topic = topics(f"old-in-{magic}", codec, ts_type)
        window = produce(module_broker.bootstrap, topic, codec, legacy(fallback))
        check(consume(module_broker.bootstrap, topic, {}), ts_type, window, produced=magic)


@pytest.mark.parametrize("ts_type", TIMESTAMP_TYPES)
@pytest.mark.parametrize("codec", CODECS)
def test_modern_producer_legacy_consumers(module_broker, topics, codec, ts_type):
    topic = topics("new-in", codec, ts_type)
    window = produce(module_broker.bootstrap, topic, codec, {})
    for fallback, magic in (("0.10.0.0", 1), ("0.10.1.0", 1), ("0.9.0", 0)):
        check(consume(module_broker.bootstrap, topic, legacy(fallback)), ts_type, window, read=magic)


def test_zstd_needs_the_v2_format(module_broker, topics):
    """librdkafka refuses zstd in a legacy mode itself; a modern zstd producer is read by a legacy
    consumer through down-conversion."""
    topic = topics("new-in", "zstd", "CreateTime")
    window = produce(module_broker.bootstrap, topic, "zstd", {})
    check(consume(module_broker.bootstrap, topic, legacy("0.10.1.0")), "CreateTime", window, read=1)
