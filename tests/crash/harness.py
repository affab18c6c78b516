"""A single real broker killed by SIGKILL, a workload of real clients that records every
acknowledgement, and the checks run after each restart.

``CrashBroker`` is the integration tests' ``BrokerProcess`` with ``crash_at`` (``KBROKER_CRASH_AT``,
see kbroker/crashpoints.py) and settings under which every multi-step write of the log layer runs
within seconds: small segments (time rolls too), frequent flushes and checkpoints, an eager
cleaner. ``Workload`` runs an idempotent producer (it lives through the kills: its retries across
a restart must not duplicate), a transactional producer (a new one after each restart, same
transactional.id) and records what was acknowledged. ``verify`` reads everything back.
"""
from __future__ import annotations

import collections
import mmap
import os
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker._core import records as core_records
from tests.integration.conftest import BrokerProcess, broker_errors

EVENTS = "events"          # cleanup.policy=delete, 2 partitions
TABLE = "table"            # compacted, few keys, aggressive cleaner
TXN = "txn-out"            # transactional output
TABLE_KEYS = 40
DEADLINE = 60.0
TXN_DEBUG = {"debug": os.environ["KBROKER_CRASH_TXN_DEBUG"]} if os.environ.get("KBROKER_CRASH_TXN_DEBUG") else {}
TS_BASE = int(time.time() * 1000) - 600_000  # recent: retention.ms must not delete it

BROKER_SETTINGS = {
    "offsets.topic.num.partitions": "1",
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.num.partitions": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.segment.bytes": "16384",
    "log.segment.bytes": "24576",
    "log.roll.ms": "1500",
    "log.index.interval.bytes": "600",
    "log.flush.interval.ms": "300",
    "log.flush.offset.checkpoint.interval.ms": "250",
    "log.retention.check.interval.ms": "250",
    "log.segment.delete.delay.ms": "300",
    "log.cleaner.backoff.ms": "100",
}
TABLE_CONFIG = {"cleanup.policy": "compact", "segment.bytes": "6144", "min.cleanable.dirty.ratio": "0.01",
                "segment.ms": "700"}


class CrashBroker(BrokerProcess):
    """``kbroker serve`` whose crash points named by ``crash_at`` (None: none) are armed."""

    def __init__(self, base: Path, crash_at: str | None = None) -> None:
        super().__init__(base, BROKER_SETTINGS)
        self.crash_at = crash_at

    def command(self) -> list[str]:
        env = ["env", "-u", "KBROKER_CRASH_AT"]
        if self.crash_at:
            env.append(f"KBROKER_CRASH_AT={self.crash_at}")
        return env + super().command()

    def log_since_start(self) -> str:
        return self.log_path.read_bytes()[self._log_start:].decode(errors="replace")

    def wait_dead(self, timeout: float) -> bool:
        """True once the process exited (it is reaped); False if it still runs after ``timeout``."""
        assert self.proc is not None
        try:
            self.proc.wait(timeout)
        except Exception:
            return False
        self.proc = None
        return True

    def crash_points_hit(self) -> list[str]:
        return [line.split()[3] for line in self.log().splitlines() if line.startswith("KBROKER CRASH POINT ")]


def create_topics(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(EVENTS, 2, 1), NewTopic(TABLE, 1, 1, config=TABLE_CONFIG),
                                   NewTopic(TXN, 1, 1)], operation_timeout=DEADLINE, request_timeout=DEADLINE)
    for future in futures.values():
        future.result(DEADLINE)


@dataclass
class Acked:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    timestamp: int


