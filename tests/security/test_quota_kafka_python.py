"""kafka-python hears a client quota's throttle: the broker's throttle_time_ms shows in its producer
metrics (throttle-time-max), and every record still arrives once the throttle is over."""
from __future__ import annotations

import contextlib
import time
import warnings

import pytest

from tests.integration.conftest import _make_broker

from .test_quota_throttle import RECORD, set_quota


@pytest.fixture
def plain_broker(tmp_path):
    gen = _make_broker(tmp_path)
    yield next(gen)
    with contextlib.suppress(StopIteration):
        next(gen)


def test_kafka_python_producer_hears_the_throttle(plain_broker):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    set_quota(plain_broker, "kp-producer", "producer_byte_rate", 100 * 1024)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        producer = KafkaProducer(bootstrap_servers=plain_broker.bootstrap, client_id="kp-producer", linger_ms=5)
    started = time.monotonic()
    try:
        # 1.1 MiB: just past the 10 s x 100 KiB/s a new client may send at once
        futures = [producer.send("quota-kafka-python", RECORD) for _ in range(1100)]
        producer.flush(40)
        took = time.monotonic() - started
        assert all(f.succeeded() for f in futures)
        worst = producer.metrics()["producer-metrics"]["throttle-time-max"]
    finally:
        producer.close(timeout=10)
    assert worst > 1000, f"throttle-time-max {worst} ms"
    assert took > 8, f"1.1 MiB at 100 KiB/s went in {took:.1f} s"
    consumer = KafkaConsumer(bootstrap_servers=plain_broker.bootstrap)
    try:
        tp = TopicPartition("quota-kafka-python", 0)
        assert consumer.end_offsets([tp])[tp] == 1100
    finally:
        consumer.close()
