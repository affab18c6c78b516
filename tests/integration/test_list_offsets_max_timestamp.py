"""ListOffsets v7 with the max-timestamp spec (-3, KIP-734) answers the offset, timestamp and
epoch of the first record holding the largest timestamp, as Kafka does, whatever the order of the
timestamps, the batch and segment boundaries and the codec. confluent-kafka's ``offsets_for_times``
cannot ask -3, so the request goes raw through kbroker's own encoder.
"""
from __future__ import annotations

import os

import pytest

from tests.raw_client import request

from .clients import DEADLINE
from .helpers import create_topic

MAX_TIMESTAMP = -3


def list_offsets(broker, topic: str, timestamp: int, version: int = 7, isolation_level: int = 0) -> dict:
    body = {"replica_id": -1, "isolation_level": isolation_level, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": timestamp,
                                        "max_num_offsets": 1}]}]}
    response = request(broker.bootstrap, 2, version, body, timeout=DEADLINE)
    part = response.topics[0].partitions[0]
    return {"error_code": part.error_code, "offset": part.offset, "timestamp": part.timestamp,
            "leader_epoch": part.leader_epoch}


def produce_batches(bootstrap: str, topic: str, batches: list[list[int]], codec: str) -> list[tuple[int, int]]:
    """Each inner list is one flush (one batch or more) of records with those CreateTime
    timestamps; returns (offset, timestamp) in log order."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 50,
                         "enable.idempotence": False})
    stored: list[tuple[int, int]] = []
    for n, timestamps in enumerate(batches):
        acks: list = []
        for i, ts in enumerate(timestamps):
            producer.produce(topic, key=b"k%d-%d" % (n, i), value=os.urandom(150), partition=0, timestamp=ts,
                             on_delivery=lambda err, msg: acks.append((err, msg)))
        assert producer.flush(DEADLINE) == 0
        assert all(err is None for err, _ in acks), acks
        stored += [(msg.offset(), msg.timestamp()[1]) for _, msg in acks]
    return sorted(stored)


def admin_max_timestamp(bootstrap: str, topic: str) -> tuple[int, int]:
    """confluent-kafka's AdminClient.list_offsets with OffsetSpec.max_timestamp(): librdkafka sends
    ListOffsets v7 with -3 itself."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.list_offsets({TopicPartition(topic, 0): OffsetSpec.max_timestamp()}, request_timeout=DEADLINE)
    info = next(iter(futures.values())).result(DEADLINE)
    return info.offset, info.timestamp


def expected(stored: list[tuple[int, int]]) -> tuple[int, int]:
    top = max(ts for _, ts in stored)
    return min(offset for offset, ts in stored if ts == top), top


@pytest.mark.parametrize("codec", ["none", "lz4"])
def test_max_timestamp_is_the_first_record_with_the_largest_timestamp(module_broker, codec):
    topic = f"max-ts-{codec}"
    create_topic(module_broker.bootstrap, topic, 1, {"segment.bytes": "1500"})  # a segment every few batches
    empty = list_offsets(module_broker, topic, MAX_TIMESTAMP)
    assert empty == {"error_code": 0, "offset": -1, "timestamp": -1, "leader_epoch": -1}

    base = 1_700_000_000_000
    # Not monotonic; the largest (base + 9000) first appears inside the second flush, then again later.
    batches = [[base + 1000, base + 5000, base + 2000], [base + 3000, base + 9000, base + 9000, base + 100],
               [base + 4000], [base + 9000, base + 50], [base + 7000, base + 8000]]
    stored = produce_batches(module_broker.bootstrap, topic, batches, codec)
    logs = list((module_broker.dirs).glob(f"{topic}-0/*.log"))
    assert len(logs) >= 2, "the test needs several segments"
    offset, timestamp = expected(stored)
    assert offset == 4
    found = list_offsets(module_broker, topic, MAX_TIMESTAMP)
    assert found["error_code"] == 0
    assert admin_max_timestamp(module_broker.bootstrap, topic) == (offset, timestamp)
    assert (found["offset"], found["timestamp"]) == (offset, timestamp), (found, stored)
    assert found["leader_epoch"] == 0

    # Later segments with smaller timestamps change nothing; a larger one anywhere wins.
    stored += produce_batches(module_broker.bootstrap, topic, [[base + 10], [base + 9500, base + 20]], codec)
    found = list_offsets(module_broker, topic, MAX_TIMESTAMP)
    assert (found["offset"], found["timestamp"]) == expected(stored) == (stored[-2][0], base + 9500)


def test_max_timestamp_with_log_append_time(module_broker):
    """LogAppendTime: every record of a batch has the batch's time; the answer is the first
    record of the newest batch (the appends are milliseconds apart, so the last batch's time is
    at least the others')."""
    topic = "max-ts-append-time"
    create_topic(module_broker.bootstrap, topic, 1, {"message.timestamp.type": "LogAppendTime"})
    stored = produce_batches(module_broker.bootstrap, topic, [[1], [2, 3], [4]], "none")
    found = list_offsets(module_broker, topic, MAX_TIMESTAMP)
    assert (found["offset"], found["timestamp"]) == expected(stored), (found, stored)


def test_earlier_specs_unchanged(module_broker):
    topic = "max-ts-other-specs"
    create_topic(module_broker.bootstrap, topic, 1)
    base = 1_700_000_000_000
    produce_batches(module_broker.bootstrap, topic, [[base + 5, base + 1, base + 9]], "none")
    assert list_offsets(module_broker, topic, -2)["offset"] == 0
    assert list_offsets(module_broker, topic, -1)["offset"] == 3
    assert (list_offsets(module_broker, topic, base + 6)["offset"],
            list_offsets(module_broker, topic, base + 6)["timestamp"]) == (2, base + 9)
