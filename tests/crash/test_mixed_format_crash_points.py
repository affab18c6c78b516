"""SIGKILL at the log layer's crash points (a torn append, a kill during recovery's cut, before the
index entry, inside a roll) of a broker whose topic switched to message.format.version 0.10.0
while a producer wrote: each restart recovers a log of v2 batches then magic-1 messages, and at
the end every acknowledged message is at its acknowledged offset, offsets have no gap, and a
clean stop leaves whole entries with good CRCs (``harness.check_files`` walks both formats)."""
from __future__ import annotations

import os
import random
import threading

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from kbroker._core import records as core_records

from .harness import DEADLINE, CrashBroker, check_files, read_partition, start, wait_until

SEED = int(os.environ.get("KBROKER_CRASH_SEED", "14"))
TOPIC = "mixed"
KILLS = [("segment.append.torn", 60), ("segment.recover.after_cut", 1), ("segment.append.before_index", 15),
         ("log.roll.after_old_trimmed", 4), ("log.roll.after_new_segment", 4)]


class _Writer:
    """A plain (not idempotent) acks=all producer living through the kills; ``acked`` maps each
    acknowledged value to its offset."""

    def __init__(self, bootstrap: str) -> None:
        self.acked: dict[bytes, int] = {}
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                                  "message.timeout.ms": 120_000, "reconnect.backoff.max.ms": 500,
                                  "compression.type": "gzip", "batch.num.messages": 20})
        self.thread = threading.Thread(target=self._run)

    def _done(self, err, msg) -> None:
        if err is None:
            with self.lock:
                self.acked[msg.value()] = msg.offset()

    def _run(self) -> None:
        i = 0
        while not self.stopped.is_set():
            try:
                self.producer.produce(TOPIC, key=b"k%d" % (i % 11), value=b"m%06d" % i + b"." * (i % 150),
                                      on_delivery=self._done)
                i += 1
            except BufferError:
                self.producer.poll(0.05)
            self.producer.poll(0)
            if i % 25 == 0:
                self.stopped.wait(0.01)

    def count(self) -> int:
        with self.lock:
            return len(self.acked)


def test_crash_points_of_a_mixed_format_log(tmp_path):
    rng = random.Random(f"{SEED}:mixed-format")
    broker = CrashBroker(tmp_path)
    broker.start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(DEADLINE)
    writer = _Writer(broker.bootstrap)
    writer.thread.start()
    try:
        wait_until(lambda: writer.count() >= 200, DEADLINE, "v2 acknowledgements")
        entries = [ConfigEntry("message.format.version", "0.10.0", incremental_operation=AlterConfigOpType.SET)]
        for future in admin.incremental_alter_configs(
                [ConfigResource(ConfigResource.Type.TOPIC, TOPIC, incremental_configs=entries)]).values():
            future.result(DEADLINE)
        before = writer.count()
        wait_until(lambda: writer.count() >= before + 200, DEADLINE, "magic-1 acknowledgements")
        broker.kill()
        for point, top in KILLS:
            broker.crash_at = f"{point}:{rng.randint(1, top)}"
            if start(broker):
                assert broker.wait_dead(45), f"crash point {broker.crash_at} not reached"
            assert f"KBROKER CRASH POINT {point} #" in broker.log_since_start(), f"not killed at {broker.crash_at}"
        broker.crash_at = None
        assert start(broker)
        before = writer.count()
        wait_until(lambda: writer.count() >= before + 200, DEADLINE, "acknowledgements after the last restart")
    finally:
        writer.stopped.set()
        writer.thread.join(DEADLINE)
    assert writer.producer.flush(DEADLINE) == 0

    stored = read_partition(broker.bootstrap, TOPIC, 0)
    assert [s.offset for s in stored] == list(range(len(stored))), "offsets without gaps"
    by_offset = {s.offset: s.value for s in stored}
    lost = [(v, o) for v, o in writer.acked.items() if by_offset.get(o) != v]
    assert not lost, f"{len(lost)} acknowledged messages not at their offsets, e.g. {lost[:3]}"
    broker.stop_cleanly()
    assert check_files(broker.dirs) >= 2
    magics = []
    for seg in sorted((broker.dirs / f"{TOPIC}-0").glob("*.log")):
        magics += [h.magic for h in core_records.scan_batches(seg.read_bytes())[0]]
    assert magics[0] == 2 and magics[-1] == 1 and magics == sorted(magics, reverse=True)