@dataclass
class Journal:
    """Everything the clients were told. Guarded by ``lock``: the workload threads append."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    acked: list[Acked] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)       # delivery errors (not acknowledged: fine)
    fatal: list[str] = field(default_factory=list)        # a fatal idempotence/transaction error: a bug
    committed: list[list[bytes]] = field(default_factory=list)   # values of committed transactions
    aborted: list[list[bytes]] = field(default_factory=list)     # values of transactions we aborted
    sent = 0
    abort_refused = 0  # see Workload._end

    def snapshot(self) -> tuple[list[Acked], list[list[bytes]], list[list[bytes]]]:
        with self.lock:
            return list(self.acked), list(self.committed), list(self.aborted)


class AbortRefused(Exception):
    """EndTxn(abort) answered INVALID_TXN_STATE after a kill (see ``Workload._end``)."""


class Workload:
    """Producers in two threads until ``stop()``; a broker death just makes them wait and retry."""

    def __init__(self, bootstrap: str, journal: Journal, rate_pause: float = 0.002) -> None:
        self.bootstrap = bootstrap
        self.journal = journal
        self.pause = rate_pause
        self._stop = threading.Event()
        self.producer = Producer({
            "bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 3,
            "batch.num.messages": 40, "message.timeout.ms": 180000, "retry.backoff.ms": 100,
            "reconnect.backoff.max.ms": 500, "topic.metadata.refresh.interval.ms": 1000})
        self._threads = [threading.Thread(target=self._produce_loop, daemon=True, name="idempotent"),
                         threading.Thread(target=self._txn_loop, daemon=True, name="transactional")]
        self.seq = 0

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def stop(self, check: bool = True) -> None:
        """Stop producing; with ``check``, every message sent must be acknowledged without error."""
        if self._stop.is_set():
            return
        self._stop.set()
        for t in self._threads:
            t.join(DEADLINE)
        if check:
            self.flush()
            assert not self.journal.failed, f"deliveries failed: {self.journal.failed[:5]}"

    def flush(self, timeout: float = DEADLINE) -> None:
        left = self.producer.flush(timeout)
        assert left == 0, f"{left} messages still unacknowledged after {timeout}s"

    def _on_delivery(self, err: KafkaError | None, msg) -> None:
        j = self.journal
        with j.lock:
            if err is None:
                j.acked.append(Acked(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(),
                                     msg.timestamp()[1]))
            elif err.fatal():
                j.fatal.append(str(err))
            else:
                j.failed.append(str(err))

    def _produce_loop(self) -> None:
        p = self.producer
        while not self._stop.is_set():
            i = self.seq
            self.seq += 1
            ts = TS_BASE + i
            if i % 3 == 0:
                topic, key = TABLE, b"k%d" % (i % TABLE_KEYS)
            else:
                topic, key = EVENTS, b"e%d" % i
            value = b"v%d:" % i + b"x" * (i % 97)
            while True:
                try:
                    p.produce(topic, value, key, partition=(i // 3) % 2 if topic == EVENTS else 0,
                              on_delivery=self._on_delivery, timestamp=ts)
                    break
                except BufferError:
                    p.poll(0.05)
                    if self._stop.is_set():
                        return
            with self.journal.lock:
                self.journal.sent += 1
            p.poll(0)
            if i % 50 == 0:
                time.sleep(self.pause * 25)

    def _txn_loop(self) -> None:
        n = 0
        while not self._stop.is_set():
            try:
                self._transactions(n)
            except AbortRefused:
                pass  # a new producer
            except KafkaException as exc:
                err = exc.args[0]
                if err.fatal():
                    with self.journal.lock:
                        self.journal.fatal.append(f"transactional: {err}\n{traceback.format_exc()}")
            n += 1_000_000  # values stay unique per producer

    @staticmethod
    def _retry(call) -> None:
        """A retriable failure (the broker is down) is retried on the same producer: an abandoned
        instance would go on in the background and fence its successor."""
        for _ in range(12):
            try:
                return call()
            except KafkaException as exc:
                if not exc.args[0].retriable():
                    raise
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "gave up after 12 retriable failures"))

    def _end(self, tp: Producer, commit: bool) -> bool:
        """librdkafka's pattern: a retriable failure (the broker was down) is retried with the same
        call; one that requires an abort aborts (then False). Anything else (fatal) propagates."""
        end = tp.commit_transaction if commit else tp.abort_transaction
        for _ in range(12):
            try:
                end(5)
                return True
            except KafkaException as exc:
                err = exc.args[0]
                if not commit and err.code() == KafkaError.INVALID_TXN_STATE:
                    # Kafka's answer too: the broker died before it handled this transaction's
                    # AddPartitionsToTxn, so its coordinator has no transaction to abort, and
                    # librdkafka (it sent the request) makes that fatal. Nothing of it was written.
                    with self.journal.lock:
                        self.journal.abort_refused += 1
                    raise AbortRefused from exc
                if commit and err.txn_requires_abort() and not err.fatal():
                    self._end(tp, commit=False)  # may be refused too, for the same reason
                    return False
                if not err.retriable():
                    raise
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "could not end the transaction in 60 s"))

    def _transactions(self, n: int) -> None:
        """One producer: init (fences a predecessor, aborts its open transaction), then
        transactions of 10 values until stopped; every 4th is aborted on purpose. An exception
        (init timed out while the broker was down...) makes the caller start a new producer."""
        tp = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": "crash-txn", "acks": "all",
                       "linger.ms": 2, "transaction.timeout.ms": 30000, "message.timeout.ms": 8000,
                       "reconnect.backoff.max.ms": 500, **TXN_DEBUG})
        try:
            self._retry(lambda: tp.init_transactions(5))
            while not self._stop.is_set():
                values = [b"t%d-%d" % (n, k) for k in range(10)]
                tp.begin_transaction()
                for v in values:
                    tp.produce(TXN, v, b"tk", partition=0)
                if n % 4 == 3:
                    tp.flush(5)  # the aborted records reach the log: read_committed must skip them
                    try:
                        self._end(tp, commit=False)
                    finally:  # refused or not, none of these may ever be visible
                        with self.journal.lock:
                            self.journal.aborted.append(values)
                else:
                    committed = self._end(tp, commit=True)  # False: aborted instead
                    with self.journal.lock:
                        (self.journal.committed if committed else self.journal.aborted).append(values)
                n += 1
                time.sleep(0.02)
        finally:
            try:
                tp.flush(0)
            except KafkaException:
                pass  # a failed instance re-raises its error here; what raised it first counts


# -- reading back --------------------------------------------------------------------------

@dataclass(frozen=True)
class Stored:
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int


def read_partition(bootstrap: str, topic: str, partition: int, committed: bool = False,
                   start: int = 0, limit: int | None = None) -> list[Stored]:
    """Records of one partition from ``start`` up to its end (high watermark / LSO) at call time."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "crash-check", "enable.auto.commit": False,
                  "isolation.level": "read_committed" if committed else "read_uncommitted",
                  "enable.partition.eof": True, "fetch.wait.max.ms": 50})
    out: list[Stored] = []
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, partition), DEADLINE)
        if high <= start:
            return out
        c.assign([TopicPartition(topic, partition, start)])
        deadline = time.monotonic() + DEADLINE
        while time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() != KafkaError._PARTITION_EOF:
                    raise AssertionError(f"reading {topic}-{partition}: {msg.error()}")
                if committed or c.position([TopicPartition(topic, partition)])[0].offset >= high:
                    return out
                continue
            out.append(Stored(msg.offset(), msg.key(), msg.value(), msg.timestamp()[1]))
            if limit is not None and len(out) >= limit:
                return out
        raise AssertionError(f"reading {topic}-{partition} to {high} took over {DEADLINE}s")
    finally:
        c.close()


