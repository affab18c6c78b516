"""Recovery after an unclean shutdown: nothing before the damage is lost, nothing after survives."""
from __future__ import annotations

import os
import random

import pytest

from kbroker.log import PartitionLog

from .helpers import TP, make_batch, offsets_of, open_log, read_all, values_of


def _fill(tmp_path, appender, batches=40, **config):
    plog = open_log(tmp_path, appender, segment_bytes=4096, index_interval_bytes=300, **config)
    positions = []  # (segment base, position in segment, first offset, last offset) per batch
    for i in range(batches):
        seg_before = plog.active
        result = plog.append(make_batch(3, ts=1000 + i, tag=str(i)))
        seg = plog.active
        positions.append((seg.base_offset, seg.size - result.size, result.first_offset, result.last_offset))
        del seg_before
    data = read_all(plog)
    plog.close()  # files closed but no clean-shutdown handling: reopen with recover=True
    return plog.config, positions, data


def _reopen(tmp_path, appender, config, recovery_point=0):
    return PartitionLog(tmp_path / str(TP), TP, config, appender, recover=True, recovery_point=recovery_point)


def test_recovery_of_an_intact_log_changes_nothing(tmp_path, appender):
    config, _, data = _fill(tmp_path, appender)
    plog = _reopen(tmp_path, appender, config)
    assert read_all(plog) == data
    assert plog.log_end_offset == 120
    assert plog.recovery_point == 120
    plog.close()


@pytest.mark.parametrize("cut", [1, 30, 61, 100])
def test_truncated_tail_is_cut_at_the_last_whole_batch(tmp_path, appender, cut):
    config, positions, data = _fill(tmp_path, appender)
    base, pos, first, last = positions[-1]
    path = tmp_path / str(TP) / f"{base:020d}.log"
    size = os.path.getsize(path)
    os.truncate(path, size - cut)  # a torn write of the last batch
    plog = _reopen(tmp_path, appender, config)
    assert plog.log_end_offset == first
    assert offsets_of(read_all(plog)) == list(range(first))
    assert read_all(plog) == data[:len(read_all(plog))]
    assert os.path.getsize(path) == pos
    # the log continues from there
    assert plog.append(make_batch(1)).first_offset == first
    plog.close()


def test_bit_flip_in_the_middle_loses_that_batch_and_everything_after(tmp_path, appender):
    config, positions, data = _fill(tmp_path, appender)
    victim = len(positions) // 2
    base, pos, first, last = positions[victim]
    path = tmp_path / str(TP) / f"{base:020d}.log"
    with open(path, "r+b") as f:
        f.seek(pos + 70)  # inside the CRC-covered records
        byte = f.read(1)
        f.seek(pos + 70)
        f.write(bytes([byte[0] ^ 0x10]))
    later_segments = sorted({b for b, *_ in positions if b > base})
    plog = _reopen(tmp_path, appender, config)
    assert plog.log_end_offset == first
    kept = read_all(plog)
    assert offsets_of(kept) == list(range(first))
    assert kept == data[:len(kept)]  # byte for byte what was there before the damage
    for b in later_segments:
        assert not (tmp_path / str(TP) / f"{b:020d}.log").exists()
    assert plog.active.base_offset == base
    plog.close()


def test_random_garbage_over_the_tail(tmp_path, appender):
    config, positions, data = _fill(tmp_path, appender)
    rng = random.Random(7)
    base, pos, first, last = positions[-3]
    path = tmp_path / str(TP) / f"{base:020d}.log"
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(bytes(rng.getrandbits(8) for _ in range(500)))
    plog = _reopen(tmp_path, appender, config)
    assert plog.log_end_offset == first
    assert read_all(plog) == data[:len(read_all(plog))]
    plog.close()


def test_only_segments_after_the_recovery_point_are_revalidated(tmp_path, appender):
    """Damage below the recovery point is not looked for (Kafka trusts flushed data), damage
    above it is."""
    config, positions, data = _fill(tmp_path, appender)
    last_base = positions[-1][0]
    first_base = positions[0][0]
    first_path = tmp_path / str(TP) / f"{first_base:020d}.log"
    with open(first_path, "r+b") as f:  # corrupt a record inside the first, flushed segment
        f.seek(80)
        f.write(b"\xff")
    plog = _reopen(tmp_path, appender, config, recovery_point=last_base)
    assert plog.log_end_offset == 120  # nothing cut: the first segment was not re-validated
    plog.close()


def test_lost_index_files_are_rebuilt(tmp_path, appender):
    config, positions, data = _fill(tmp_path, appender)
    d = tmp_path / str(TP)
    originals = {p.name: p.read_bytes() for p in d.glob("*.index")}
    for p in list(d.glob("*.index")) + list(d.glob("*.timeindex")):
        p.unlink()
    plog = _reopen(tmp_path, appender, config)
    plog.close()
    rebuilt = {p.name: p.read_bytes() for p in d.glob("*.index")}
    assert rebuilt == originals
    assert values_of(read_all(_reopen(tmp_path, appender, config))) == values_of(data)


def test_corrupt_index_is_rebuilt_even_after_clean_shutdown(tmp_path, appender):
    config, positions, data = _fill(tmp_path, appender)
    d = tmp_path / str(TP)
    first_index = sorted(d.glob("*.index"))[0]
    original = first_index.read_bytes()
    assert len(original) >= 16
    first_index.write_bytes(original[8:16] + original[0:8] + original[16:])  # offsets no longer rise
    plog = PartitionLog(d, TP, config, appender, recover=False)
    assert read_all(plog) == data
    plog.close()
    assert first_index.read_bytes() == original
