"""ListOffsets as Kafka 2.8 serves it: v0-6, so no max-timestamp spec (-3 asks for the record with the largest
timestamp only from v7, KIP-734, Kafka 3.0). -3 sent at v6 is a timestamp like any other, as Kafka 2.8 takes it
(apache/kafka 2.8 core/src/main/scala/kafka/log/Log.scala fetchOffsetByTimestamp: the first record whose timestamp
is >= the target); confluent-kafka's AdminClient.list_offsets with OffsetSpec.max_timestamp() sends it so.
"""
from __future__ import annotations

import os

from tests.raw_client import request

from .clients import DEADLINE
from .helpers import create_topic


def list_offsets(broker, topic: str, timestamp: int, version: int = 6) -> dict:
    body = {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": timestamp,
                                        "max_num_offsets": 1}]}]}
    response = request(broker.bootstrap, 2, version, body, timeout=DEADLINE)
    part = response.topics[0].partitions[0]
    return {"error_code": part.error_code, "offset": part.offset, "timestamp": part.timestamp}


def produce_batches(bootstrap: str, topic: str, batches: list[list[int]]) -> list[tuple[int, int]]:
    """Each inner list is one flush of records with those CreateTime timestamps; (offset, timestamp) in log order."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "enable.idempotence": False})
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


def test_max_timestamp_spec_is_not_served(module_broker):
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    topic = "max-ts-not-served"
    create_topic(module_broker.bootstrap, topic, 1)
    base = 1_700_000_000_000
    stored = produce_batches(module_broker.bootstrap, topic, [[base + 5, base + 1, base + 9], [base + 3]])

    admin = AdminClient({"bootstrap.servers": module_broker.bootstrap})
    futures = admin.list_offsets({TopicPartition(topic, 0): OffsetSpec.max_timestamp()}, request_timeout=DEADLINE)
    info = next(iter(futures.values())).result(DEADLINE)
    # librdkafka sends -3 at the highest version both sides have (v6 here) and takes what comes back: from a 2.8
    # broker, the first record with a timestamp >= -3 (the log's first), never the one with the largest timestamp
    assert (info.offset, info.timestamp) == stored[0] == (0, base + 5)
    assert stored[2] == (2, base + 9)
    assert list_offsets(module_broker, topic, -3) == {"error_code": 0, "offset": 0, "timestamp": base + 5}


def test_earlier_specs_unchanged(module_broker):
    topic = "max-ts-other-specs"
    create_topic(module_broker.bootstrap, topic, 1)
    base = 1_700_000_000_000
    produce_batches(module_broker.bootstrap, topic, [[base + 5, base + 1, base + 9]])
    assert list_offsets(module_broker, topic, -2)["offset"] == 0
    assert list_offsets(module_broker, topic, -1)["offset"] == 3
    found = list_offsets(module_broker, topic, base + 6)
    assert (found["offset"], found["timestamp"]) == (2, base + 9)
