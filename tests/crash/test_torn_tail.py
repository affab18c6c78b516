"""Recovery from damage at random byte positions, at the log layer (no broker): a log of several
segments is written once, then each seeded trial copies it, damages it as a crash can (a write cut
short, garbage or a zero-filled hole past the end, a flipped bit in a batch, an index left at its
preallocated size or lost) and reopens it with recovery. The log must keep exactly the whole
batches before the damage, byte for byte, answer offset and timestamp lookups from the rebuilt
indexes, take appends at the right offset, and recover to the same state a second time.
"""
from __future__ import annotations

import os
import random
import shutil
from dataclasses import dataclass

import pytest

from kbroker.log import LogConfig, PartitionLog

from ..log.helpers import TP, make_batch, read_all

TRIALS = 40
CRC_COVERED_FROM = 21  # base offset, length, leader epoch, magic and the CRC itself precede it


@dataclass(frozen=True)
class Written:
    segment: int      # base offset of its segment
    position: int     # in the segment file
    size: int
    first: int
    last: int
    timestamp: int    # of its first record


def _write_log(root, appender) -> tuple[LogConfig, list[Written], bytes]:
    config = LogConfig(segment_bytes=6000, index_interval_bytes=400, segment_index_bytes=4096)
    plog = PartitionLog(root / str(TP), TP, config, appender)
    rng = random.Random(5)
    written = []
    for i in range(60):
        n = rng.randint(1, 6)
        ts = 10_000 + 100 * i
        batch = make_batch(n, ts=ts, value_size=rng.randint(10, 300), tag=str(i))
        result = plog.append(batch)
        seg = plog.active
        written.append(Written(seg.base_offset, seg.size - result.size, result.size, result.first_offset,
                               result.last_offset, ts))
    data = read_all(plog)
    plog.close()  # no clean-shutdown marker: opening with recover=True re-validates
    assert len({w.segment for w in written}) >= 4
    return config, written, data


@pytest.fixture
def pristine(tmp_path, appender):
    root = tmp_path / "pristine"
    config, written, data = _write_log(root, appender)
    return root, config, written, data


def _damage(directory, written: list[Written], rng: random.Random) -> tuple[str, int]:
    """Damage the copy in ``directory``; returns (what, offset the log must end at)."""
    segments = sorted({w.segment for w in written})
    last = segments[-1]
    last_path = directory / f"{last:020d}.log"
    in_last = [w for w in written if w.segment == last]
    size = last_path.stat().st_size
    kind = rng.choice(["cut", "garbage", "zeros", "flip", "cut+index"])
    if kind in ("cut", "cut+index"):
        cut = rng.randrange(0, size)
        os.truncate(last_path, cut)
        if kind == "cut+index":  # an index left at its preallocated size, or lost
            index = directory / f"{last:020d}.index"
            if rng.random() < 0.5:
                os.truncate(index, 4096)
            else:
                index.unlink()
        kept = [w for w in in_last if w.position + w.size <= cut]
    elif kind == "garbage":
        start = rng.randrange(0, size)
        with open(last_path, "r+b") as f:
            f.seek(start)
            f.write(rng.randbytes(rng.randint(1, 2000)))
        kept = [w for w in in_last if w.position + w.size <= start]
    elif kind == "zeros":  # a write past the end that never happened, after one that did
        with open(last_path, "r+b") as f:
            f.truncate(size + rng.randint(1, 5000))
        kept = in_last
    else:
        victim = rng.choice(in_last)
        at = victim.position + rng.randrange(CRC_COVERED_FROM, victim.size)
        with open(last_path, "r+b") as f:
            f.seek(at)
            byte = f.read(1)[0]
            f.seek(at)
            f.write(bytes([byte ^ (1 << rng.randrange(8))]))
        kept = [w for w in in_last if w.position < victim.position]
    end = kept[-1].last + 1 if kept else last
    return kind, end


def _check(plog: PartitionLog, written: list[Written], data: bytes, end: int, appended: int = 0) -> None:
    """The log holds the written batches below ``end`` byte for byte, then ``appended`` bytes
    appended after recovery; the rebuilt indexes find each batch by offset and by timestamp."""
    kept = [w for w in written if w.last < end]
    got = read_all(plog)
    assert len(got) == sum(w.size for w in kept) + appended
    assert got[:len(got) - appended] == data[:len(got) - appended]
    position = 0
    for w in kept:
        found = plog.read(w.first, 1)
        assert found is not None and found.read()[:w.size] == data[position:position + w.size]
        assert plog.offset_for_timestamp(w.timestamp) == (w.first, w.timestamp)
        position += w.size


def test_random_damage_recovers_to_the_last_whole_batch(pristine, tmp_path, appender):
    root, config, written, data = pristine
    rng = random.Random(2026)
    kinds = set()
    for trial in range(TRIALS):
        copy = tmp_path / f"trial{trial}"
        shutil.copytree(root, copy)
        directory = copy / str(TP)
        kind, end = _damage(directory, written, rng)
        kinds.add(kind)
        plog = PartitionLog(directory, TP, config, appender, recover=True,
                            recovery_point=rng.choice([0, written[-1].segment]))
        try:
            assert plog.log_end_offset == end
            _check(plog, written, data, end)
            appended = plog.append(make_batch(2, ts=1_000_000))
            assert appended.first_offset == end
            next_end = plog.log_end_offset
        finally:
            plog.close()
        again = PartitionLog(directory, TP, config, appender, recover=True)  # a second crash: same state
        try:
            assert again.log_end_offset == next_end
            _check(again, written, data, end, appended.size)
        finally:
            again.close()
        shutil.rmtree(copy)
    assert kinds == {"cut", "garbage", "zeros", "flip", "cut+index"}
