"""Log compaction in a real broker: a compacted topic with small segments and a low dirty ratio,
many updates per key from confluent-kafka, then a consumer from the beginning sees one record per
key, the latest, at the offset it was acknowledged with; also after kill -9 and a restart."""
from __future__ import annotations

import random
import time

import pytest

from .clients import DEADLINE
from .helpers import create_topic

KEYS = 40
ROUNDS = 25


def read_everything(bootstrap: str, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record from the beginning up to the high watermark."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "compaction-reader", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "enable.partition.eof": True})
    try:
        _, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=DEADLINE)
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        out = []
        deadline = time.monotonic() + DEADLINE
        position = -1
        while position < high - 1 and time.monotonic() < deadline:
            for m in c.consume(num_messages=1000, timeout=0.2):
                if m.error():
                    if m.error().code() == -191:  # _PARTITION_EOF
                        position = max(position, high - 1)
                        continue
                    raise AssertionError(f"consumer error: {m.error()}")
                out.append((m.offset(), m.key(), m.value()))
                position = m.offset()
        return out
    finally:
        c.close()


@pytest.mark.parametrize("codec", ["none", "lz4"])
def test_compacted_topic_keeps_the_latest_value_of_each_key(broker_factory, tmp_path, codec):
    from confluent_kafka import Producer

    (tmp_path / "b0").mkdir()  # broker_factory puts the broker's files there but does not make it
    broker = broker_factory({"log.retention.check.interval.ms": "200", "log.cleaner.backoff.ms": "100"})
    topic = "compacted"
    create_topic(broker.bootstrap, topic, 1, {"cleanup.policy": "compact", "segment.bytes": "32768",
                                              "min.cleanable.dirty.ratio": "0.01"})
    p = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec, "linger.ms": 2,
                  "acks": "all", "enable.idempotence": True, "batch.size": 16384})
    acked: dict[int, tuple[bytes, bytes | None]] = {}

    def delivered(err, msg):
        assert err is None, err
        acked[msg.offset()] = (msg.key(), msg.value())

    rng = random.Random(7)
    for r in range(ROUNDS):
        keys = list(range(KEYS))
        rng.shuffle(keys)
        for k in keys:
            p.produce(topic, key=b"key-%d" % k, value=b"round %d of key %d " % (r, k) + rng.randbytes(100),
                      partition=0, on_delivery=delivered)
        p.poll(0)
    for k in range(0, KEYS, 10):  # a few keys deleted: their tombstones stay (delete.retention.ms = 1 day)
        p.produce(topic, key=b"key-%d" % k, value=None, partition=0, on_delivery=delivered)
    for i in range(700):  # filler under one key pushes every update out of the active segment
        p.produce(topic, key=b"filler", value=b"f%d " % i + rng.randbytes(100), partition=0, on_delivery=delivered)
    assert p.flush(DEADLINE) == 0
    latest = {}
    for offset in sorted(acked):
        key, value = acked[offset]
        latest[key] = (offset, value)
    produced = len(acked)

    def compacted() -> list[tuple[int, bytes | None, bytes | None]] | None:
        stored = read_everything(broker.bootstrap, topic)
        updates = [r for r in stored if r[1] != b"filler"]
        return stored if len(updates) == KEYS else None

    deadline = time.monotonic() + DEADLINE
    stored = compacted()
    while stored is None and time.monotonic() < deadline:
        time.sleep(0.3)
        stored = compacted()
    assert stored is not None, f"not compacted within {DEADLINE}s:\n{broker.log()[-5000:]}"

    def check(stored):
        assert len(stored) < produced / 4
        for offset, key, value in stored:
            assert acked[offset] == (key, value)  # original offsets
        seen = {}
        for offset, key, value in stored:
            seen[key] = (offset, value)
        assert seen == latest
        updates = [(o, k) for o, k, _ in stored if k != b"filler"]
        assert sorted(k for _, k in updates) == sorted(k for k in latest if k != b"filler")  # one per key
        assert sum(1 for _, k, v in stored if v is None) == KEYS // 10

    check(stored)
    # kill -9 and start again: recovery keeps the compacted log as it is
    broker.kill()
    broker.start()
    check(read_everything(broker.bootstrap, topic))
