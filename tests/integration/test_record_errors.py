"""Records Kafka refuses one by one (LogValidator.validateRecord): the batch is refused, and
Produce v8+ names each offending record in ``record_errors`` with Kafka's text, so that librdkafka
fails exactly those records (the others of the batch with _INVALID_DIFFERENT_RECORD) and retries
none. Older Produce versions get the code alone.
"""
from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from kbroker.log import batches, legacy
from tests.raw_client import request

from .clients import DEADLINE
from .helpers import create_topic

INVALID_RECORD = 87
INVALID_TIMESTAMP = 32
KEYLESS = "Compacted topic cannot accept message without key in topic partition {tp}."


def produce_raw(broker, topic: str, records: bytes, version: int = 8):
    """One Produce (acks=1) of ``records`` to partition 0; the partition's answer."""
    body = {"transactional_id": None, "acks": 1, "timeout_ms": 10000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}]}
    response = request(broker.bootstrap, 0, version, body, timeout=DEADLINE)
    return response.responses[0].partition_responses[0]


def record_errors(part) -> list[tuple[int, str]]:
    return [(e.batch_index, e.batch_index_error_message) for e in part.record_errors]


def end_offset(bootstrap: str, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "record-errors-probe"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=DEADLINE)[1]
    finally:
        consumer.close()


def warm_up(producer: Producer, topic: str) -> None:
    """One keyed record, so that the producer knows the partition before the records under test:
    produced while it is unknown, they would be handed to the partition one by one and, with
    flush() in progress, sent in several batches."""
    errs: list = []
    producer.produce(topic, key=b"warm-up", value=b"", partition=0, on_delivery=lambda err, msg: errs.append(err))
    assert producer.flush(DEADLINE) == 0 and errs == [None], errs


@pytest.fixture(scope="module")
def compacted(module_broker) -> str:
    """A topic made compacted after its creation, as in the issue: IncrementalAlterConfigs APPEND."""
    topic = "record-errors-compacted"
    create_topic(module_broker.bootstrap, topic, 1)
    admin = AdminClient({"bootstrap.servers": module_broker.bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(DEADLINE)
    described = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)])
    configs = next(iter(described.values())).result(DEADLINE)
    assert set(configs["cleanup.policy"].value.split(",")) == {"compact", "delete"}
    return topic


@pytest.mark.parametrize("codec", ["none", "gzip", "lz4"])
def test_librdkafka_fails_exactly_the_keyless_records(module_broker, compacted, codec):
    # a long linger: every record waits for flush(), which sends them as one batch
    producer = Producer({"bootstrap.servers": module_broker.bootstrap, "compression.type": codec,
                         "linger.ms": 5000, "enable.idempotence": False, "retries": 5})
    warm_up(producer, compacted)
    before = end_offset(module_broker.bootstrap, compacted)
    outcome: dict[int, KafkaError | None] = {}
    keys = [b"a", None, b"b", b"c", None, b"d"]
    for i, key in enumerate(keys):
        producer.produce(compacted, key=key, value=b"value %d" % i, partition=0,
                         on_delivery=lambda err, msg, i=i: outcome.__setitem__(i, err))
    assert producer.flush(DEADLINE) == 0
    assert sorted(outcome) == list(range(len(keys)))
    for i, key in enumerate(keys):
        err = outcome[i]
        assert err is not None, f"record {i} was accepted: {outcome}"
        if key is None:
            assert err.code() == KafkaError.INVALID_RECORD, (i, err)
        else:
            assert err.code() == KafkaError._INVALID_DIFFERENT_RECORD, (i, err)
        assert not err.retriable()
    assert end_offset(module_broker.bootstrap, compacted) == before  # the whole batch refused, nothing retried

    # keyed records alone go through
    ok: list = []
    producer.produce(compacted, key=b"k", value=b"v", partition=0, on_delivery=lambda err, msg: ok.append(err))
    assert producer.flush(DEADLINE) == 0
    assert ok == [None]


@pytest.mark.parametrize("codec", [batches.NONE, batches.GZIP, batches.SNAPPY, batches.ZSTD],
                         ids=["none", "gzip", "snappy", "zstd"])
def test_produce_v8_names_each_keyless_record(module_broker, compacted, codec):
    now = int(time.time() * 1000)
    batch = batches.build_batch([(b"k0", b"v", now), (None, b"v", now), (b"k2", None, now), (None, None, now)],
                                codec=codec)
    part = produce_raw(module_broker, compacted, bytes(batch))
    assert part.error_code == INVALID_RECORD
    assert part.base_offset == -1
    assert part.error_message == "One or more records have been rejected"
    text = KEYLESS.format(tp=f"{compacted}-0")
    assert record_errors(part) == [(1, text), (3, text)]


def test_older_produce_versions_get_the_code_alone(module_broker, compacted):
    now = int(time.time() * 1000)
    batch = bytes(batches.build_batch([(None, b"v", now), (b"k", b"v", now)]))
    for version in (3, 7):
        part = produce_raw(module_broker, compacted, batch, version)
        assert part.error_code == INVALID_RECORD
        assert not hasattr(part, "record_errors") or not part.record_errors
    # v2 (a legacy message set up-converted): Kafka validates the same rules
    claims = legacy.encode_message(0, b"k", b"v", magic=1, timestamp=now, attributes=batches.LOG_APPEND_TIME)
    assert produce_raw(module_broker, compacted, claims, 2).error_code == INVALID_TIMESTAMP
    message_set = legacy.encode_message(0, None, b"v", magic=1, timestamp=now)
    assert produce_raw(module_broker, compacted, message_set, 2).error_code == INVALID_RECORD
    message_set = legacy.encode_message(0, b"k", b"v", magic=1, timestamp=now)
    assert produce_raw(module_broker, compacted, message_set, 2).error_code == 0


