"""An idempotent producer's retries after a crash that followed a log-dir move (AlterReplicaLogDirs).

The swap writes the producer state into the new dir as a snapshot at the log end, and a snapshot keeps one batch
per producer (Kafka's format). A client had up to five requests in flight when the broker died; after the restart it
sends them again, oldest first. Each must be answered as the duplicate it is (its original offsets, nothing
written): an OUT_OF_ORDER_SEQUENCE_NUMBER for the oldest is fatal to librdkafka's idempotent producer, and a log that
took it again would hold the records twice."""
from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from kbroker.config.broker import load_config
from kbroker.log import LogManager, TopicPartition
from kbroker.replicas.replica_manager import ReplicaManager
from kbroker.replication.partition import Partition
from kbroker.replication.purgatory import Purgatory

from .helpers import make_batch

TP = TopicPartition("moving", 0)
PID, EPOCH = 4000, 0
IN_FLIGHT = 5  # librdkafka's max.in.flight with idempotence


def _batch(seq: int, n: int = 4) -> bytearray:
    return make_batch(n, value_size=100, tag=f"s{seq}", producer_id=PID, producer_epoch=EPOCH, base_sequence=seq)


class _Broker:
    """The log manager and replica manager of one broker over two log dirs, hosting ``TP`` as its only replica."""

    def __init__(self, dirs: list[Path]) -> None:
        config = load_config(overrides=[f"log.dirs={','.join(map(str, dirs))}", "log.segment.bytes=4096"])
        self.log_manager = LogManager(config.log_dirs, config.log, cleaner_thread=False)
        self.purgatory = Purgatory()
        self.replicas = ReplicaManager(0, config, self.log_manager, self.purgatory)
        self.log_manager.startup()
        self.partition: Partition = self.replicas.host_as_sole_replica(TP)

    def crash(self) -> None:
        """What a SIGKILL leaves: no flush, no snapshot, no clean-shutdown marker, the dir locks released."""
        for plog in list(self.log_manager.logs.values()) + list(self.log_manager.future_logs.values()):
            for segment in plog.segments:
                segment.close()
        for fd in self.log_manager._locks.values():
            os.close(fd)
        self.purgatory.close()


def _move(broker: _Broker, dirs: list[Path]) -> None:
    async def go() -> None:
        here = broker.log_manager.logs[TP].directory.parent
        broker.replicas.alter_log_dir(TP, str(next(d for d in dirs if d != here)))
        while TP in broker.replicas.mover.tasks:
            await asyncio.sleep(0)
        broker.replicas.mover.stop()
    asyncio.run(go())


@pytest.mark.parametrize("before, across_a_roll", [(30, False), (32, True)])
def test_retries_in_flight_at_a_crash_after_the_swap_are_duplicates(tmp_path: Path, before: int,
                                                                     across_a_roll: bool):
    """Seven batches fill a segment: after 30 the five in flight share the last one; after 32 they straddle
    its roll (the window is then found in two segments)."""
    dirs = [tmp_path / "a", tmp_path / "b"]
    broker = _Broker(dirs)
    seq = 0
    for _ in range(before):  # several segments, all of one producer
        broker.partition.append_as_leader(memoryview(_batch(seq)), -1)
        seq += 4
    before = broker.partition.log.directory
    # the last IN_FLIGHT appends: written, their answers never sent
    in_flight = []
    for _ in range(IN_FLIGHT):
        result = broker.partition.append_as_leader(memoryview(_batch(seq)), -1)
        in_flight.append((seq, result.first_offset, result.last_offset))
        seq += 4
    _move(broker, dirs)
    assert broker.log_manager.logs[TP].directory.parent != before.parent  # moved, snapshot at the log end
    moved = broker.log_manager.logs[TP]
    end = moved.log_end_offset
    assert (moved.active.base_offset > in_flight[0][1]) == across_a_roll
    broker.crash()

    restarted = _Broker(dirs)
    p = restarted.partition
    assert p.log.log_end_offset == end
    for first_seq, first_offset, last_offset in in_flight:  # the client sends them again, oldest first
        again = p.append_as_leader(memoryview(_batch(first_seq)), -1)
        assert (again.first_offset, again.last_offset, again.record_count) == (first_offset, last_offset, 0)
    assert p.log.log_end_offset == end
    nxt = p.append_as_leader(memoryview(_batch(seq)), -1)  # and the producer goes on where it was
    assert nxt.first_offset == end
    restarted.crash()
