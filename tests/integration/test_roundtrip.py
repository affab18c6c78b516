"""Produce with each client and codec, read back with every client: keys, values, headers and
timestamps byte for byte, offsets contiguous, and the broker's files hold batches of that codec."""
from __future__ import annotations

import zlib

import pytest

from .clients import CODEC_IDS, CODECS, DRIVERS, msg_content
from .helpers import check_contiguous, create_topic, make_messages, stored_batches

PARTITIONS = 3
COUNT = 120


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("producer_client", list(DRIVERS))
def test_codec_round_trip(module_broker, producer_client, codec):
    topic = f"rt-{producer_client}-{codec}"
    create_topic(module_broker.bootstrap, topic, PARTITIONS)
    msgs = make_messages(COUNT, seed=zlib.crc32(topic.encode()), partitions=PARTITIONS)

    producer = DRIVERS[producer_client].producer(module_broker.bootstrap, codec)
    try:
        # two sends, so that each partition gets more than one batch
        producer.send(topic, msgs[:COUNT // 2])
        acks = producer.flush()
        producer.send(topic, msgs[COUNT // 2:])
        acks += producer.flush()
    finally:
        producer.close()
    assert len(acks) == COUNT
    check_contiguous(acks)
    for m, (partition, _) in zip(msgs, acks):
        if m.partition is not None:
            assert partition == m.partition
    expected = {ack: msg_content(m) for m, ack in zip(msgs, acks)}

    stored = stored_batches(module_broker.dirs, topic)
    batches = [h for headers in stored.values() for h in headers]
    assert sum(h.record_count for h in batches) == COUNT
    # clients send a batch uncompressed when compressing would not make it smaller
    codecs = {h.compression for h in batches}
    assert CODEC_IDS[codec] in codecs and codecs <= {CODEC_IDS[codec], 0}, f"stored codecs {codecs}"
    assert all(h.magic == 2 and h.timestamp_type == 0 for h in batches)

    for reader, driver in DRIVERS.items():
        got = driver.read(module_broker.bootstrap, topic, list(range(PARTITIONS)), COUNT)
        assert len(got) == COUNT, f"{reader} read {len(got)} of {COUNT}"
        by_partition: dict[int, list[int]] = {}
        for r in got:
            by_partition.setdefault(r.partition, []).append(r.offset)
            assert r.content() == expected[(r.partition, r.offset)], \
                f"{reader}: record {r.partition}/{r.offset} differs from what {producer_client} sent"
        for p, offsets in by_partition.items():
            assert offsets == sorted(offsets), f"{reader}: partition {p} out of order"
