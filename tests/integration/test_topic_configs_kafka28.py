"""Every topic config of Kafka 2.8, listed by DescribeConfigs (confluent-kafka's AdminClient.describe_configs) and
doing what it does in Kafka (issue 30: message.downconversion.enable, preallocate and segment.jitter.ms were
missing, 23 keys of 26).

- preallocate: a new segment file is created at segment.bytes and cut to its data when rolled or closed; after a
  crash, recovery cuts the zero tail (apache/kafka clients/src/main/java/org/apache/kafka/common/record/
  FileRecords.java openChannel and trim).
- segment.jitter.ms: each segment rolls by time up to that much before segment.ms, a random amount drawn per
  segment (core/src/main/scala/kafka/log/LogConfig.scala randomSegmentJitter, LogSegment.shouldRoll).
- message.downconversion.enable=false: a consumer's Fetch v0-3 whose read needs down-conversion gets
  UNSUPPORTED_VERSION for that partition (high watermark -1, no records); v4+ and reads that need none are
  answered (core/src/main/scala/kafka/server/KafkaApis.scala handleFetchRequest).
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)

from kbroker.config.topic import LogConfig
from kbroker.log import legacy
from tests.raw_client import request

from .clients import DEADLINE, DRIVERS
from .helpers import create_topic

# apache/kafka 2.8 core/src/main/scala/kafka/log/LogConfig.scala configDef (TopicConfig's names): 26 keys
KAFKA_2_8_TOPIC_CONFIGS = {
    "cleanup.policy", "compression.type", "delete.retention.ms", "file.delete.delay.ms", "flush.messages",
    "flush.ms", "follower.replication.throttled.replicas", "index.interval.bytes",
    "leader.replication.throttled.replicas", "max.compaction.lag.ms", "max.message.bytes",
    "message.downconversion.enable", "message.format.version", "message.timestamp.difference.max.ms",
    "message.timestamp.type", "min.cleanable.dirty.ratio", "min.compaction.lag.ms", "min.insync.replicas",
    "preallocate", "retention.bytes", "retention.ms", "segment.bytes", "segment.index.bytes", "segment.jitter.ms",
    "segment.ms", "unclean.leader.election.enable",
}
UNSUPPORTED_VERSION = 35
SEGMENT = 1 << 20


def describe(bootstrap: str, topic: str) -> dict:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.TOPIC, topic)
    return admin.describe_configs([resource], request_timeout=DEADLINE)[resource].result(DEADLINE)


def produce(bootstrap: str, topic: str, partition: int, values: list[bytes], timestamps: list[int] | None = None,
            one_batch_each: bool = False) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0 if one_batch_each else 20,
                         "enable.idempotence": False})
    failed: list = []
    for i, value in enumerate(values):
        producer.produce(topic, value=value, partition=partition, timestamp=timestamps[i] if timestamps else 0,
                         on_delivery=lambda err, msg: err is not None and failed.append(err))
        if one_batch_each:
            assert producer.flush(DEADLINE) == 0
    assert producer.flush(DEADLINE) == 0
    assert not failed, failed


def segment_files(broker, topic: str, partition: int = 0) -> list[Path]:
    return sorted((broker.dirs / f"{topic}-{partition}").glob("*.log"))


def data_size(path: Path) -> int:
    """The bytes of whole batches at the start of a segment file (a zero tail is no batch)."""
    from kbroker._core import records

    found, valid, _ = records.scan_batches(memoryview(path.read_bytes()), verify_crc=True)
    return valid


def test_every_kafka_2_8_topic_config_is_listed(broker):
    topic = "configs-listed"
    create_topic(broker.bootstrap, topic, configs={"preallocate": "true", "segment.jitter.ms": "60000",
                                                    "message.downconversion.enable": "false"})
    create_topic(broker.bootstrap, "configs-defaults")
    defaults = describe(broker.bootstrap, "configs-defaults")
    assert set(defaults) == KAFKA_2_8_TOPIC_CONFIGS
    assert {k: (defaults[k].value, defaults[k].source) for k in
            ("message.downconversion.enable", "preallocate", "segment.jitter.ms")} == {
        "message.downconversion.enable": ("true", ConfigSource.DEFAULT_CONFIG.value),
        "preallocate": ("false", ConfigSource.DEFAULT_CONFIG.value),
        "segment.jitter.ms": ("0", ConfigSource.DEFAULT_CONFIG.value)}
    # the broker keys they fall back to, as Kafka's synonyms (log.roll.jitter.ms is null, like log.roll.ms)
    assert [(s.name, s.value) for s in defaults["preallocate"].synonyms.values()] == [("log.preallocate", "false")]
    assert [(s.name, s.value) for s in defaults["message.downconversion.enable"].synonyms.values()] == [
        ("log.message.downconversion.enable", "true")]
    assert list(defaults["segment.jitter.ms"].synonyms.values()) == []

    overridden = describe(broker.bootstrap, topic)
    assert set(overridden) == KAFKA_2_8_TOPIC_CONFIGS
    assert {k: (overridden[k].value, overridden[k].source) for k in
            ("message.downconversion.enable", "preallocate", "segment.jitter.ms")} == {
        "message.downconversion.enable": ("false", ConfigSource.DYNAMIC_TOPIC_CONFIG.value),
        "preallocate": ("true", ConfigSource.DYNAMIC_TOPIC_CONFIG.value),
        "segment.jitter.ms": ("60000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)}

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    refused = admin.create_topics([NewTopic("configs-bad", 1, 1, config={"segment.jitter.ms": "-1"})],
                                  operation_timeout=DEADLINE)["configs-bad"]
    with pytest.raises(KafkaException) as exc:
        refused.result(DEADLINE)
    assert exc.value.args[0].name() == "INVALID_CONFIG"


def test_segment_jitter_draws_below_the_smaller_of_jitter_and_segment_ms():
    assert {LogConfig().random_segment_jitter() for _ in range(50)} == {0}
    drawn = [LogConfig(segment_ms=1000, segment_jitter_ms=10**12).random_segment_jitter() for _ in range(2000)]
    assert min(drawn) >= 0 and max(drawn) < 1000 and len(set(drawn)) > 500
    assert {LogConfig(segment_ms=10**12, segment_jitter_ms=7).random_segment_jitter() for _ in range(500)} == \
        set(range(7))


def test_preallocate_sizes_new_segments_and_cuts_them_to_their_data(broker):
    topic = "preallocated"
    create_topic(broker.bootstrap, topic, configs={"preallocate": "true", "segment.bytes": str(SEGMENT)})
    produce(broker.bootstrap, topic, 0, [b"v%03d" % i for i in range(10)])
    (active,) = segment_files(broker, topic)
    written = data_size(active)
    assert 0 < written < 2000 and active.stat().st_size == SEGMENT

    # a roll cuts the old segment to its data; the new one is preallocated
    produce(broker.bootstrap, topic, 0, [bytes(100_000) for _ in range(12)])
    files = segment_files(broker, topic)
    assert len(files) >= 2
    for rolled in files[:-1]:
        assert rolled.stat().st_size == data_size(rolled) < SEGMENT
    assert files[-1].stat().st_size == SEGMENT

    # a clean stop cuts the active one too; appends go on at its end after the restart
    broker.restart()
    assert files[-1].stat().st_size == data_size(files[-1]) < SEGMENT
    produce(broker.bootstrap, topic, 0, [b"after-restart"])
    # a crash leaves the zero tail of a preallocated file: recovery cuts it, nothing is lost
    produce(broker.bootstrap, topic, 0, [bytes(400_000), bytes(400_000), bytes(400_000)])
    newest = segment_files(broker, topic)[-1]
    assert newest.stat().st_size == SEGMENT
    broker.kill()
    broker.start()
    assert newest.stat().st_size == data_size(newest) < SEGMENT
    got = DRIVERS["confluent"].read(broker.bootstrap, topic, [0], 26)
    assert [r.offset for r in got] == list(range(26))
    assert got[22].value == b"after-restart"


def test_segment_jitter_rolls_segments_before_segment_ms(broker):
    """One record every 36 s of CreateTime for 99 * 36 s (just under the hour of segment.ms): without jitter one
    segment holds them all; with segment.jitter.ms of an hour each segment rolls a random amount (below an hour)
    early, so all four partitions keeping one segment has a chance of 1e-8."""
    hour = 3_600_000
    base = int(time.time() * 1000) - 2 * hour
    timestamps = [base + i * 36_000 for i in range(100)]
    for topic, jitter in (("jitter-none", "0"), ("jitter-hour", str(hour))):
        create_topic(broker.bootstrap, topic, partitions=4, configs={
            "segment.ms": str(hour), "segment.jitter.ms": jitter, "retention.ms": "-1"})
        for partition in range(4):
            produce(broker.bootstrap, topic, partition, [b"r%d" % i for i in range(100)], timestamps,
                    one_batch_each=True)
    assert [len(segment_files(broker, "jitter-none", p)) for p in range(4)] == [1, 1, 1, 1]
    assert sum(len(segment_files(broker, "jitter-hour", p)) for p in range(4)) > 4


def _fetch(bootstrap: str, topic: str, version: int, offset: int = 0):
    body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
            "topics": [{"topic": topic, "partitions": [{"partition": 0, "fetch_offset": offset,
                                                         "partition_max_bytes": 1 << 20}]}]}
    return request(bootstrap, 1, version, body).responses[0].partitions[0]


def test_down_conversion_disabled_refuses_old_fetches(broker):
    off, on = "downconversion-off", "downconversion-on"
    create_topic(broker.bootstrap, off, configs={"message.downconversion.enable": "false"})
    create_topic(broker.bootstrap, on)
    for topic in (off, on):
        produce(broker.bootstrap, topic, 0, [b"m%d" % i for i in range(5)])

    for version in (0, 1, 2, 3):  # magic 0 (v0-1) or 1 (v2-3) would need converting the stored magic 2
        refused = _fetch(broker.bootstrap, off, version)
        assert (refused.error_code, refused.high_watermark, bytes(refused.records or b"")) == \
            (UNSUPPORTED_VERSION, -1, b""), version
        converted = _fetch(broker.bootstrap, on, version)
        assert converted.error_code == 0 and converted.high_watermark == 5
        assert [r.offset for r in legacy.read_records(bytes(converted.records))] == list(range(5))
    # nothing to convert at the log end; v4 reads magic 2 as stored
    assert (_fetch(broker.bootstrap, off, 3, offset=5).error_code, _fetch(broker.bootstrap, off, 3, 5).high_watermark) \
        == (0, 5)
    current = _fetch(broker.bootstrap, off, 4)
    assert current.error_code == 0 and current.records

    # turned back on at run time (IncrementalAlterConfigs), old fetches are converted again
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = ConfigResource(ResourceType.TOPIC, off, incremental_configs=[ConfigEntry(
        "message.downconversion.enable", "true", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(DEADLINE)
    deadline = time.monotonic() + 15
    while _fetch(broker.bootstrap, off, 3).error_code:
        assert time.monotonic() < deadline, "down-conversion stayed disabled"
        time.sleep(0.1)


def test_down_conversion_disabled_serves_what_needs_none(broker):
    """A log written at message.format.version 0.10.0 (magic 1), then at 2.8 (magic 2): with down-conversion
    disabled, Fetch v2-3 (magic 1) still reads the magic-1 part, as Kafka's check is on the batches read."""
    topic = "downconversion-mixed"
    create_topic(broker.bootstrap, topic, configs={"message.format.version": "0.10.0"})
    produce(broker.bootstrap, topic, 0, [b"old%d" % i for i in range(3)])
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("message.format.version", "2.8", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("message.downconversion.enable", "false", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(DEADLINE)
    deadline = time.monotonic() + 15
    while describe(broker.bootstrap, topic)["message.format.version"].value != "2.8":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    produce(broker.bootstrap, topic, 0, [b"new%d" % i for i in range(3)])

    body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
            "topics": [{"topic": topic, "partitions": [{"partition": 0, "fetch_offset": 3,
                                                         "partition_max_bytes": 1 << 20}]}]}
    assert request(broker.bootstrap, 1, 3, body).responses[0].partitions[0].error_code == UNSUPPORTED_VERSION
    old_part = _fetch(broker.bootstrap, topic, 3, offset=0)
    # the whole log read from 0 holds magic-2 batches too: refused; a read within the magic-1 part is served
    assert old_part.error_code == UNSUPPORTED_VERSION
    small = {**body, "topics": [{"topic": topic, "partitions": [{"partition": 0, "fetch_offset": 0,
                                                                  "partition_max_bytes": 60}]}]}
    first = request(broker.bootstrap, 1, 3, small).responses[0].partitions[0]
    assert first.error_code == 0
    assert [r.value for r in legacy.read_records(bytes(first.records), allow_partial=True)][:1] == [b"old0"]
