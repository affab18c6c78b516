"""One driver per real client library, behind the same small interface, so each scenario runs
unchanged against confluent-kafka (librdkafka), kafka-python and aiokafka.

    driver.producer(bootstrap, codec, idempotent, **config) -> Producer: send(topic, msgs) queues,
        flush() waits for every acknowledgement and returns [(partition, offset)] in send order
    driver.read(bootstrap, topic, partitions, count, **config) -> [Record]: assign, read from the
        beginning, no group
    driver.member(bootstrap, topics, group, journal, name) -> a GroupMember thread: subscribes,
        records each message it is handed into the shared journal, commits synchronously after
        every batch
    driver.committed(bootstrap, group, topic, partitions) -> {partition: offset or None}
    driver.offsets_for_times(bootstrap, topic, {partition: timestamp}) -> {partition: offset or None}

aiokafka runs on an event loop in a thread of its own (``LoopThread``), so the drivers stay
synchronous for the tests.
"""
from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

DEADLINE = 60.0  # generous: only there so that a broken broker fails a test instead of hanging it
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
FAST_GROUP = {"session_ms": 6000, "heartbeat_ms": 300}


@dataclass(frozen=True)
class Msg:
    """What a test produces. ``partition`` None lets the client's partitioner choose."""
    partition: int | None
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int


@dataclass(frozen=True)
class Record:
    """What a client handed back, normalised."""
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int
    timestamp_type: int = 0  # 0 CreateTime, 1 LogAppendTime

    def content(self) -> tuple:
        return (self.key, self.value, self.headers, self.timestamp)


def msg_content(m: Msg) -> tuple:
    return (m.key, m.value, m.headers, m.timestamp)


def _headers(raw) -> tuple[tuple[str, bytes], ...]:
    if not raw:
        return ()
    return tuple((k, bytes(v) if v is not None else None) for k, v in raw)