def check_data(bootstrap: str, journal: Journal) -> dict[str, int]:
    """Every acknowledged message is stored exactly once at its acknowledged offset (compacted:
    or superseded by a later record of its key); no value is stored twice; committed
    transactions are complete and aborted ones invisible to read_committed. Returns counts."""
    acked, committed, aborted = journal.snapshot()
    assert not journal.fatal, f"fatal client errors: {journal.fatal[:5]}"
    stored = {(EVENTS, p): read_partition(bootstrap, EVENTS, p) for p in (0, 1)}
    stored[(TABLE, 0)] = read_partition(bootstrap, TABLE, 0)
    by_offset = {tp: {r.offset: r for r in recs} for tp, recs in stored.items()}
    for tp, recs in stored.items():
        offsets = [r.offset for r in recs]
        assert offsets == sorted(set(offsets)), f"{tp}: offsets not strictly rising"
        dups = [v for v, n in collections.Counter(r.value for r in recs).items() if n > 1]
        assert not dups, f"{tp}: values stored twice: {sorted(dups)[:5]}"
    last_of_key: dict[bytes | None, int] = {}
    for r in stored[(TABLE, 0)]:
        last_of_key[r.key] = max(last_of_key.get(r.key, -1), r.offset)
    missing = []
    for a in acked:
        if a.topic not in (EVENTS, TABLE):
            continue
        rec = by_offset[(a.topic, a.partition)].get(a.offset)
        if rec is not None:
            assert (rec.key, rec.value, rec.timestamp) == (a.key, a.value, a.timestamp), \
                f"{a.topic}-{a.partition}@{a.offset}: stored {rec} but acknowledged {a}"
        elif a.topic == EVENTS or last_of_key.get(a.key, -1) <= a.offset:
            missing.append(a)
    assert not missing, f"{len(missing)} acknowledged messages are missing, e.g. {missing[:3]}"
    txn_values = [r.value for r in read_partition(bootstrap, TXN, 0, committed=True)]
    assert len(txn_values) == len(set(txn_values)), "a transactional value is visible twice"
    visible = set(txn_values)
    lost = [v for values in committed for v in values if v not in visible]
    assert not lost, f"{len(lost)} values of committed transactions are missing: {lost[:5]}"
    leaked = [v for values in aborted for v in values if v in visible]
    assert not leaked, f"values of aborted transactions visible to read_committed: {leaked[:5]}"
    return {"acked": sum(1 for a in acked if a.topic != TXN), "committed_txns": len(committed),
            "aborted_txns": len(aborted), "abort_refused": journal.abort_refused}