def test_timestamps_outside_the_allowed_difference(module_broker):
    topic = "record-errors-timestamps"
    create_topic(module_broker.bootstrap, topic, 1, {"message.timestamp.difference.max.ms": "3600000"})
    now = int(time.time() * 1000)
    old, future = now - 2 * 3600_000, now + 2 * 3600_000
    batch = batches.build_batch([(b"a", b"v", now), (b"b", b"v", old), (b"c", b"v", now), (b"d", b"v", future)])
    part = produce_raw(module_broker, topic, bytes(batch))
    assert part.error_code == INVALID_TIMESTAMP
    assert part.error_message == "One or more records have been rejected due to invalid timestamp"
    found = record_errors(part)
    assert [i for i, _ in found] == [1, 3]
    for (i, text), ts in zip(found, (old, future)):
        assert text.startswith(f"Timestamp {ts} of message with offset {i} is out of range. "
                               "The timestamp should be within ["), text
        low, high = (int(x) for x in text.rsplit("[", 1)[1].rstrip("]").split(", "))
        assert high - low == 2 * 3600_000 and low <= now + 60_000 and high >= now
    # NO_TIMESTAMP (-1) is never out of range
    assert produce_raw(module_broker, topic, bytes(batches.build_batch([(b"a", b"v", -1)]))).error_code == 0

    # through librdkafka, which splits a batch by record_errors for INVALID_RECORD only: the
    # batch holding the stale record fails whole with INVALID_TIMESTAMP, and is not retried
    producer = Producer({"bootstrap.servers": module_broker.bootstrap, "linger.ms": 5000})
    warm_up(producer, topic)
    before = end_offset(module_broker.bootstrap, topic)
    outcome: dict[int, KafkaError | None] = {}
    for i, ts in enumerate((now, old, now)):
        producer.produce(topic, key=b"k", value=b"v", partition=0, timestamp=ts,
                         on_delivery=lambda err, msg, i=i: outcome.__setitem__(i, err))
    assert producer.flush(DEADLINE) == 0
    assert all(outcome[i] is not None and outcome[i].code() == KafkaError.INVALID_TIMESTAMP for i in range(3)), outcome
    assert end_offset(module_broker.bootstrap, topic) == before


def test_a_client_batch_claiming_log_append_time(module_broker, compacted):
    """Every record gets an error, the keyless ones for their key (Kafka checks the key first)."""
    topic = "record-errors-claims-append-time"
    create_topic(module_broker.bootstrap, topic, 1)
    now = int(time.time() * 1000)
    batch = batches.build_batch([(b"k", b"value", now), (b"kk", None, now)], attributes=batches.LOG_APPEND_TIME)
    part = produce_raw(module_broker, topic, bytes(batch))
    assert part.error_code == INVALID_TIMESTAMP
    assert record_errors(part) == [
        (0, f"Invalid timestamp type in message DefaultRecord(offset=0, timestamp={now}, key=1 bytes, "
            "value=5 bytes). Producer should not set timestamp type to LogAppendTime."),
        (1, f"Invalid timestamp type in message DefaultRecord(offset=1, timestamp={now}, key=2 bytes, "
            "value=0 bytes). Producer should not set timestamp type to LogAppendTime."),
    ]
    batch = batches.build_batch([(None, b"v", now), (b"k", b"v", now)], attributes=batches.LOG_APPEND_TIME)
    part = produce_raw(module_broker, compacted, bytes(batch))
    assert part.error_code == INVALID_TIMESTAMP
    assert [i for i, _ in record_errors(part)] == [0, 1]
    assert record_errors(part)[0][1] == KEYLESS.format(tp=f"{compacted}-0")


def test_malformed_records_inside_a_compressed_batch(module_broker):
    """Kafka reads every record of a compressed batch; a records section holding fewer records
    than the header declares, or bytes after them, is refused whole (INVALID_RECORD)."""
    topic = "record-errors-compressed-structure"
    create_topic(module_broker.bootstrap, topic, 1)
    now = int(time.time() * 1000)
    good = batches.build_batch([(b"a", b"1", now), (b"b", b"2", now)])
    section = bytes(good[batches.HEADER_SIZE:])
    header = batches.parse_header(good)
    for records_section, count in ((section, 3), (section + section, 2)):
        body = batches.compress_records(batches.GZIP, records_section)
        length = batches.HEADER_SIZE - batches.LOG_OVERHEAD + len(body)
        batch = bytearray(batches.pack_header(header, batch_length=length, crc=0, attributes=batches.GZIP,
                                              last_offset_delta=count - 1, record_count=count))
        batch += body
        part = produce_raw(module_broker, topic, bytes(batches.set_crc(batch)))
        assert part.error_code == INVALID_RECORD, part
        assert not part.record_errors
    assert end_offset(module_broker.bootstrap, topic) == 0
