"""What runs while the faults do: idempotent acks=all producers on keyed topics (every acknowledged send kept with
its partition and offset), a transactional read-process-write loop, and a read_committed consumer group whose
committed offsets are watched over time."""
from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

PLAIN_TOPICS = ("chaos-a", "chaos-b", "chaos-c")
TXN_IN, TXN_OUT = "chaos-txn-in", "chaos-txn-out"
PARTITIONS = 3
READERS_GROUP, EOS_GROUP = "chaos-readers", "chaos-eos"
ABORT_EVERY = 5  # every 5th transaction is aborted on purpose


@dataclass
class Ack:
    topic: str
    partition: int
    offset: int
    value: bytes
    at: float


@dataclass
class Records:
    """Everything the checks need, filled by the workload threads."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    acks: list[Ack] = field(default_factory=list)
    failed: int = 0  # sends that ended in an error (not acknowledged: not required to be present)
    errors: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    txns: dict[int, tuple[str, list[bytes]]] = field(default_factory=dict)  # number -> (outcome, input values)
    commits: list[tuple[float, str, int, int]] = field(default_factory=list)  # acked group commits
    observed: list[tuple[float, str, int, int]] = field(default_factory=list)  # committed offsets seen later
    txn_started: list[float] = field(default_factory=list)  # when each transaction began

    def error(self, what: str) -> None:
        with self.lock:
            self.errors[what] += 1


def _producer_config(bootstrap: str) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
            "message.timeout.ms": 300_000, "linger.ms": 5, "socket.timeout.ms": 10_000,
            "topic.metadata.refresh.interval.ms": 2000, "retry.backoff.ms": 100}


class ClientHang(Exception):
    """A client call did not return within its bound (its thread is left behind)."""


def _bounded(call: Any, timeout: float) -> Any:
    """``call()`` on a daemon thread; its result, its exception, or ClientHang after ``timeout`` seconds."""
    outcome: list[Any] = []

    def target() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as exc:  # handed to the caller
            outcome.append((False, exc))
    thread = threading.Thread(target=target, name="chaos-bounded-call", daemon=True)
    thread.start()
    thread.join(timeout)
    if not outcome:
        raise ClientHang(f"no return within {timeout}s")
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


class Workload:
    def __init__(self, bootstrap: str, records: Records, rate: float = 40.0, client_log: Path | None = None) -> None:
        self.bootstrap = bootstrap
        # the transactional producer's librdkafka EOS debug log goes here: a stalled transaction is diagnosed there
        self.client_log = client_log
        self.records = records
        self.rate = rate  # messages per second, per producer
        self.stopping = threading.Event()
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        for topic in (*PLAIN_TOPICS, TXN_IN):
            self._spawn(self._produce, topic)
        self._spawn(self._transform)
        for reader in range(2):
            self._spawn(self._read, reader)
        self._spawn(self._observe_offsets)

    def _spawn(self, target: Any, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, name=f"chaos-{target.__name__}-{args}", daemon=True)
        thread.start()
        self.threads.append(thread)

    def stop(self, timeout: float = 240.0) -> list[str]:
        """Stop and wait; returns the names of threads still running after ``timeout`` (they are reported)."""
        self.stopping.set()
        deadline = time.monotonic() + timeout
        for thread in self.threads:
            thread.join(max(0.1, deadline - time.monotonic()))
        return [t.name for t in self.threads if t.is_alive()]

    # -- idempotent producers ------------------------------------------------------------------

    def _produce(self, topic: str) -> None:
        producer = Producer(_producer_config(self.bootstrap))
        records = self.records

        def delivered(err: KafkaError | None, msg: Message) -> None:
            if err is not None:
                with records.lock:
                    records.failed += 1
                records.error(f"produce:{err.name()}")
                return
            topic, partition, offset, value = msg.topic(), msg.partition(), msg.offset(), msg.value()
            assert topic is not None and partition is not None and offset is not None and value is not None
            ack = Ack(topic, partition, offset, value, time.monotonic())
            with records.lock:
                records.acks.append(ack)

        seq = 0
        while not self.stopping.is_set():
            key = f"k{seq % 97}".encode()
            try:
                producer.produce(topic, value=f"{topic}:{seq}".encode(), key=key, on_delivery=delivered)
                seq += 1
            except BufferError:
                producer.poll(0.1)
                continue
            producer.poll(0)
            time.sleep(1.0 / self.rate)
        remaining = producer.flush(240)
        if remaining:
            records.error(f"produce:unflushed:{remaining}")

    # -- the transactional read-process-write loop ---------------------------------------------

    def _transform(self) -> None:
        records = self.records
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": EOS_GROUP,
                             "isolation.level": "read_committed", "enable.auto.commit": False,
                             "auto.offset.reset": "earliest", "session.timeout.ms": 15000})
        consumer.subscribe([TXN_IN])
        producer = self._txn_producer()
        number = 0
        while not self.stopping.is_set():
            batch = [m for m in consumer.consume(50, timeout=1.0) if m.error() is None]
            if not batch:
                continue
            number += 1
            inputs = [m.value() or b"" for m in batch]
            with records.lock:
                records.txn_started.append(time.monotonic())
            outcome = "unknown"
            try:
                producer.begin_transaction()
                for m in batch:
                    producer.produce(TXN_OUT, key=m.key(), value=f"{number}|".encode() + (m.value() or b""))
                positions = consumer.position(consumer.assignment())
                metadata = consumer.consumer_group_metadata()
                _bounded(lambda: producer.send_offsets_to_transaction(positions, metadata, 30), 60.0)
                if number % ABORT_EVERY == 0:
                    producer.abort_transaction(60)
                    outcome = "aborted"
                else:
                    outcome = self._commit(producer)
            except ClientHang:
                # librdkafka 2.16 can block in send_offsets_to_transaction past its timeout once the group
                # coordinator it cached is gone (confluentinc/librdkafka#5456, #5511): leave that producer
                # blocked; a new one with the same transactional.id fences it (the outcome is resolved by the
                # coordinator: the check accepts all or nothing for 'unknown')
                records.error("txn:client-hang(librdkafka#5456)")
                producer = self._txn_producer()
            except KafkaException as exc:
                error = exc.args[0]
                records.error(f"txn:{error.name()}")
                if error.txn_requires_abort():
                    try:
                        producer.abort_transaction(60)
                        outcome = "aborted"
                    except KafkaException:
                        outcome = "unknown"
                if outcome == "unknown":  # fatal or unresolved: a new producer fences this one
                    producer = self._txn_producer()
            with records.lock:
                records.txns[number] = (outcome, inputs)
            if outcome != "committed":
                self._rewind(consumer)
        consumer.close()

    @staticmethod
    def _commit(producer: Producer) -> str:
        """Commit, retrying what the client says is retriable; 'committed', or raise."""
        for _ in range(3):
            try:
                producer.commit_transaction(30)
                return "committed"
            except KafkaException as exc:
                if not exc.args[0].retriable():
                    raise
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "commit retries exhausted"))

    def _txn_producer(self) -> Producer:
        while True:
            config = {**_producer_config(self.bootstrap), "transactional.id": "chaos-eos-1",
                      "transaction.timeout.ms": 60_000, "message.timeout.ms": 60_000}
            if self.client_log is not None:
                logger = logging.getLogger("bench.reliability.chaos.txn-client")
                if not logger.handlers:
                    handler = logging.FileHandler(self.client_log)
                    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
                    logger.addHandler(handler)
                    logger.setLevel(logging.DEBUG)
                    logger.propagate = False
                config.update({"debug": "eos,protocol", "logger": logger})
            producer = Producer(config)
            try:
                producer.init_transactions(60)
                return producer
            except KafkaException as exc:
                self.records.error(f"txn:init:{exc.args[0].name()}")
                if self.stopping.is_set():
                    return producer
                time.sleep(1)

    @staticmethod
    def _rewind(consumer: Consumer) -> None:
        """Back to the group's committed offsets, so the inputs of an aborted transaction are processed again."""
        try:
            assignment = consumer.assignment()
            for tp in consumer.committed(assignment, timeout=30):
                consumer.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING))
        except KafkaException:
            pass

    # -- read_committed group and its committed offsets ----------------------------------------

    def _read(self, reader: int) -> None:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": READERS_GROUP,
                             "client.id": f"chaos-reader-{reader}", "isolation.level": "read_committed",
                             "enable.auto.commit": False, "auto.offset.reset": "earliest",
                             "session.timeout.ms": 15000})
        consumer.subscribe(list(PLAIN_TOPICS))
        last_commit = time.monotonic()
        while not self.stopping.is_set():
            consumer.consume(100, timeout=0.5)
            if time.monotonic() - last_commit < 1.0:
                continue
            last_commit = time.monotonic()
            try:
                committed = consumer.commit(asynchronous=False)
            except KafkaException as exc:
                self.records.error(f"group-commit:{exc.args[0].name()}")
                continue
            now = time.monotonic()
            with self.records.lock:
                self.records.commits += [(now, tp.topic, tp.partition, tp.offset) for tp in committed or []
                                         if tp.error is None and tp.offset >= 0]
        consumer.close()

    def _observe_offsets(self) -> None:
        """OffsetFetch every 2 s from outside the group: what a restarted consumer would resume from."""
        watcher = Consumer({"bootstrap.servers": self.bootstrap, "group.id": READERS_GROUP,
                            "enable.auto.commit": False})
        wanted = [TopicPartition(t, p) for t in PLAIN_TOPICS for p in range(PARTITIONS)]
        while not self.stopping.wait(2.0):
            asked = time.monotonic()
            try:
                seen = watcher.committed(wanted, timeout=10)
            except KafkaException as exc:
                self.records.error(f"offset-fetch:{exc.args[0].name()}")
                continue
            with self.records.lock:
                self.records.observed += [(asked, tp.topic, tp.partition, tp.offset) for tp in seen
                                          if tp.error is None and tp.offset >= 0]
        watcher.close()
