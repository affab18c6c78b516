"""Recovery of a mixed-format log (a topic moved between message.format.version 2.8, 0.10.0 and
0.9.0: v2 batches, magic-1 and magic-0 messages, plain and in compressed wrappers, over several
segments) from damage at random byte positions, at the log layer: a write cut short inside an
entry, or a flipped bit its CRC (CRC-32C for v2, CRC-32 for magic 0/1) must catch. The log must
keep exactly the whole entries before the damage, byte for byte, find each kept offset and
timestamp through the rebuilt indexes, take appends at the right offset, and recover to the same
state a second time."""
from __future__ import annotations

import dataclasses
import random
import shutil
from dataclasses import dataclass

import pytest

from kbroker._core import records
from kbroker.log import LogConfig, PartitionLog, legacy
from kbroker.log.compression import GZIP, LZ4, NONE, SNAPPY

from ..log.helpers import TP, read_all

TRIALS = 30
FORMATS = ("2.8", "0.10.0", "0.9.0")
T0 = 1_700_000_000_000


@dataclass(frozen=True)
class Written:
    segment: int      # base offset of its segment
    position: int     # in the segment file
    size: int
    first: int
    last: int
    magic: int


def _batch(rng: random.Random, i: int) -> bytearray:
    from kbroker.log import batches

    n = rng.randint(1, 5)
    codec = rng.choice((NONE, NONE, GZIP, SNAPPY, LZ4))
    return batches.build_batch([(b"k%d-%d" % (i, j), rng.randbytes(rng.randint(5, 200)), T0 + 100 * i + j)
                                for j in range(n)], codec=codec)


def _write_log(root, appender) -> tuple[LogConfig, list[Written], bytes]:
    config = LogConfig(segment_bytes=5000, index_interval_bytes=300, segment_index_bytes=4096)
    plog = PartitionLog(root / str(TP), TP, config, appender)
    rng = random.Random(11)
    for i in range(70):
        if i % 10 == 0:
            plog.config = dataclasses.replace(plog.config, message_format_version=FORMATS[(i // 10) % 3])
        plog.append(_batch(rng, i))
    written, first = [], 0  # every stored entry: an uncompressed legacy append is one entry per message
    for segment in plog.segments:
        headers, _, _ = records.scan_batches(segment.log_path.read_bytes())
        for h in headers:
            written.append(Written(segment.base_offset, h.position, h.size, first, h.last_offset, h.magic))
            first = h.last_offset + 1
    data = read_all(plog)
    plog.close()
    assert len({w.segment for w in written}) >= 4 and {w.magic for w in written} == {0, 1, 2}
    assert first == plog.log_end_offset
    return config, written, data


@pytest.fixture
def pristine(tmp_path, appender):
    root = tmp_path / "pristine"
    return (root, *_write_log(root, appender))


@pytest.mark.parametrize("seed", range(TRIALS))
def test_damage_anywhere_in_a_mixed_log_keeps_exactly_what_precedes(pristine, tmp_path, appender, seed):
    root, config, written, data = pristine
    rng = random.Random(seed)
    trial = tmp_path / f"trial-{seed}"
    shutil.copytree(root, trial)
    hit = rng.choice(written)
    path = trial / str(TP) / f"{hit.segment:020d}.log"
    if rng.random() < 0.5:  # a write cut short inside the entry
        with open(path, "r+b") as f:
            f.truncate(hit.position + rng.randint(1, hit.size - 1))
    else:  # a flipped bit in the bytes its CRC covers
        covered_from = 21 if hit.magic == 2 else 16
        at = hit.position + rng.randint(covered_from, hit.size - 1)
        with open(path, "r+b") as f:
            f.seek(at)
            byte = f.read(1)[0]
            f.seek(at)
            f.write(bytes([byte ^ (1 << rng.randrange(8))]))
    kept = [w for w in written if w.first < hit.first]
    expected = data[:sum(w.size for w in kept)]

    for attempt in range(2):  # a second recovery of the recovered log changes nothing
        plog = PartitionLog(trial / str(TP), TP, config, appender, recover=True)
        try:
            assert plog.log_end_offset == hit.first
            assert read_all(plog) == expected
            for w in rng.sample(kept, min(5, len(kept))):
                found = plog.read(w.first, 1)
                assert found is not None and found.position == w.position  # the index leads to its entry
                assert w.first in {r.offset for r in legacy.read_batches(plog.read_bytes(w.first, 1 << 16))}
            if kept:
                stored = list(legacy.read_batches(expected))
                timed = [r for r in stored if r.timestamp >= 0]
                if timed:
                    target = rng.choice(timed)
                    first = next(r for r in stored if r.timestamp >= target.timestamp)
                    assert plog.offset_for_timestamp(target.timestamp) == (first.offset, first.timestamp)
            if attempt:
                result = plog.append(_batch(rng, 99))
                assert result.first_offset == hit.first
        finally:
            plog.close()
