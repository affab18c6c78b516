"""kbroker._core.index against hand-computed Kafka bytes and the bisect oracle, on real files."""
from __future__ import annotations

import io
import os
import random
import struct

import numpy as np
import pytest

from kbroker._core.index import CorruptIndexError, OffsetIndex, TimeIndex
from tests.oracles.index_oracle import (
    INT32_MAX,
    OffsetIndexOracle,
    TimeIndexOracle,
    offset_index_bytes,
    time_index_bytes,
)

# Kafka's warm section: the last 8192 bytes of entries.
OFFSET_WARM = 8192 // 8
TIME_WARM = 8192 // 12


def add(idx, offset: int, value: int):
    """Append (offset, position) to an OffsetIndex or (timestamp=value, offset) to a TimeIndex."""
    if isinstance(idx, OffsetIndex):
        return idx.append(offset, value)
    return idx.maybe_append(value, offset)


def file_bytes(path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


@pytest.fixture
def opath(tmp_path):
    return str(tmp_path / "00000000000000000100.index")


@pytest.fixture
def tpath(tmp_path):
    return str(tmp_path / "00000000000000000100.timeindex")


# -- byte compatibility ------------------------------------------------------------------------


def test_offset_index_bytes_match_kafka(opath):
    idx = OffsetIndex(opath, 100, 1024)
    idx.append(101, 0)
    idx.append(150, 4096)
    idx.close()
    expected = b"\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x32\x00\x00\x10\x00"
    assert file_bytes(opath) == expected
    assert offset_index_bytes(100, [(101, 0), (150, 4096)]) == expected


def test_time_index_bytes_match_kafka(tpath):
    idx = TimeIndex(tpath, 100, 1024)
    assert idx.maybe_append(1_700_000_000_000, 101)
    assert idx.maybe_append(1_700_000_000_005, 150)
    idx.close()
    expected = (
        b"\x00\x00\x01\x8b\xcf\xe5\x68\x00" b"\x00\x00\x00\x01"  # 1700000000000, 101 - 100
        b"\x00\x00\x01\x8b\xcf\xe5\x68\x05" b"\x00\x00\x00\x32"  # 1700000000005, 150 - 100
    )
    assert file_bytes(tpath) == expected
    assert time_index_bytes(100, [(1_700_000_000_000, 101), (1_700_000_000_005, 150)]) == expected


def test_large_values_bytes(opath, tpath):
    idx = OffsetIndex(opath, 0, 64)
    idx.append(INT32_MAX, INT32_MAX)  # largest relative offset and position Kafka's int32 allows
    idx.close()
    assert file_bytes(opath) == b"\x7f\xff\xff\xff\x7f\xff\xff\xff"
    t = TimeIndex(tpath, 0, 64)
    t.maybe_append(2**63 - 1, INT32_MAX)
    t.close()
    assert file_bytes(tpath) == b"\x7f\xff\xff\xff\xff\xff\xff\xff\x7f\xff\xff\xff"


@pytest.mark.parametrize("cls,esize", [(OffsetIndex, 8), (TimeIndex, 12)])
@pytest.mark.parametrize("max_bytes", [12, 100, 1000, 10485760])
def test_preallocated_to_whole_entries(tmp_path, cls, esize, max_bytes):
    path = str(tmp_path / "x")
    idx = cls(path, 0, max_bytes)
    assert cls.entry_size == idx.entry_size == esize
    assert os.path.getsize(path) == max_bytes // esize * esize
    assert idx.max_entries == max_bytes // esize
    assert idx.entries == 0 and not idx.is_full
    idx.close()
    assert os.path.getsize(path) == 0  # trimmed to its (zero) entries


def test_default_max_size(opath):
    with OffsetIndex(opath, 100) as idx:
        assert idx.max_entries == 10485760 // 8
        assert os.path.getsize(opath) == 10485760


@pytest.mark.parametrize("cls", [OffsetIndex, TimeIndex])
def test_max_size_smaller_than_one_entry(tmp_path, cls):
    with pytest.raises(ValueError):
        cls(str(tmp_path / "x"), 0, cls.entry_size - 1)


@pytest.mark.parametrize("cls", [OffsetIndex, TimeIndex])
def test_negative_base_offset(tmp_path, cls):
    with pytest.raises(ValueError):
        cls(str(tmp_path / "x"), -1)


# -- lookups at every boundary -----------------------------------------------------------------


def test_offset_lookup_empty(opath):
    idx = OffsetIndex(opath, 100, 1024)
    for target in (0, 99, 100, 101, 10**12, -(2**63), 2**63 - 1):
        assert idx.lookup(target) == (100, 0)
    assert idx.lookup_by_position(0) == (100, 0)
    assert idx.lookup_by_position(10**9) == (100, 0)
    assert idx.last_offset == 100


def test_offset_lookup_boundaries(opath):
    idx = OffsetIndex(opath, 100, 1024)
    entries = [(105, 100), (110, 4196), (200, 9000)]
    for o, p in entries:
        idx.append(o, p)
    assert idx.last_offset == 200
    cases = {
        -(2**63): (100, 0), 0: (100, 0), 99: (100, 0), 100: (100, 0), 104: (100, 0),  # below first
        105: (105, 100), 106: (105, 100), 109: (105, 100),
        110: (110, 4196), 199: (110, 4196),
        200: (200, 9000), 201: (200, 9000), 2**63 - 1: (200, 9000),  # beyond last
    }
    for target, want in cases.items():
        assert idx.lookup(target) == want, target
    pos_cases = {
        -1: (100, 0), 0: (100, 0), 99: (100, 0), 100: (105, 100), 4195: (105, 100),
        4196: (110, 4196), 8999: (110, 4196), 9000: (200, 9000), 2**62: (200, 9000),
    }
    for target, want in pos_cases.items():
        assert idx.lookup_by_position(target) == want, target


def test_offset_entry_at_base(opath):
    idx = OffsetIndex(opath, 100, 1024)
    idx.append(100, 0)  # relative offset 0 is allowed for the first entry
    assert idx.lookup(100) == (100, 0)
    assert idx.lookup(99) == (100, 0)  # "none" happens to equal the base entry
    assert idx.entry(0) == (100, 0)


def test_time_lookup_empty(tpath):
    idx = TimeIndex(tpath, 100, 1024)
    for target in (-(2**63), -1, 0, 10**13, 2**63 - 1):
        assert idx.lookup(target) == (-1, 100)
    assert idx.last_entry == (-1, 100)


def test_time_lookup_boundaries(tpath):
    idx = TimeIndex(tpath, 100, 1024)
    entries = [(1000, 100), (2000, 150), (2500, 150), (9000, 400)]
    for t, o in entries:
        assert idx.maybe_append(t, o)
    assert idx.last_entry == (9000, 400)
    cases = {
        -(2**63): (-1, 100), -1: (-1, 100), 0: (-1, 100), 999: (-1, 100),
        1000: (1000, 100), 1001: (1000, 100), 1999: (1000, 100),
        2000: (2000, 150), 2499: (2000, 150), 2500: (2500, 150),
        8999: (2500, 150), 9000: (9000, 400), 9001: (9000, 400), 2**63 - 1: (9000, 400),
    }
    for target, want in cases.items():
        assert idx.lookup(target) == want, target


@pytest.mark.parametrize("n", [1, 2, OFFSET_WARM - 1, OFFSET_WARM, OFFSET_WARM + 1, OFFSET_WARM + 2, 3000])
def test_offset_lookup_warm_cold_boundary(opath, n):
    """Every entry and every gap, on both sides of Kafka's warm-section split."""
    base = 1000
    idx = OffsetIndex(opath, base, 8 * n)
    oracle = OffsetIndexOracle(base, n)
    for i in range(n):
        offset, position = base + 3 * i + 1, 7 * i
        idx.append(offset, position)
        oracle.append(offset, position)
    assert idx.is_full
    for target in range(base - 2, base + 3 * n + 3):
        assert idx.lookup(target) == oracle.lookup(target), target
    for target in range(-1, 7 * n + 2):
        assert idx.lookup_by_position(target) == oracle.lookup_by_position(target), target


@pytest.mark.parametrize("n", [1, TIME_WARM, TIME_WARM + 1, TIME_WARM + 2, 2500])
def test_time_lookup_warm_cold_boundary(tpath, n):
    base = 50
    idx = TimeIndex(tpath, base, 12 * n)
    oracle = TimeIndexOracle(base, n)
    for i in range(n):
        ts, offset = 10_000 + 5 * i, base + i // 2  # offsets repeat: allowed in the time index
        assert idx.maybe_append(ts, offset)
        oracle.maybe_append(ts, offset)
    assert idx.is_full
    for target in range(9_990, 10_000 + 5 * n + 3):
        assert idx.lookup(target) == oracle.lookup(target), target


# -- differential test against the oracle ------------------------------------------------------


@pytest.mark.parametrize("seed", range(8))
def test_offset_index_matches_oracle(tmp_path, seed):
    rng = random.Random(seed)
    base = rng.choice([0, 1, 12345, 2**40])
    max_entries = rng.choice([5, 700, 1500, 4000])
    path = str(tmp_path / "r.index")
    idx = OffsetIndex(path, base, max_entries * 8 + rng.randrange(8))
    oracle = OffsetIndexOracle(base, max_entries)
    next_offset, next_pos = base, 0
    for _ in range(3000):
        op = rng.random()
        if op < 0.55:
            # mostly valid appends, sometimes a rejected one
            if rng.random() < 0.9:
                next_offset += rng.randint(1, 50)
                next_pos += rng.randint(1, 5000)
                offset, position = next_offset, next_pos
            elif rng.random() < 0.5:
                bad = [base - 1, base + 2**31]
                if oracle.entries:
                    bad += [oracle.last_offset, oracle.last_offset - 1]
                offset, position = rng.choice(bad), next_pos + 1
            else:
                offset, position = next_offset + 1, rng.choice([-1, 2**31])
            want_err = None
            try:
                oracle.append(offset, position)
            except (IndexError, ValueError) as e:
                want_err = type(e)
            if want_err is None:
                idx.append(offset, position)
            else:
                with pytest.raises(want_err):
                    idx.append(offset, position)
        elif op < 0.85:
            target = rng.randint(base - 5, next_offset + 5)
            assert idx.lookup(target) == oracle.lookup(target)
            ptarget = rng.randint(-5, next_pos + 5)
            assert idx.lookup_by_position(ptarget) == oracle.lookup_by_position(ptarget)
        elif op < 0.93:
            target = rng.randint(base - 5, next_offset + 5)
            idx.truncate_to(target)
            oracle.truncate_to(target)
            next_offset, next_pos = oracle.last_offset, oracle.positions[-1] if oracle.positions else 0
        elif op < 0.96:
            n = rng.randint(0, oracle.entries)
            idx.truncate_entries(n)
            oracle.truncate_entries(n)
            next_offset, next_pos = oracle.last_offset, oracle.positions[-1] if oracle.positions else 0
        elif op < 0.98:
            # close (trim) and reopen writable: the file must carry every entry
            idx.close()
            assert file_bytes(path) == offset_index_bytes(base, oracle.all())
            idx = OffsetIndex(path, base, max_entries * 8)
        else:
            idx.sanity_check()
        assert idx.entries == oracle.entries
        assert idx.last_offset == oracle.last_offset
    assert [idx.entry(i) for i in range(idx.entries)] == oracle.all()
    arr = idx.array()
    assert [(base + int(o), int(p)) for o, p in arr] == oracle.all()
    idx.close()
    assert file_bytes(path) == offset_index_bytes(base, oracle.all())


@pytest.mark.parametrize("seed", range(8))
def test_time_index_matches_oracle(tmp_path, seed):
    rng = random.Random(seed)
    base = rng.choice([0, 77, 2**40])
    max_entries = rng.choice([5, 600, 1500])
    path = str(tmp_path / "r.timeindex")
    idx = TimeIndex(path, base, max_entries * 12 + rng.randrange(12))
    oracle = TimeIndexOracle(base, max_entries)
    ts, offset = rng.choice([-5, 0, 1_700_000_000_000]), base
    for _ in range(3000):
        op = rng.random()
        if op < 0.55:
            ts += rng.randint(-3, 20)  # sometimes older/equal: not appended
            offset += rng.choice([0, 0, 1, 7])
            t_off = offset if rng.random() < 0.95 else rng.choice([offset - 100, base - 1, base + 2**31])
            want_err = None
            try:
                want = oracle.maybe_append(ts, t_off)
            except (IndexError, ValueError) as e:
                want_err = type(e)
            if want_err is None:
                assert idx.maybe_append(ts, t_off) is want
            else:
                with pytest.raises(want_err):
                    idx.maybe_append(ts, t_off)
        elif op < 0.85:
            target = rng.randint(ts - 200, ts + 5)
            assert idx.lookup(target) == oracle.lookup(target)
        elif op < 0.93:
            target = rng.randint(base - 5, offset + 5)
            idx.truncate_to(target)
            oracle.truncate_to(target)
            ts, offset = oracle.last_entry[0], max(oracle.last_entry[1], base)
        elif op < 0.97:
            idx.close()
            assert file_bytes(path) == time_index_bytes(base, oracle.all())
            idx = TimeIndex(path, base, max_entries * 12)
        else:
            idx.sanity_check()
        assert idx.entries == oracle.entries
        assert idx.last_entry == oracle.last_entry
    assert [idx.entry(i) for i in range(idx.entries)] == oracle.all()
    idx.close()
    assert file_bytes(path) == time_index_bytes(base, oracle.all())


# -- append rules ------------------------------------------------------------------------------


def test_offset_append_rejections(opath):
    idx = OffsetIndex(opath, 100, 8 * 3)
    with pytest.raises(ValueError):
        idx.append(99, 0)  # below base
    with pytest.raises(ValueError):
        idx.append(100 + 2**31, 0)  # relative offset beyond int32
    with pytest.raises(ValueError):
        idx.append(2**70, 0)  # beyond int64 too: still "out of range"
    with pytest.raises(ValueError):
        idx.append(101, -1)
    with pytest.raises(ValueError):
        idx.append(101, 2**31)
    with pytest.raises(ValueError):
        idx.append(101, 2**70)
    with pytest.raises(TypeError):
        idx.append(101.0, 0)
    with pytest.raises(TypeError):
        idx.lookup(101.5)  # floats are not silently truncated
    with pytest.raises(TypeError):
        idx.lookup_by_position(1.5)
    assert idx.entries == 0
    idx.append(110, 10)
    with pytest.raises(ValueError):
        idx.append(110, 20)  # equal offset
    with pytest.raises(ValueError):
        idx.append(105, 20)  # going backwards
    idx.append(111, 10)  # positions are not required to increase (Kafka does not check)
    idx.append(100 + INT32_MAX, 2**31 - 1)
    assert idx.is_full
    with pytest.raises(IndexError):
        idx.append(100 + INT32_MAX + 1, 0)  # full is reported first, as in Kafka
    assert [idx.entry(i) for i in range(3)] == [(110, 10), (111, 10), (100 + INT32_MAX, INT32_MAX)]


def test_time_append_rules(tpath):
    idx = TimeIndex(tpath, 100, 12 * 3)
    assert not idx.maybe_append(-1, 100)  # not newer than the empty index's (-1, base)
    assert not idx.maybe_append(-7, 100)
    with pytest.raises(ValueError):
        idx.maybe_append(5, 99)  # below base
    with pytest.raises(ValueError):
        idx.maybe_append(5, 100 + 2**31)
    with pytest.raises(ValueError):
        idx.maybe_append(2**64, 100)
    with pytest.raises(TypeError):
        idx.maybe_append(5.5, 100)
    with pytest.raises(TypeError):
        idx.lookup(5.5)
    assert idx.maybe_append(0, 100)
    assert not idx.maybe_append(0, 105)  # equal timestamp
    assert not idx.maybe_append(-3, 50)  # older timestamp: ignored, not an error
    with pytest.raises(ValueError):
        idx.maybe_append(10, 99)  # newer timestamp, offset going backwards
    assert idx.maybe_append(10, 100)  # same offset, newer timestamp is fine
    assert idx.maybe_append(20, 130)
    assert idx.is_full
    assert not idx.maybe_append(20, 140)  # nothing to append: no error even when full
    with pytest.raises(IndexError):
        idx.maybe_append(21, 140)
    assert [idx.entry(i) for i in range(3)] == [(0, 100), (10, 100), (20, 130)]
    assert idx.entry(-1) == (20, 130)


@pytest.mark.parametrize("cls", [OffsetIndex, TimeIndex])
def test_entry_out_of_range(tmp_path, cls):
    idx = cls(str(tmp_path / "x"), 0, 1024)
    with pytest.raises(IndexError):
        idx.entry(0)
    with pytest.raises(IndexError):
        idx.entry(-1)


# -- truncation --------------------------------------------------------------------------------


def test_offset_truncate_to(opath):
    idx = OffsetIndex(opath, 100, 1024)
    entries = [(100, 0), (110, 50), (120, 90), (130, 200)]

    def refill():
        idx.reset()
        for o, p in entries:
            idx.append(o, p)

    refill()
    idx.truncate_to(120)  # exact hit: the entry itself goes
    assert idx.entries == 2 and idx.last_offset == 110
    assert idx.lookup(125) == (110, 50)
    refill()
    idx.truncate_to(125)  # between entries: keeps the lower
    assert idx.entries == 3 and idx.last_offset == 120
    refill()
    idx.truncate_to(131)  # beyond last: no-op
    assert idx.entries == 4
    refill()
    idx.truncate_to(100)  # at base
    assert idx.entries == 0 and idx.last_offset == 100
    refill()
    idx.truncate_to(-(2**63))
    assert idx.entries == 0
    refill()
    idx.truncate_to(110)
    idx.append(111, 60)  # appending after truncation continues from the new tail
    assert [idx.entry(i) for i in range(idx.entries)] == [(100, 0), (111, 60)]
    idx.close()
    assert file_bytes(opath) == offset_index_bytes(100, [(100, 0), (111, 60)])


def test_time_truncate_to_drops_every_duplicate(tpath):
    idx = TimeIndex(tpath, 100, 1024)
    for t, o in [(10, 101), (20, 105), (30, 105), (40, 110)]:
        idx.maybe_append(t, o)
    idx.truncate_to(106)
    assert idx.entries == 3 and idx.last_entry == (30, 105)
    idx.truncate_to(105)  # both entries at offset 105 go, not just the last one
    assert idx.entries == 1 and idx.last_entry == (10, 101)
    assert idx.lookup(35) == (10, 101)
    idx.truncate_to(50)
    assert idx.entries == 0 and idx.last_entry == (-1, 100)
    assert idx.maybe_append(5, 100)  # timestamps restart from the truncated tail


@pytest.mark.parametrize("cls", [OffsetIndex, TimeIndex])
def test_truncate_entries_and_reset(tmp_path, cls):
    path = str(tmp_path / "x")
    idx = cls(path, 0, cls.entry_size * 10)
    for i in range(1, 6):
        add(idx, i, i)
    idx.truncate_entries(5)
    assert idx.entries == 5
    idx.truncate_entries(2)
    assert idx.entries == 2
    with pytest.raises(ValueError):
        idx.truncate_entries(3)
    with pytest.raises(ValueError):
        idx.truncate_entries(-1)
    idx.trim()
    assert os.path.getsize(path) == 2 * cls.entry_size and idx.is_full
    idx.reset()  # back to the size given at open, empty
    assert idx.entries == 0 and idx.max_entries == 10
    assert os.path.getsize(path) == 10 * cls.entry_size


# -- files: trim, reopen, resize ---------------------------------------------------------------


def test_close_trims_and_read_only_reopen_keeps_entries(opath):
    idx = OffsetIndex(opath, 100, 4096)
    assert os.path.getsize(opath) == 4096
    for i in range(10):
        idx.append(100 + 10 * i, 4096 * i)
    idx.close()
    assert os.path.getsize(opath) == 80
    ro = OffsetIndex(opath, 100, 4096, writable=False)
    assert not ro.writable
    assert ro.entries == ro.max_entries == 10 and ro.is_full
    assert os.path.getsize(opath) == 80  # read-only never touches the file
    assert ro.lookup(155) == (150, 4096 * 5)
    ro.sanity_check()
    for mutate in (lambda: ro.append(500, 1), ro.reset, lambda: ro.truncate_to(120),
                   lambda: ro.truncate_entries(0), lambda: ro.resize(4096)):
        with pytest.raises(io.UnsupportedOperation):
            mutate()
    ro.trim()
    ro.flush()
    ro.close()
    assert file_bytes(opath) == offset_index_bytes(100, [(100 + 10 * i, 4096 * i) for i in range(10)])


def test_time_index_read_only_reopen(tpath):
    with TimeIndex(tpath, 100, 4096) as idx:
        for i in range(5):
            idx.maybe_append(1000 + i, 100 + i)
    with TimeIndex(tpath, 100, writable=False) as ro:
        assert ro.entries == 5 and ro.last_entry == (1004, 104)
        assert ro.lookup(1002) == (1002, 102)
        with pytest.raises(io.UnsupportedOperation):
            ro.maybe_append(2000, 200)


def test_read_only_open_of_missing_file_is_empty(opath):
    # Kafka creates the file even for a read-only index; a missing index is an empty one.
    ro = OffsetIndex(opath, 100, writable=False)
    assert ro.entries == 0 and ro.lookup(500) == (100, 0)
    assert os.path.getsize(opath) == 0
    ro.close()


@pytest.mark.parametrize("cls", [OffsetIndex, TimeIndex])
def test_writable_reopen_extends_and_keeps_entries(tmp_path, cls):
    path = str(tmp_path / "x")
    esize = cls.entry_size
    idx = cls(path, 100, esize * 50)
    for i in range(1, 8):
        add(idx, 100 + i, i * 10)
    before = [idx.entry(i) for i in range(7)]
    idx.close()
    trimmed = file_bytes(path)
    assert len(trimmed) == 7 * esize

    idx = cls(path, 100, esize * 50 + 3)
    assert os.path.getsize(path) == esize * 50
    assert idx.entries == 7 and idx.max_entries == 50
    assert [idx.entry(i) for i in range(7)] == before
    assert file_bytes(path)[: 7 * esize] == trimmed
    add(idx, 200, 1000)
    assert idx.entries == 8
    idx.close()
    assert file_bytes(path)[: 7 * esize] == trimmed and os.path.getsize(path) == 8 * esize


def test_writable_reopen_with_smaller_max_keeps_entries(opath):
    with OffsetIndex(opath, 0, 800) as idx:
        for i in range(20):
            idx.append(i, i)
    with OffsetIndex(opath, 0, 80) as idx:  # max shrank below the entries: none are cut
        assert idx.entries == 20 and idx.is_full
        assert idx.entry(19) == (19, 19)


def test_resize(opath):
    idx = OffsetIndex(opath, 0, 80)
    for i in range(5):
        idx.append(i, i)
    idx.trim()
    assert idx.is_full and idx.max_entries == 5 and os.path.getsize(opath) == 40
    with pytest.raises(IndexError):
        idx.append(5, 5)
    idx.resize(8 * 20 + 7)  # rounded down to whole entries
    assert idx.max_entries == 20 and os.path.getsize(opath) == 160
    idx.append(5, 5)
    assert idx.lookup(100) == (5, 5)
    idx.resize(48)  # exactly the entries
    assert idx.is_full and os.path.getsize(opath) == 48
    with pytest.raises(ValueError):
        idx.resize(47)  # would cut an entry
    with pytest.raises(ValueError):
        idx.resize(-8)
    assert [idx.entry(i) for i in range(6)] == [(i, i) for i in range(6)]
    idx.truncate_entries(0)
    idx.resize(0)  # an empty index may map nothing at all
    assert idx.max_entries == 0 and idx.is_full and os.path.getsize(opath) == 0
    assert idx.lookup(3) == (0, 0)
    idx.resize(16)
    idx.append(9, 9)
    idx.close()
    assert file_bytes(opath) == offset_index_bytes(0, [(9, 9)])


def test_time_resize(tpath):
    idx = TimeIndex(tpath, 0, 12 * 4)
    for i in range(4):
        idx.maybe_append(i, i)
    assert idx.is_full
    idx.resize(12 * 8 + 11)
    assert idx.max_entries == 8 and os.path.getsize(tpath) == 96
    assert idx.maybe_append(10, 10)
    assert idx.lookup(9) == (3, 3)
    idx.close()
    assert file_bytes(tpath) == time_index_bytes(0, [(0, 0), (1, 1), (2, 2), (3, 3), (10, 10)])


def test_flush_writes_through(opath):
    idx = OffsetIndex(opath, 100, 64)
    idx.append(101, 7)
    idx.flush()
    data = file_bytes(opath)
    assert len(data) == 64 and data[:8] == offset_index_bytes(100, [(101, 7)])
    idx.close()


# -- sanity check ------------------------------------------------------------------------------


def test_sanity_check_passes_on_good_indexes(opath, tpath):
    idx = OffsetIndex(opath, 100, 1024)
    idx.sanity_check()  # empty, preallocated
    idx.append(100, 0)
    idx.append(101, 10)
    idx.sanity_check()
    idx.close()
    t = TimeIndex(tpath, 100, 1024)
    t.maybe_append(1, 100)
    t.maybe_append(2, 100)  # repeated offsets are legal in a time index
    t.sanity_check()
    t.close()


def _write(path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def test_sanity_check_decreasing_offsets(opath):
    _write(opath, offset_index_bytes(100, [(110, 0), (105, 10)]))
    for writable in (False, True):
        idx = OffsetIndex(opath, 100, 1024, writable=writable)
        assert idx.entries == 2
        with pytest.raises(CorruptIndexError):
            idx.sanity_check()
        idx.close()


def test_sanity_check_equal_offsets(opath):
    _write(opath, offset_index_bytes(100, [(110, 0), (110, 10)]))
    with OffsetIndex(opath, 100, writable=False) as idx, pytest.raises(CorruptIndexError):
        idx.sanity_check()


def test_sanity_check_offset_below_base(opath):
    _write(opath, struct.pack(">iI", -1, 0))  # last offset < base offset
    with OffsetIndex(opath, 100, writable=False) as idx, pytest.raises(CorruptIndexError):
        idx.sanity_check()


def test_sanity_check_partial_entry(opath, tpath):
    _write(opath, offset_index_bytes(100, [(101, 0)]) + b"\x00\x00\x00")
    with OffsetIndex(opath, 100, writable=False) as idx:
        assert idx.entries == 1 and idx.lookup(200) == (101, 0)  # Kafka's length // size rule
        with pytest.raises(CorruptIndexError):
            idx.sanity_check()
    _write(tpath, time_index_bytes(100, [(5, 101)]) + b"\x00" * 11)
    with TimeIndex(tpath, 100, writable=False) as idx:
        assert idx.entries == 1
        with pytest.raises(CorruptIndexError):
            idx.sanity_check()
    assert issubclass(CorruptIndexError, ValueError)


def test_sanity_check_untrimmed_after_crash(opath):
    # A writer that died before close(): preallocated zeros count as entries and are caught.
    _write(opath, offset_index_bytes(100, [(101, 0), (150, 4096)]) + b"\x00" * 80)
    with OffsetIndex(opath, 100, 96) as idx:
        assert idx.entries == 12 and idx.is_full
        with pytest.raises(CorruptIndexError):
            idx.sanity_check()
        idx.reset()  # what recovery does before rebuilding
        idx.sanity_check()
        assert idx.entries == 0 and idx.max_entries == 12


def test_time_sanity_check_corruptions(tpath):
    bad = [
        [(10, 101), (10, 102)],  # timestamps not increasing
        [(10, 101), (9, 102)],
        [(10, 105), (11, 104)],  # offsets going backwards
        [(10, 99)],  # below base
    ]
    for entries in bad:
        _write(tpath, time_index_bytes(100, entries))
        with TimeIndex(tpath, 100, writable=False) as idx, pytest.raises(CorruptIndexError):
            idx.sanity_check()
    _write(tpath, time_index_bytes(100, [(10, 101), (11, 101), (12, 107)]))
    with TimeIndex(tpath, 100, writable=False) as idx:
        idx.sanity_check()


# -- numpy view and lifecycle ------------------------------------------------------------------


def test_array_views(opath, tpath):
    idx = OffsetIndex(opath, 100, 1024)
    assert idx.array().shape == (0,)
    idx.append(101, 0)
    idx.append(150, 4096)
    arr = idx.array()
    assert arr.dtype == np.dtype([("offset", ">u4"), ("position", ">u4")])
    assert arr["offset"].tolist() == [1, 50] and arr["position"].tolist() == [0, 4096]
    assert not arr.flags.writeable
    with pytest.raises(ValueError):
        arr["offset"][0] = 5
    idx.close()
    # The view keeps its mapping alive: still readable after close (the entries stay in the file).
    assert arr["offset"].tolist() == [1, 50]

    t = TimeIndex(tpath, 100, 1024)
    t.maybe_append(1_700_000_000_000, 101)
    tarr = t.array()
    assert tarr.dtype == np.dtype([("timestamp", ">i8"), ("offset", ">u4")])
    assert tarr.tolist() == [(1_700_000_000_000, 1)]
    t.resize(2048)  # remapping leaves the old view valid
    assert tarr.tolist() == [(1_700_000_000_000, 1)]
    t.close()


@pytest.mark.parametrize("cls", [OffsetIndex, TimeIndex])
def test_closed_index_is_unusable(tmp_path, cls):
    idx = cls(str(tmp_path / "x"), 0, 1024)
    idx.close()
    idx.close()  # idempotent
    assert idx.closed
    for call in (lambda: idx.lookup(0), lambda: idx.entries, lambda: idx.entry(0), idx.flush,
                 idx.trim, idx.sanity_check, idx.array, idx.reset, lambda: idx.truncate_to(0)):
        with pytest.raises(ValueError):
            call()
    assert "closed" in repr(idx)


def test_path_attributes(opath):
    idx = OffsetIndex(opath, 100)
    assert idx.path == opath and idx.base_offset == 100
    with pytest.raises(AttributeError):
        idx.base_offset = 5
    idx.close()


def test_an_open_index_holds_no_descriptor(tmp_path):
    """As Kafka's AbstractIndex: the mapping stays and the descriptor goes, so a broker hosting thousands of
    partitions holds one descriptor per segment (its .log), not three. Appends past a reservation step, a
    resize and the trim on close open the file again for that call only."""
    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    before = open_fds()
    indexes = [cls(str(tmp_path / f"{n:020d}{suffix}"), n, 1 << 20)
               for n in range(50) for cls, suffix in ((OffsetIndex, ".index"), (TimeIndex, ".timeindex"))]
    assert open_fds() == before
    idx = indexes[0]
    for i in range(20_000):  # 160 KB of entries: several 64 KiB reservations
        idx.append(i, i * 10)
    idx.resize(1 << 21)
    assert open_fds() == before
    for index in indexes:
        index.close()
    assert open_fds() == before
    assert os.path.getsize(tmp_path / f"{0:020d}.index") == 20_000 * 8  # trimmed to its entries
    assert os.path.getsize(tmp_path / f"{1:020d}.index") == 0


def test_close_trims_the_file_under_the_name_it_was_given_and_skips_one_gone(tmp_path):
    """A segment marked deleted renames its files and tells its indexes the new names (they reopen by name to
    trim); a file removed behind an index (its directory deleted) is left alone, and never created again."""
    idx = OffsetIndex(str(tmp_path / "00000000000000000000.index"), 0, 4096)
    idx.append(1, 10)
    os.rename(tmp_path / "00000000000000000000.index", tmp_path / "00000000000000000000.index.deleted")
    idx.renamed(tmp_path / "00000000000000000000.index.deleted")
    idx.close()
    assert os.path.getsize(tmp_path / "00000000000000000000.index.deleted") == 8
    gone = OffsetIndex(str(tmp_path / "00000000000000000005.index"), 5, 4096)
    os.unlink(tmp_path / "00000000000000000005.index")
    gone.close()
    assert not (tmp_path / "00000000000000000005.index").exists()
    assert gone.closed
