"""`kbroker dump-log` on a segment the broker itself wrote."""
from __future__ import annotations

import re

from confluent_kafka import Producer

BATCH = re.compile(r"baseOffset: (\d+) lastOffset: (\d+) count: (\d+) .* position: (\d+) "
                   r"CreateTime: \d+ size: (\d+) magic: 2 compresscodec: none crc: \d+ isvalid: true")


def test_dump_log_of_the_brokers_segment(broker, kbroker, unique):
    topic = unique("dump")
    r = kbroker("topics", "--bootstrap-server", broker.bootstrap, "--create", "--topic", topic, "--partitions", "1")
    assert r.returncode == 0, r.stderr
    # a long linger keeps each group of records in one batch; flush() sends it at once
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 5000,
                         "compression.type": "none"})
    # the leader known first: records produced before it would queue apart and leave in separate batches
    assert producer.list_topics(topic, timeout=10).topics[topic].partitions[0].leader >= 0
    for size in (3, 1, 5):
        for i in range(size):
            producer.produce(topic, value=b"v%d" % i, key=b"k", partition=0)
        assert producer.flush(30) == 0

    segment = broker.log_dir / f"{topic}-0" / "00000000000000000000.log"
    r = kbroker("dump-log", "--files", str(segment))
    assert r.returncode == 0, (r.stdout, r.stderr)
    lines = r.stdout.splitlines()
    assert lines[:2] == [f"Dumping {segment}", "Starting offset: 0"]
    batches = [BATCH.fullmatch(line) for line in lines[2:]]
    assert all(batches), lines[2:]
    assert [tuple(int(m.group(i)) for i in (1, 2, 3)) for m in batches] == [(0, 2, 3), (3, 3, 1), (4, 8, 5)]
    position = 0
    for m in batches:  # contiguous batches covering the whole file
        assert int(m.group(4)) == position
        position += int(m.group(5))
    assert position == segment.stat().st_size

    index = segment.with_suffix(".index")
    r = kbroker("dump-log", "--files", str(index))
    assert r.returncode == 0 and r.stdout.startswith(f"Dumping {index}\n")
