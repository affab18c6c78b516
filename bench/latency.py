"""Latency at a fixed rate: send to acknowledgement (paced_produce) and send to receive (end_to_end), each value
stamped with its send time; percentiles p50/p99/p999 in milliseconds."""
from __future__ import annotations

import struct
import threading
import time

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition


def percentiles(values: list[float]) -> dict:
    if not values:
        return {"p50_ms": None, "p99_ms": None, "p999_ms": None}
    v = sorted(values)

    def q(f: float) -> float:
        return round(v[min(len(v) - 1, int(f * len(v)))] * 1000, 3)

    return {"p50_ms": q(0.50), "p99_ms": q(0.99), "p999_ms": q(0.999)}


def paced_produce(broker, topic: str, acks: str, size: int, rate: float, seconds: float) -> tuple:
    """Send at a fixed rate; returns (acknowledgement latencies in s, failures)."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": acks, "linger.ms": 0,
                         "enable.idempotence": False})
    lat: list[float] = []
    failed = [0]
    pad = b"\0" * max(0, size - 8)
    n = int(rate * seconds)
    start = time.perf_counter()
    for i in range(n):
        due = start + i / rate
        while True:
            now = time.perf_counter()
            if now >= due:
                break
            producer.poll(min(due - now, 0.01))
        sent = time.perf_counter()

        def on_delivery(err, msg, sent=sent) -> None:
            if err is not None:
                failed[0] += 1
            else:
                lat.append(time.perf_counter() - sent)

        producer.produce(topic, struct.pack(">d", sent) + pad, on_delivery=on_delivery)
        producer.poll(0)
    left = producer.flush(30)
    return lat, failed[0] + left


def end_to_end(broker, topic: str, acks: str, size: int, rate: float, seconds: float, partitions: int = 1) -> dict:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"bench-e2e-{time.monotonic_ns()}",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 5, "enable.partition.eof": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    received: list[float] = []
    stop = threading.Event()
    errors: list[str] = []

    def run() -> None:
        while not stop.is_set():
            # poll() returns at the first record (consume(n, timeout) would wait for n records or the timeout)
            m = consumer.poll(0.05)
            batch = [m] if m is not None else []
            for m in batch:
                now = time.perf_counter()
                if m.error() is not None:
                    if m.error().code() != KafkaError._PARTITION_EOF:
                        errors.append(str(m.error()))
                    continue
                received.append(now - struct.unpack(">d", m.value()[:8])[0])

    t = threading.Thread(target=run)
    t.start()
    failed = expected = 0
    try:
        _, failed = paced_produce(broker, topic, acks, size, rate, seconds)
        expected = int(rate * seconds) - failed
        # wait for the rest while it keeps coming (5 s without a message: lost, e.g. by a broker under acks=0)
        seen, last_progress = len(received), time.monotonic()
        while len(received) < expected and time.monotonic() - last_progress < 5:
            time.sleep(0.05)
            if len(received) > seen:
                seen, last_progress = len(received), time.monotonic()
    finally:
        stop.set()
        t.join()
        consumer.close()
    return {"messages": len(received), "failed": failed, "lost": max(0, expected - len(received)),
            "errors": errors[:3], **percentiles(received)}
