"""Less common produce and lookup paths with each client: acks=0 (no responses at all), topics with
LogAppendTime, and ListOffsets by timestamp (offsets_for_times) over non-monotonic timestamps."""
from __future__ import annotations

import random
import time
import zlib

import pytest

from .clients import DRIVERS, Msg, msg_content
from .helpers import create_topic, make_messages, stored_batches

ACKS_ZERO = {"confluent": {"acks": "0"}, "kafka-python": {"acks": 0}, "aiokafka": {"acks": 0}}


@pytest.mark.parametrize("client", list(DRIVERS))
def test_acks_zero(module_broker, client):
    """Fire-and-forget: the broker sends nothing back, yet every message lands, in order."""
    topic = f"acks0-{client}"
    create_topic(module_broker.bootstrap, topic, 2)
    msgs = make_messages(400, zlib.crc32(topic.encode()), partitions=2)
    producer = DRIVERS[client].producer(module_broker.bootstrap, "lz4", **ACKS_ZERO[client])
    try:
        producer.send(topic, msgs)
        producer.flush()
    finally:
        producer.close()
    got = DRIVERS[client].read(module_broker.bootstrap, topic, [0, 1], len(msgs))
    assert len(got) == len(msgs)
    assert sorted(map(repr, (r.content() for r in got))) == sorted(map(repr, map(msg_content, msgs)))
    for p in (0, 1):  # the messages that named a partition are in it, in the order sent
        mine = [msg_content(m) for m in msgs if m.partition == p]
        theirs = [r.content() for r in got if r.partition == p and r.content() in set(mine)]
        assert theirs == mine
        offsets = [r.offset for r in got if r.partition == p]
        assert offsets == list(range(len(offsets)))


@pytest.mark.parametrize("client", list(DRIVERS))
def test_log_append_time(module_broker, client):
    topic = f"lat-{client}"
    create_topic(module_broker.bootstrap, topic, 1, {"message.timestamp.type": "LogAppendTime"})
    msgs = make_messages(60, zlib.crc32(topic.encode()), partitions=1)  # CreateTimes from 2020
    start = int(time.time() * 1000)
    for codec in ("none", "zstd"):
        producer = DRIVERS[client].producer(module_broker.bootstrap, codec)
        try:
            producer.send(topic, msgs)
            producer.flush()
        finally:
            producer.close()
    end = int(time.time() * 1000)
    got = DRIVERS[client].read(module_broker.bootstrap, topic, [0], 2 * len(msgs))
    assert len(got) == 2 * len(msgs)
    assert all(r.timestamp_type == 1 for r in got), "records should carry LogAppendTime"
    stamps = [r.timestamp for r in got]
    assert all(start - 1000 <= t <= end + 1000 for t in stamps), (start, end, stamps[:5])
    assert stamps == sorted(stamps)
    assert [(r.key, r.value, r.headers) for r in got] == [msg_content(m)[:3] for m in msgs] * 2
    for h in stored_batches(module_broker.dirs, topic)[0]:
        assert h.timestamp_type == 1 and start - 1000 <= h.max_timestamp <= end + 1000


@pytest.mark.parametrize("client", list(DRIVERS))
def test_offsets_for_times(module_broker, client):
    topic = f"times-{client}"
    create_topic(module_broker.bootstrap, topic, 2)
    msgs = make_messages(200, zlib.crc32(topic.encode()), partitions=2)
    producer = DRIVERS["confluent"].producer(module_broker.bootstrap, "gzip")
    try:
        producer.send(topic, msgs[:100])
        acks = producer.flush()
        producer.send(topic, msgs[100:])
        acks += producer.flush()
    finally:
        producer.close()
    stamps = {p: sorted((o, m.timestamp) for m, (q, o) in zip(msgs, acks) if q == p) for p in (0, 1)}

    def expected(p: int, target: int) -> int | None:
        return next((o for o, ts in stamps[p] if ts >= target), None)

    rng = random.Random(5)
    targets = [0]
    for p in (0, 1):
        all_ts = [ts for _, ts in stamps[p]]
        targets += [min(all_ts) - 1, max(all_ts), max(all_ts) + 1]
        targets += [t + d for t in rng.sample(all_ts, 3) for d in (-1, 0, 1)]
    for target in targets:
        found = DRIVERS[client].offsets_for_times(module_broker.bootstrap, topic, {0: target, 1: target})
        want = {p: expected(p, target) for p in (0, 1)}
        assert found == want, f"timestamp {target}"


SMALL_FETCH = {
    "confluent": {"max.partition.fetch.bytes": 1000, "fetch.max.bytes": 1000, "message.max.bytes": 1000,
                  "receive.message.max.bytes": 4_000_000},
    "kafka-python": {"max_partition_fetch_bytes": 1000, "fetch_max_bytes": 1000},
    "aiokafka": {"max_partition_fetch_bytes": 1000, "fetch_max_bytes": 1000},
}


@pytest.mark.parametrize("client", list(DRIVERS))
def test_batches_larger_than_fetch_limits(module_broker, client):
    """KIP-74: a batch larger than the consumer's fetch limits still comes, one per fetch, and the
    partitions after it in the same fetch get nothing rather than a broken response."""
    topic = f"bigmsg-{client}"
    create_topic(module_broker.bootstrap, topic, 3)
    rng = random.Random(11)
    msgs = [Msg(i % 3, b"%d" % i, rng.randbytes(300_000), (), 1_600_000_000_000 + i) for i in range(18)]
    producer = DRIVERS["confluent"].producer(module_broker.bootstrap, "none", **{"linger.ms": 0})
    try:
        producer.send(topic, msgs)
        acks = producer.flush()
    finally:
        producer.close()
    expected = {ack: msg_content(m) for m, ack in zip(msgs, acks)}
    got = DRIVERS[client].read(module_broker.bootstrap, topic, [0, 1, 2], len(msgs), **SMALL_FETCH[client])
    assert sorted((r.partition, r.offset) for r in got) == sorted(expected)
    assert all(r.content() == expected[(r.partition, r.offset)] for r in got)
