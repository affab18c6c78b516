"""Transactions end to end with confluent-kafka (librdkafka): commit and abort as read_committed
and read_uncommitted consumers see them, zombie fencing, and a read-process-write loop killed at
random points that still leaves every input exactly once in its output."""
from __future__ import annotations

import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from .helpers import create_topic

PROCESSOR = Path(__file__).with_name("txn_processor.py")


def _read(bootstrap: str, topic: str, partitions: int, isolation: str, expect: int, timeout: float = 20):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.time_ns()}",
                         "isolation.level": isolation, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    got = []
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + timeout
        while len(got) < expect and time.monotonic() < deadline:
            for m in consumer.consume(100, timeout=0.5):
                if not m.error():
                    got.append((m.partition(), m.offset(), m.value()))
        quiet = time.monotonic() + 1.5
        while time.monotonic() < quiet:
            for m in consumer.consume(100, timeout=0.3):
                if not m.error():
                    got.append((m.partition(), m.offset(), m.value()))
    finally:
        consumer.close()
    return got


def test_committed_and_aborted_transactions(module_broker):
    bootstrap = module_broker.bootstrap
    create_topic(bootstrap, "txn-basic", 2)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "basic"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(10):
        producer.produce("txn-basic", value=b"c%d" % i, partition=i % 2)
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(5):
        producer.produce("txn-basic", value=b"a%d" % i, partition=i % 2)
    producer.flush(30)
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce("txn-basic", value=b"last", partition=0)
    producer.commit_transaction(30)
    committed = sorted(v for _, _, v in _read(bootstrap, "txn-basic", 2, "read_committed", 11))
    assert committed == sorted([b"c%d" % i for i in range(10)] + [b"last"])
    everything = sorted(v for _, _, v in _read(bootstrap, "txn-basic", 2, "read_uncommitted", 16))
    assert everything == sorted([b"c%d" % i for i in range(10)] + [b"a%d" % i for i in range(5)] + [b"last"])


def test_an_open_transaction_holds_read_committed_back(module_broker):
    bootstrap = module_broker.bootstrap
    create_topic(bootstrap, "txn-open", 1)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "open"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce("txn-open", value=b"pending", partition=0)
    producer.flush(30)
    plain = Producer({"bootstrap.servers": bootstrap})
    plain.produce("txn-open", value=b"after", partition=0)
    plain.flush(30)
    assert _read(bootstrap, "txn-open", 1, "read_committed", 1, timeout=3) == []
    assert [v for _, _, v in _read(bootstrap, "txn-open", 1, "read_uncommitted", 2)] == [b"pending", b"after"]
    producer.commit_transaction(30)
    assert [v for _, _, v in _read(bootstrap, "txn-open", 1, "read_committed", 2)] == [b"pending", b"after"]


def test_a_zombie_producer_is_fenced(module_broker):
    bootstrap = module_broker.bootstrap
    create_topic(bootstrap, "txn-zombie", 1)
    zombie = Producer({"bootstrap.servers": bootstrap, "transactional.id": "fenced"})
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce("txn-zombie", value=b"zombie", partition=0)
    zombie.flush(30)
    successor = Producer({"bootstrap.servers": bootstrap, "transactional.id": "fenced"})
    successor.init_transactions(30)  # aborts the zombie's transaction and bumps the epoch
    successor.begin_transaction()
    successor.produce("txn-zombie", value=b"successor", partition=0)
    successor.commit_transaction(30)
    with pytest.raises(KafkaException) as caught:
        zombie.produce("txn-zombie", value=b"late", partition=0)
        zombie.commit_transaction(10)
    assert caught.value.args[0].fatal() or caught.value.args[0].txn_requires_abort()
    assert [v for _, _, v in _read(bootstrap, "txn-zombie", 1, "read_committed", 1)] == [b"successor"]


def test_read_process_write_killed_at_random_points_is_exactly_once(module_broker, tmp_path):
    bootstrap = module_broker.bootstrap
    create_topic(bootstrap, "rpw-in", 2)
    create_topic(bootstrap, "rpw-out", 2)
    total = 3000
    source = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(total):
        source.produce("rpw-in", key=b"%d" % i, value=b"%d" % i, partition=i % 2)
    assert source.flush(30) == 0
    rng = random.Random(7)
    log = open(tmp_path / "processor.log", "wb")
    try:
        for _ in range(6):  # run, kill -9 at a random point, again
            proc = subprocess.Popen([sys.executable, str(PROCESSOR), bootstrap, "rpw-in", "rpw-out", "rpw", "rpw-tx"],
                                    stdout=log, stderr=subprocess.STDOUT)
            time.sleep(rng.uniform(2.0, 5.0))
            proc.kill()
            proc.wait()
        proc = subprocess.Popen([sys.executable, str(PROCESSOR), bootstrap, "rpw-in", "rpw-out", "rpw", "rpw-tx"],
                                stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        out: list = []
        while time.monotonic() < deadline:
            out = _read(bootstrap, "rpw-out", 2, "read_committed", total, timeout=10)
            if len(out) >= total:
                break
        proc.kill()
        proc.wait()
    finally:
        log.close()
    values = sorted(int(v) for _, _, v in out)
    assert len(values) == len(set(values)), f"{len(values) - len(set(values))} inputs written twice"
    assert values == list(range(total)), (f"{total - len(set(values))} inputs missing\n"
                                          f"{(tmp_path / 'processor.log').read_text()[-3000:]}")


def test_transactional_offsets_survive_a_broker_restart_before_the_commit(broker):
    """TxnOffsetCommit writes the offsets as the producer's transactional batch: after a restart
    between send_offsets_to_transaction and commit_transaction, the reloaded coordinators finish
    the commit and the group's offsets are those of the transaction."""
    bootstrap = broker.bootstrap
    create_topic(bootstrap, "txn-offsets-in", 1)
    create_topic(bootstrap, "txn-offsets-out", 1)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "txn-offsets", "enable.auto.commit": False})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "txn-offsets",
                         "transaction.timeout.ms": 60000})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce("txn-offsets-out", value=b"derived", partition=0)
    producer.send_offsets_to_transaction([TopicPartition("txn-offsets-in", 0, 42)],
                                         consumer.consumer_group_metadata(), 30)
    producer.flush(30)
    broker.restart()
    producer.commit_transaction(60)
    committed = consumer.committed([TopicPartition("txn-offsets-in", 0)], timeout=30)
    assert committed[0].offset == 42
    consumer.close()
    assert [v for _, _, v in _read(bootstrap, "txn-offsets-out", 1, "read_committed", 1)] == [b"derived"]
