"""Client quotas hold real clients to their rate, on a real broker process.

A producer_byte_rate of 1 MiB/s on a client id holds a fast confluent-kafka producer (1 KiB
records as fast as it can) to at most 1 MiB/s (+20 % for what is in flight when the throttle
comes) over 10 s, and the client hears throttle_time_ms (its throttle callback); another client
id on the same broker is never throttled. A consumer_byte_rate does the same to a consumer's
fetches. A quota promises a ceiling: how far below it a client stays depends on the machine
(a loaded one may not reach the quota at all), so only the ceiling and the throttle are asserted.
Kafka measures a quota over quota.window.num (11) samples of 1 s and lets a new client use the
first 10 s of its quota at once; the throttle then holds it until its rate is back at the quota,
so 10 s from its first record it has had 10 s worth (plus at most what was in flight when the
throttle came).
"""
from __future__ import annotations

import contextlib
import time

import pytest
from confluent_kafka import Consumer, Producer

from kbroker.tools.client import Connection
from tests.integration.conftest import _make_broker

MiB = 1048576
RECORD = b"q" * 1024


@pytest.fixture(scope="module")
def quota_broker(tmp_path_factory):
    gen = _make_broker(tmp_path_factory.mktemp("quota-broker"), {"num.partitions": "1"})
    yield next(gen)
    with contextlib.suppress(StopIteration):
        next(gen)


def set_quota(broker, client_id: str, key: str, value: float) -> None:
    conn = Connection(broker.host, broker.port)
    try:
        result = conn.send(49, {"entries": [{"entity": [{"entity_type": "client-id", "entity_name": client_id}],
                                             "ops": [{"key": key, "value": value, "remove": False}]}],
                                "validate_only": False}).entries[0]
        assert result.error_code == 0, result.error_message
    finally:
        conn.close()


def produce_for(broker, client_id: str, topic: str, seconds: float) -> tuple[list[float], list[float]]:
    """Produce as fast as the client goes for ``seconds``; (delivery times, throttle times in s)."""
    delivered: list[float] = []
    throttles: list[float] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "client.id": client_id, "linger.ms": 5,
                         "throttle_cb": lambda event: throttles.append(event.throttle_time)})

    def on_delivery(err, msg) -> None:
        if err is None:
            delivered.append(time.monotonic())
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            producer.produce(topic, RECORD, on_delivery=on_delivery)
        except BufferError:
            producer.poll(0.01)
            continue
        producer.poll(0)
    producer.purge()  # records still queued are not part of the measure
    producer.flush(30)
    return delivered, throttles


def bytes_within(times: list[float], seconds: float) -> int:
    first = times[0]
    return sum(len(RECORD) for t in times if t - first <= seconds)


def test_producer_byte_rate_holds_a_fast_producer(quota_broker):
    set_quota(quota_broker, "fast-producer", "producer_byte_rate", MiB)
    delivered, throttles = produce_for(quota_broker, "fast-producer", "quota-produce", 10.8)
    assert delivered
    rate = bytes_within(delivered, 10.0) / 10.0
    print(f"throttled producer: {rate / MiB:.3f} MiB/s over 10 s; throttle times {throttles[:6]}")
    assert rate <= 1.2 * MiB, f"{rate / MiB:.3f} MiB/s"
    assert throttles and max(throttles) > 0, "the producer never heard throttle_time_ms"
    # the quota is the client id's: another one on the same broker is never throttled
    free, free_throttles = produce_for(quota_broker, "free-producer", "quota-produce", 2.0)
    print(f"unthrottled producer: {bytes_within(free, 1.5) / MiB / 1.5:.3f} MiB/s over 1.5 s")
    assert free and not any(free_throttles), free_throttles[:6]


def test_consumer_byte_rate_holds_a_consumer(quota_broker):
    topic = "quota-consume"
    produced: list[float] = []
    for _ in range(10):  # 7 MiB to read: more than the 10 s at 0.5 MiB/s the measure covers
        produced += produce_for(quota_broker, "filler", topic, 1.0)[0]
        if len(produced) * len(RECORD) > 7 * MiB:
            break
    assert len(produced) * len(RECORD) > 7 * MiB
    set_quota(quota_broker, "slow-consumer", "consumer_byte_rate", MiB / 2)
    throttles: list[float] = []
    consumer = Consumer({"bootstrap.servers": quota_broker.bootstrap, "client.id": "slow-consumer",
                         "group.id": "quota-group", "auto.offset.reset": "earliest",
                         # fetches of 256 KiB: the fetch that would pass the quota is answered empty,
                         # so with 1 MiB fetches up to a fifth of the 10 s budget could go unused
                         "max.partition.fetch.bytes": 262144,
                         "throttle_cb": lambda event: throttles.append(event.throttle_time)})
    consumer.subscribe([topic])
    got: list[float] = []
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (not got or time.monotonic() - got[0] < 10.5):
            for msg in consumer.consume(1000, 0.2):
                if msg.error() is None:
                    got.append(time.monotonic())
    finally:
        consumer.close()
    assert got
    rate = bytes_within(got, 10.0) / 10.0
    print(f"throttled consumer: {rate / MiB:.3f} MiB/s over 10 s; throttle times {throttles[:6]}")
    assert rate <= 0.6 * MiB, f"{rate / MiB:.3f} MiB/s"
    assert throttles and max(throttles) > 0, "the consumer never heard throttle_time_ms"

