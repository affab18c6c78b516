"""Idempotent producers across a broker restart: the same producer instance keeps producing
while the broker process is stopped (SIGTERM) and started again on the same log dirs. Every
message lands exactly once, offsets have no gaps, and the broker's files show one producer id
whose sequence numbers run on without a break."""
from __future__ import annotations

import threading
import time
import zlib

import pytest

from .clients import DEADLINE, DRIVERS, msg_content
from .helpers import check_contiguous, create_topic, make_messages, stored_batches

PARTITIONS = 2
PHASE = 150


@pytest.mark.parametrize("client", list(DRIVERS))
def test_idempotent_produce_through_restarts(broker, client):
    """Requests in flight when SIGTERM arrives: what the broker wrote but did not answer comes
    again after the restart and must be recognised as a duplicate."""
    topic = f"idem-live-{client}"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    msgs = make_messages(600, zlib.crc32(topic.encode()), partitions=PARTITIONS)
    producer = DRIVERS[client].producer(broker.bootstrap, "none", idempotent=True)
    sent = threading.Event()

    def send_slowly():
        for i in range(0, len(msgs), 20):
            producer.send(topic, msgs[i:i + 20])
            time.sleep(0.02)
        sent.set()

    sender = threading.Thread(target=send_slowly, daemon=True)
    try:
        sender.start()
        time.sleep(0.2)
        broker.restart()
        time.sleep(0.2)
        broker.restart()
        assert sent.wait(DEADLINE)
        sender.join()
        acks = producer.flush()
    finally:
        producer.close()
    assert len(acks) == len(msgs)
    check_contiguous(acks)
    expected = {ack: msg_content(m) for m, ack in zip(msgs, acks)}
    got = DRIVERS[client].read(broker.bootstrap, topic, list(range(PARTITIONS)), len(msgs))
    assert len(got) == len(msgs)
    assert all(r.content() == expected[(r.partition, r.offset)] for r in got)


@pytest.mark.parametrize("client", list(DRIVERS))
def test_idempotent_produce_across_restart(broker, client):
    topic = f"idem-{client}"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    seed = zlib.crc32(topic.encode())
    phases = [make_messages(PHASE, seed + i, partitions=PARTITIONS, ts_base=1_600_000_000_000 + i * 10**10)
              for i in range(3)]
    driver = DRIVERS[client]
    producer = driver.producer(broker.bootstrap, "lz4", idempotent=True)
    acks = []
    try:
        producer.send(topic, phases[0])
        acks += producer.flush()

        broker.restart()
        producer.send(topic, phases[1])
        acks += producer.flush()

        # the third phase is queued while the broker is down and goes out when it is back
        broker.stop_cleanly()
        producer.send(topic, phases[2])
        broker.start()
        acks += producer.flush()
    finally:
        producer.close()

    msgs = [m for phase in phases for m in phase]
    assert len(acks) == len(msgs)
    check_contiguous(acks)
    expected = {ack: msg_content(m) for m, ack in zip(msgs, acks)}

    # per partition, the log holds the messages in the order they were sent
    sent_order: dict[int, list[tuple]] = {}
    for m, (p, _) in zip(msgs, acks):
        sent_order.setdefault(p, []).append(msg_content(m))
    got = driver.read(broker.bootstrap, topic, list(range(PARTITIONS)), len(msgs))
    assert len(got) == len(msgs), f"read {len(got)} records, {len(msgs)} were acknowledged"
    log_order: dict[int, list[tuple]] = {}
    for r in got:
        assert r.content() == expected[(r.partition, r.offset)]
        log_order.setdefault(r.partition, []).append(r.content())
    assert log_order == sent_order

    stored = stored_batches(broker.dirs, topic)
    producer_ids = {h.producer_id for headers in stored.values() for h in headers}
    assert len(producer_ids) == 1 and min(producer_ids) >= 0, f"producer ids in the log: {producer_ids}"
    for p, headers in stored.items():
        epochs = {h.producer_epoch for h in headers}
        assert len(epochs) == 1, f"partition {p}: producer epochs {epochs}"
        expected_seq = 0
        for h in headers:
            assert h.base_sequence == expected_seq, \
                f"partition {p}: sequence {h.base_sequence}, expected {expected_seq}"
            expected_seq = h.last_sequence + 1
        assert expected_seq == sum(h.record_count for h in headers)