def check_indexes(bootstrap: str, samples: int = 8) -> None:
    """ListOffsets by timestamp and a fetch from the middle agree with the data read back. The cleaner
    may compact the table between the read and the lookups (a superseded value then really is gone:
    the lookup rightly answers a later offset); a disagreement counts only if the data read again
    afterwards is unchanged, else the check runs again on the new data."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "crash-index", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 50})
    try:
        for topic, partition in ((EVENTS, 0), (EVENTS, 1), (TABLE, 0)):
            for _ in range(5):
                recs = read_partition(bootstrap, topic, partition)
                wrong = _index_disagreement(c, bootstrap, topic, partition, recs, samples)
                if wrong is None:
                    break
                assert read_partition(bootstrap, topic, partition) != recs, wrong  # same data: a wrong answer
            else:
                raise AssertionError(f"{topic}-{partition}: the data kept changing under the index checks")
    finally:
        c.close()


def _index_disagreement(c: Consumer, bootstrap: str, topic: str, partition: int, recs: list,
                        samples: int) -> str | None:
    """The first sample where ListOffsets or a fetch from the middle disagrees with ``recs``."""
    if len(recs) < 2:
        return None
    step = max(1, len(recs) // samples)
    for i in range(len(recs) // (2 * step), len(recs), step):
        target = recs[i]
        expected = min(r.offset for r in recs if r.timestamp >= target.timestamp)
        found = c.offsets_for_times([TopicPartition(topic, partition, target.timestamp)], DEADLINE)[0]
        if found.offset != expected:
            return f"{topic}-{partition}: ListOffsets({target.timestamp}) = {found.offset}, the data says {expected}"
        got = read_partition(bootstrap, topic, partition, start=target.offset, limit=1)
        if not got or got[0] != target:
            return f"{topic}-{partition}: fetch from {target.offset} gave {got[:1]}"
    return None


def check_files(log_dir: Path) -> int:
    """After a clean stop: every segment is whole batches with good CRCs, offsets rise across a
    partition's segments, no cleaner leftovers. Returns the number of segments checked."""
    checked = 0
    for part in sorted(p for p in log_dir.iterdir() if p.is_dir()):
        leftovers = [f.name for f in part.iterdir() if f.name.endswith((".cleaned", ".swap", ".deleted", ".tmp"))]
        assert not leftovers, f"{part.name}: leftover files {leftovers}"
        next_offset = -1
        for seg in sorted(part.glob("*.log")):
            base = int(seg.name[:-4])
            assert base >= next_offset, f"{seg}: base {base} below the previous segment's end {next_offset}"
            size = seg.stat().st_size
            checked += 1
            if not size:
                continue
            with open(seg, "rb") as f, mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ) as mm, \
                    memoryview(mm) as view:
                headers, valid, status = core_records.scan_batches(view, verify_crc=True)
                assert valid == size, f"{seg}: only {valid} of {size} bytes are whole batches (status {status})"
                for h in headers:
                    assert h.base_offset >= max(next_offset, base), f"{seg}: batch at {h.base_offset} goes back"
                    next_offset = h.last_offset + 1
                del headers
    return checked


def cleanings_since_start(broker: CrashBroker, topic: str = TABLE) -> int:
    return sum(1 for line in broker.log_since_start().splitlines()
               if f"{topic}-0: cleaned segments" in line and "swapped in" in line)


def wait_until(condition, timeout: float, what: str, interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def acked_count(journal: Journal) -> int:
    with journal.lock:
        return len(journal.acked)


def scrub_env() -> None:
    os.environ.pop("KBROKER_CRASH_AT", None)


def start(broker: CrashBroker) -> bool:
    """Start ``broker``; False when it died at one of its crash points while starting (recovery
    and the first checkpoints run before it serves)."""
    try:
        broker.start()
    except AssertionError:
        if "KBROKER CRASH POINT" not in broker.log_since_start():
            raise
        return False
    return True


def final_checks(broker: CrashBroker, journal: Journal, workload: Workload) -> dict[str, int]:
    """With ``broker`` serving again (no crash point armed) and ``workload`` still running: the
    idempotent producer continues (it is flushed with nothing failing), the compacted topic gets
    cleaned again, the data and index checks pass; then a clean stop leaves whole files."""
    before = acked_count(journal)
    wait_until(lambda: acked_count(journal) >= before + 300, DEADLINE, "300 more acknowledgements after the restart")
    wait_until(lambda: cleanings_since_start(broker) >= 1, DEADLINE, "a compaction of the table after the restart")
    workload.stop()
    counts = check_data(broker.bootstrap, journal)
    check_indexes(broker.bootstrap)
    broker.stop_cleanly()
    counts["segments"] = check_files(broker.dirs)
    found = broker_errors(broker.log())
    assert not found, f"the broker logged errors: {found[:5]}"
    return counts