class Journal:
    """Shared record of what group members were handed, in the order they were handed it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.entries: list[tuple[str, Record]] = []

    def add(self, member: str, records: list[Record]) -> None:
        with self.lock:
            self.entries.extend((member, r) for r in records)

    def snapshot(self) -> list[tuple[str, Record]]:
        with self.lock:
            return list(self.entries)

    def __len__(self) -> int:
        with self.lock:
            return len(self.entries)


def wait_for(predicate: Callable[[], Any], timeout: float = DEADLINE, what: str = "condition",
             interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


class GroupMember(threading.Thread):
    """A consumer-group member on its own thread. ``assignment`` mirrors what the client holds."""

    def __init__(self, bootstrap: str, topics: list[str], group: str, journal: Journal, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.bootstrap = bootstrap
        self.topics = topics
        self.group = group
        self.journal = journal
        self.stopping = threading.Event()
        self.assignment: frozenset[tuple[str, int]] = frozenset()
        self.consumed = 0
        self.commit_errors: list[str] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.loop()
        except BaseException as exc:  # reported by stop()
            self.error = exc

    def loop(self) -> None:
        raise NotImplementedError

    def stop(self, timeout: float = DEADLINE) -> None:
        """Leave the group (the client's close sends LeaveGroup) and wait for the thread."""
        self.stopping.set()
        self.join(timeout)
        assert not self.is_alive(), f"{self.name} did not stop within {timeout}s"
        if self.error is not None:
            raise AssertionError(f"{self.name} failed: {self.error!r}") from self.error


class LoopThread:
    """An asyncio loop on a daemon thread; ``run(coro)`` waits for the result."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="aiokafka-loop")
        self.thread.start()

    def run(self, coro, timeout: float = DEADLINE):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


# ---------------------------------------------------------------------------------------------
# confluent-kafka (librdkafka)


class ConfluentDriver:
    name = "confluent"

    def producer(self, bootstrap: str, codec: str = "none", idempotent: bool = False, **extra):
        from confluent_kafka import Producer

        conf = {"bootstrap.servers": bootstrap, "compression.type": codec, "enable.idempotence": idempotent,
                "linger.ms": 5, "acks": "all", "message.timeout.ms": int(DEADLINE * 1000),
                "reconnect.backoff.max.ms": 500, **extra}
        return _ConfluentProducer(Producer(conf))

    def read(self, bootstrap: str, topic: str, partitions: list[int], count: int, **extra) -> list[Record]:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader-confluent", "enable.auto.commit": False,
                      "auto.offset.reset": "earliest", **extra})
        try:
            c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
            out: list[Record] = []
            deadline = time.monotonic() + DEADLINE
            while len(out) < count and time.monotonic() < deadline:
                for m in c.consume(num_messages=1000, timeout=0.2):
                    if m.error():
                        raise AssertionError(f"confluent consumer error: {m.error()}")
                    out.append(_confluent_record(m))
            return out
        finally:
            c.close()

    def member(self, bootstrap: str, topics: list[str], group: str, journal: Journal, name: str) -> GroupMember:
        return _ConfluentMember(bootstrap, topics, group, journal, name)

    def offsets_for_times(self, bootstrap: str, topic: str, times: dict[int, int]) -> dict[int, int | None]:
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "times-confluent"})
        try:
            found = c.offsets_for_times([TopicPartition(topic, p, ts) for p, ts in times.items()], timeout=DEADLINE)
            return {tp.partition: (tp.offset if tp.offset >= 0 else None) for tp in found}
        finally:
            c.close()

    def committed(self, bootstrap: str, group: str, topic: str, partitions: list[int]) -> dict[int, int | None]:
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
        try:
            found = c.committed([TopicPartition(topic, p) for p in partitions], timeout=DEADLINE)
            return {tp.partition: (tp.offset if tp.offset >= 0 else None) for tp in found}
        finally:
            c.close()


def _confluent_record(m) -> Record:
    kind, ts = m.timestamp()  # kind: 1 CreateTime, 2 LogAppendTime
    return Record(m.topic(), m.partition(), m.offset(), m.key(), m.value(), _headers(m.headers()), ts, kind - 1)


class _ConfluentProducer:
    def __init__(self, p) -> None:
        self.p = p
        self.results: list[Any] = []

    def send(self, topic: str, msgs: list[Msg]) -> None:
        for m in msgs:
            slot = len(self.results)
            self.results.append(None)

            def done(err, msg, slot=slot):
                self.results[slot] = err if err is not None else (msg.partition(), msg.offset())

            kwargs = {"key": m.key, "value": m.value, "headers": list(m.headers), "timestamp": m.timestamp,
                      "on_delivery": done}
            if m.partition is not None:
                kwargs["partition"] = m.partition
            while True:
                try:
                    self.p.produce(topic, **kwargs)
                    break
                except BufferError:
                    self.p.poll(0.1)
            self.p.poll(0)

    def flush(self) -> list[tuple[int, int]]:
        left = self.p.flush(DEADLINE)
        assert left == 0, f"{left} messages not acknowledged within {DEADLINE}s"
        results, self.results = self.results, []
        errors = [r for r in results if not isinstance(r, tuple)]
        assert not errors, f"delivery failed: {errors[:5]}"
        return results

    def close(self) -> None:
        self.p.flush(DEADLINE)


class _ConfluentMember(GroupMember):
    def loop(self) -> None:
        from confluent_kafka import Consumer, KafkaException

        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group, "enable.auto.commit": False,
                      "auto.offset.reset": "earliest", "session.timeout.ms": FAST_GROUP["session_ms"],
                      "heartbeat.interval.ms": FAST_GROUP["heartbeat_ms"], "client.id": self.name})
        try:
            c.subscribe(self.topics)
            while not self.stopping.is_set():
                msgs = c.consume(num_messages=100, timeout=0.1)
                self.assignment = frozenset((tp.topic, tp.partition) for tp in c.assignment())
                records = []
                for m in msgs:
                    if m.error():
                        raise AssertionError(f"consumer error: {m.error()}")
                    records.append(_confluent_record(m))
                if records:
                    self.journal.add(self.name, records)
                    self.consumed += len(records)
                    try:
                        c.commit(asynchronous=False)
                    except KafkaException as exc:
                        self.commit_errors.append(str(exc))
        finally:
            c.close()


# ---------------------------------------------------------------------------------------------
# kafka-python


KP_CODECS = {"none": None, "gzip": "gzip", "snappy": "snappy", "lz4": "lz4", "zstd": "zstd"}


class KafkaPythonDriver:
    name = "kafka-python"

    def producer(self, bootstrap: str, codec: str = "none", idempotent: bool = False, **extra):
        from kafka import KafkaProducer

        conf = dict(bootstrap_servers=bootstrap, compression_type=KP_CODECS[codec], enable_idempotence=idempotent,
                    linger_ms=5, acks="all", reconnect_backoff_max_ms=500, delivery_timeout_ms=int(DEADLINE * 1000),
                    request_timeout_ms=int(DEADLINE * 1000) // 2)
        return _KafkaPythonProducer(KafkaProducer(**{**conf, **extra}))

    def read(self, bootstrap: str, topic: str, partitions: list[int], count: int, **extra) -> list[Record]:
        from kafka import KafkaConsumer, TopicPartition

        c = KafkaConsumer(**{"bootstrap_servers": bootstrap, "group_id": None, "enable_auto_commit": False,
                             "auto_offset_reset": "earliest", **extra})
        try:
            tps = [TopicPartition(topic, p) for p in partitions]
            c.assign(tps)
            c.seek_to_beginning(*tps)
            out: list[Record] = []
            deadline = time.monotonic() + DEADLINE
            while len(out) < count and time.monotonic() < deadline:
                for batch in c.poll(timeout_ms=200).values():
                    out.extend(_kp_record(m) for m in batch)
            return out
        finally:
            c.close()

    def member(self, bootstrap: str, topics: list[str], group: str, journal: Journal, name: str) -> GroupMember:
        return _KafkaPythonMember(bootstrap, topics, group, journal, name)

    def offsets_for_times(self, bootstrap: str, topic: str, times: dict[int, int]) -> dict[int, int | None]:
        from kafka import KafkaConsumer, TopicPartition

        c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
        try:
            found = c.offsets_for_times({TopicPartition(topic, p): ts for p, ts in times.items()})
            return {tp.partition: (v.offset if v is not None else None) for tp, v in found.items()}
        finally:
            c.close()

    def committed(self, bootstrap: str, group: str, topic: str, partitions: list[int]) -> dict[int, int | None]:
        from kafka import KafkaConsumer, TopicPartition

        c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
        try:
            return {p: c.committed(TopicPartition(topic, p)) for p in partitions}
        finally:
            c.close()


def _kp_record(m) -> Record:
    return Record(m.topic, m.partition, m.offset, m.key, m.value, _headers(m.headers), m.timestamp,
                  m.timestamp_type)


class _KafkaPythonProducer:
    def __init__(self, p) -> None:
        self.p = p
        self.futures: list[Any] = []

    def send(self, topic: str, msgs: list[Msg]) -> None:
        for m in msgs:
            self.futures.append(self.p.send(topic, value=m.value, key=m.key, headers=list(m.headers),
                                            partition=m.partition, timestamp_ms=m.timestamp))

    def flush(self) -> list[tuple[int, int]]:
        self.p.flush(DEADLINE)
        futures, self.futures = self.futures, []
        out = []
        for f in futures:
            md = f.get(DEADLINE)
            out.append((md.partition, md.offset))
        return out

    def close(self) -> None:
        self.p.close(DEADLINE)


class _KafkaPythonMember(GroupMember):
    def loop(self) -> None:
        from kafka import KafkaConsumer
        from kafka.errors import KafkaConnectionError, KafkaError

        c = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=self.group, enable_auto_commit=False,
                          auto_offset_reset="earliest", session_timeout_ms=FAST_GROUP["session_ms"],
                          heartbeat_interval_ms=FAST_GROUP["heartbeat_ms"], client_id=self.name)
        try:
            c.subscribe(self.topics)
            while not self.stopping.is_set():
                # A long timeout on purpose: kafka-python 3.0.12 loses a rebalance of its own when
                # poll() times out between the leader computing the assignment and the SyncGroup
                # answer (the next poll sees no need to rejoin and never applies the assignment, so
                # the member stops heartbeating). poll() returns as soon as records arrive.
                try:
                    batches = c.poll(timeout_ms=2000)
                except KafkaConnectionError as exc:
                    # kafka-python 3 lets a refused connection escape poll() while the broker
                    # restarts; an application retries, and so does this member.
                    self.commit_errors.append(f"poll: {exc!r}")
                    self.stopping.wait(0.2)
                    continue
                self.assignment = frozenset((tp.topic, tp.partition) for tp in c.assignment())
                records = [_kp_record(m) for batch in batches.values() for m in batch]
                if records:
                    records.sort(key=lambda r: (r.topic, r.partition, r.offset))
                    self.journal.add(self.name, records)
                    self.consumed += len(records)
                    try:
                        c.commit()
                    except KafkaError as exc:
                        self.commit_errors.append(repr(exc))
        finally:
            c.close()


# ---------------------------------------------------------------------------------------------
# aiokafka


AIO_CODECS = KP_CODECS


class AioKafkaDriver:
    name = "aiokafka"

    def producer(self, bootstrap: str, codec: str = "none", idempotent: bool = False, **extra):
        return _AioProducer(bootstrap, codec, idempotent, extra)

    def read(self, bootstrap: str, topic: str, partitions: list[int], count: int, **extra) -> list[Record]:
        return asyncio.run(self._read(bootstrap, topic, partitions, count, extra))

    async def _read(self, bootstrap: str, topic: str, partitions: list[int], count: int, extra: dict) -> list[Record]:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        c = AIOKafkaConsumer(**{"bootstrap_servers": bootstrap, "group_id": None, "enable_auto_commit": False,
                                "auto_offset_reset": "earliest", **extra})
        await c.start()
        try:
            tps = [TopicPartition(topic, p) for p in partitions]
            c.assign(tps)
            await c.seek_to_beginning(*tps)
            out: list[Record] = []
            deadline = time.monotonic() + DEADLINE
            while len(out) < count and time.monotonic() < deadline:
                for batch in (await c.getmany(timeout_ms=200)).values():
                    out.extend(_kp_record(m) for m in batch)
            return out
        finally:
            await c.stop()

    def member(self, bootstrap: str, topics: list[str], group: str, journal: Journal, name: str) -> GroupMember:
        return _AioMember(bootstrap, topics, group, journal, name)

    def offsets_for_times(self, bootstrap: str, topic: str, times: dict[int, int]) -> dict[int, int | None]:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        async def query():
            c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
            await c.start()
            try:
                found = await c.offsets_for_times({TopicPartition(topic, p): ts for p, ts in times.items()})
                return {tp.partition: (v.offset if v is not None else None) for tp, v in found.items()}
            finally:
                await c.stop()

        return asyncio.run(query())

    def committed(self, bootstrap: str, group: str, topic: str, partitions: list[int]) -> dict[int, int | None]:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        async def query():
            c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
            await c.start()
            try:
                return {p: await c.committed(TopicPartition(topic, p)) for p in partitions}
            finally:
                await c.stop()

        return asyncio.run(query())


class _AioProducer:
    def __init__(self, bootstrap: str, codec: str, idempotent: bool, extra: dict) -> None:
        from aiokafka import AIOKafkaProducer

        self.loop = LoopThread()
        self.futures: list[Any] = []

        async def start():
            conf = dict(bootstrap_servers=bootstrap, compression_type=AIO_CODECS[codec],
                        enable_idempotence=idempotent, linger_ms=5, acks="all",
                        request_timeout_ms=int(DEADLINE * 1000) // 2)
            p = AIOKafkaProducer(**{**conf, **extra})
            await p.start()
            return p

        self.p = self.loop.run(start())

    def send(self, topic: str, msgs: list[Msg]) -> None:
        # aiokafka's send() waits for metadata while no broker is reachable: queue the sends on the
        # loop (in order) and return at once, as the other clients do.
        async def send_all():
            return [await self.p.send(topic, value=m.value, key=m.key, headers=list(m.headers),
                                      partition=m.partition, timestamp_ms=m.timestamp) for m in msgs]

        self.futures.append(asyncio.run_coroutine_threadsafe(send_all(), self.loop.loop))

    def flush(self) -> list[tuple[int, int]]:
        sends, self.futures = self.futures, []
        out = []
        for sent in sends:
            futures = sent.result(DEADLINE)

            async def wait_all(futures=futures):
                return [await f for f in futures]

            out += [(md.partition, md.offset) if md is not None else None  # None: acks=0
                    for md in self.loop.run(wait_all())]
        return out

    def close(self) -> None:
        try:
            self.loop.run(self.p.stop())
        finally:
            self.loop.close()


class _AioMember(GroupMember):
    def loop(self) -> None:
        asyncio.run(self._loop())

    async def _loop(self) -> None:
        from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
        from aiokafka.errors import KafkaError

        c = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, group_id=self.group, enable_auto_commit=False,
                             auto_offset_reset="earliest", session_timeout_ms=FAST_GROUP["session_ms"],
                             heartbeat_interval_ms=FAST_GROUP["heartbeat_ms"], client_id=self.name)
        member = self

        class CommitOnRevoke(ConsumerRebalanceListener):
            # aiokafka rebalances in a background task: what was handed out is committed before the
            # partitions go (the manual-commit pattern aiokafka documents).
            async def on_partitions_revoked(self, revoked):
                if revoked:
                    try:
                        await c.commit()
                    except Exception as exc:
                        member.commit_errors.append(repr(exc))

            async def on_partitions_assigned(self, assigned):
                pass

        await c.start()
        try:
            c.subscribe(self.topics, listener=CommitOnRevoke())
            while not self.stopping.is_set():
                batches = await c.getmany(timeout_ms=100)
                self.assignment = frozenset((tp.topic, tp.partition) for tp in c.assignment())
                records = [_kp_record(m) for batch in batches.values() for m in batch]
                if records:
                    records.sort(key=lambda r: (r.topic, r.partition, r.offset))
                    self.journal.add(self.name, records)
                    self.consumed += len(records)
                    try:
                        await c.commit()
                    except KafkaError as exc:
                        self.commit_errors.append(repr(exc))
        finally:
            await c.stop()


DRIVERS = {d.name: d for d in (ConfluentDriver(), KafkaPythonDriver(), AioKafkaDriver())}
