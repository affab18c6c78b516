"""Log compaction: the cleaner on real logs (both appender backends), its swap and crash recovery."""
from __future__ import annotations

import os
import time

import pytest

from kbroker.log import LogConfig, LogManager, PartitionLog, TopicPartition, clean_log
from kbroker.log.checkpoint import CLEANER_OFFSET, read_checkpoint
from kbroker.log.compression import decompress_records
from kbroker.log.names import CLEANED_SUFFIX, SWAP_SUFFIX
from tests.oracles.batch_oracle import build_batch, build_control_batch, parse_batches, parse_records

from .helpers import TP, read_all

COMPACT = dict(cleanup_policy="compact", segment_bytes=1500, index_interval_bytes=200)


def _compressor(codec: int):
    import cramjam
    import lz4.frame
    import zstandard

    return {2: lambda b: bytes(cramjam.snappy.compress_raw(b)), 3: lz4.frame.compress,
            4: zstandard.ZstdCompressor().compress}[codec]


def batch_of(recs, codec: int = 0, ts: int = 1_000, **kw) -> bytearray:
    rows = [(k, v, [], ts + i) for i, (k, v) in enumerate(recs)]
    if codec in (0, 1):
        return bytearray(build_batch(rows, compression=codec, **kw))
    section = _compressor(codec)(build_batch(rows)[61:])
    return bytearray(build_batch(rows, compression=codec, records_section=section, **kw))


class Model:
    """What was appended, by offset: the truth a compacted log is checked against."""

    def __init__(self) -> None:
        self.by_offset: dict[int, tuple[bytes | None, bytes | None]] = {}

    def produce(self, plog: PartitionLog, recs, codec: int = 0, ts: int = 1_000, **kw) -> int:
        result = plog.append(batch_of(recs, codec, ts, **kw))
        for i, (k, v) in enumerate(recs):
            self.by_offset[result.first_offset + i] = (k, v)
        plog.update_high_watermark(plog.log_end_offset)
        return result.first_offset

    def latest(self) -> dict[bytes, tuple[int, bytes | None]]:
        out = {}
        for offset in sorted(self.by_offset):
            k, v = self.by_offset[offset]
            if k is not None:
                out[k] = (offset, v)
        return out


def decode(data: bytes) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    for batch in parse_batches(data):
        assert batch["crc_valid"]
        recs = batch["records"]
        if recs is None:
            start = batch["position"]
            section = decompress_records(batch["compression"], data[start + 61:start + batch["size"]])
            recs = parse_records(section, batch["record_count"], batch["base_offset"], batch["base_timestamp"])
        out += [(r["offset"], r["key"], r["value"]) for r in recs]
    return out


def check(plog: PartitionLog, model: Model,
          tombstones_gone: bool = False) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every stored record is the one appended at its offset; reading from the start gives the
    latest value of every key (tombstones dropped or kept)."""
    stored = decode(read_all(plog, 0))
    offsets = [o for o, _, _ in stored]
    assert offsets == sorted(set(offsets))
    for offset, k, v in stored:
        assert model.by_offset[offset] == (k, v), offset
    seen = {}
    for offset, k, v in stored:
        seen[k] = (offset, v)
    want = model.latest()
    if tombstones_gone:
        want = {k: ov for k, ov in want.items() if ov[1] is not None}
        assert all(v is not None for _, v in seen.values())
    assert seen == want
    return stored


def updates(plog: PartitionLog, model: Model, keys: int, rounds: int, per_batch: int = 1, codec: int = 0,
            tag: str = "") -> None:
    pending = []
    for r in range(rounds):
        for k in range(keys):
            pending.append((b"key-%d" % k, b"%s value %d of key %d " % (tag.encode(), r, k) + b"x" * 40))
            if len(pending) == per_batch:
                model.produce(plog, pending, codec)
                pending = []
    if pending:
        model.produce(plog, pending, codec)


def open_compacted(tmp_path, appender, **over) -> PartitionLog:
    return PartitionLog(tmp_path / str(TP), TP, LogConfig(**{**COMPACT, **over}), appender)


def reopen(plog: PartitionLog, recover: bool = True, **over) -> PartitionLog:
    plog.close()
    return PartitionLog(plog.directory, TP, plog.config if not over else LogConfig(**{**COMPACT, **over}),
                        plog._appender, recover=recover, high_watermark=plog.high_watermark,
                        log_start_offset=plog.log_start_offset)


def files(plog: PartitionLog) -> list[str]:
    return sorted(os.listdir(plog.directory))


# -- cleaning ------------------------------------------------------------------------------------

def test_many_updates_shrink_to_one_record_per_key_plus_the_head(tmp_path, appender):
    plog = open_compacted(tmp_path, appender)
    model = Model()
    updates(plog, model, keys=10, rounds=30)
    before_size, before_segments = plog.size_bytes, len(plog.segments)
    active_base = plog.active.base_offset
    checkpoint, stats = clean_log(plog)
    assert checkpoint == active_base
    assert stats.records_removed > 0 and stats.segments_read == before_segments - 1
    stored = check(plog, model)
    cleaned = [o for o, _, _ in stored if o < active_base]
    assert len(cleaned) <= 10  # one per key below the head
    assert len({model.by_offset[o][0] for o in cleaned}) == len(cleaned)
    assert plog.size_bytes < before_size / 3
    # Kafka groups by the sizes before cleaning: full segments shrink in place on the first pass,
    # the small results are merged on the next.
    assert len(plog.segments) == before_segments
    model.produce(plog, [(b"key-0", b"last")])
    plog.roll()
    checkpoint, _ = clean_log(plog, checkpoint, force=True)
    assert len(plog.segments) <= 3
    stored = check(plog, model)
    assert not [f for f in files(plog) if f.endswith((CLEANED_SUFFIX, SWAP_SUFFIX))]
    # A consumer reads on from any original offset and lands on the next surviving record.
    first_after = min(o for o, _, _ in stored if o >= active_base)
    assert decode(plog.read_bytes(active_base, 1 << 20))[0][0] == first_after
    # Restart, with and without recovery: the same records.
    plog = reopen(plog)
    assert check(plog, model) == stored
    plog = reopen(plog, recover=False)
    assert check(plog, model) == stored
    plog.close()


def test_cleaning_twice_and_appending_in_between(tmp_path, appender):
    plog = open_compacted(tmp_path, appender)
    model = Model()
    updates(plog, model, keys=8, rounds=10, per_batch=3)
    first, _ = clean_log(plog)
    updates(plog, model, keys=12, rounds=10, per_batch=3, tag="b")
    second, stats = clean_log(plog, first)
    assert second > first and stats.records_removed > 0
    check(plog, model)
    nothing, _ = clean_log(plog, second)  # nothing dirty since
    assert nothing is None
    plog.close()


def test_active_segment_and_high_watermark_bound_cleaning(tmp_path, appender):
    plog = open_compacted(tmp_path, appender)
    model = Model()
    updates(plog, model, keys=5, rounds=20)
    active = plog.active
    active_bytes = open(active.log_path, "rb").read()
    bases = [s.base_offset for s in plog.segments]
    plog.high_watermark = bases[3] + 1  # inside the 4th segment: only the first 3 are below it
    checkpoint, stats = clean_log(plog)
    assert checkpoint == bases[3]
    assert stats.segments_read == 3
    assert plog.active is active and open(active.log_path, "rb").read() == active_bytes
    assert [s.base_offset for s in plog.segments][-len(bases) + 3:] == bases[3:]
    check(plog, model)
    plog.close()


def test_dirty_ratio_decides_and_checkpoint_marks_the_clean_part(tmp_path, appender):
    plog = open_compacted(tmp_path, appender, min_cleanable_dirty_ratio=0.9)
    model = Model()
    updates(plog, model, keys=5, rounds=20)
    checkpoint, _ = clean_log(plog)
    assert checkpoint is not None
    updates(plog, model, keys=5, rounds=2, tag="b")  # a little dirt: ratio far below 0.9
    plog.roll()
    assert clean_log(plog, checkpoint)[0] is None
    assert clean_log(plog, checkpoint, force=True)[0] is not None
    check(plog, model)
    plog.close()


def test_tombstones_survive_until_delete_retention_then_vanish(tmp_path, appender):
    plog = open_compacted(tmp_path, appender, delete_retention_ms=60_000)
    model = Model()
    updates(plog, model, keys=6, rounds=5)
    model.produce(plog, [(b"key-1", None), (b"key-4", None)])
    updates(plog, model, keys=6, rounds=1, tag="after")  # key-1 and key-4 come back later...
    model.produce(plog, [(b"key-1", None), (b"key-4", None)])  # ...and are deleted again
    for k in range(20):  # other keys push the tombstones out of the active segment
        model.produce(plog, [(b"other-%d" % k, b"o" * 60)])
    plog.roll()
    model.produce(plog, [(b"head", b"h")])
    checkpoint, _ = clean_log(plog)
    stored = check(plog, model)
    tombstones = [(o, k) for o, k, v in stored if v is None]
    assert sorted(k for _, k in tombstones) == [b"key-1", b"key-4"]  # only the latest ones, kept
    # Not yet: a second pass, but the tombstones' segment is newer than the horizon.
    model.produce(plog, [(b"other-0", b"again")])
    plog.roll()
    checkpoint, _ = clean_log(plog, checkpoint, force=True)
    assert sorted(k for _, k, v in check(plog, model) if v is None) == [b"key-1", b"key-4"]
    # Age every segment holding a tombstone past delete.retention.ms relative to the last clean one.
    old = time.time() - 3600
    for segment in plog.segments[:-1]:
        if any(v is None for _, _, v in decode(segment.read(segment.base_offset, 1 << 30).read())):
            os.utime(segment.log_path, (old, old))
    model.produce(plog, [(b"other-1", b"again")])
    plog.roll()
    clean_log(plog, checkpoint, force=True)
    stored = check(plog, model, tombstones_gone=True)
    assert not [k for _, k, v in stored if k in (b"key-1", b"key-4")]
    plog = reopen(plog)
    check(plog, model, tombstones_gone=True)
    plog.close()


def test_min_compaction_lag_keeps_recent_records(tmp_path, appender):
    now = 10_000_000
    plog = PartitionLog(tmp_path / str(TP), TP, LogConfig(**COMPACT, min_compaction_lag_ms=60_000), appender,
                        clock=lambda: now)
    model = Model()
    for r in range(10):  # old records: timestamps far in the past
        for k in range(4):
            model.produce(plog, [(b"key-%d" % k, b"old %d " % r + b"x" * 60)], ts=1_000)
    recent_from = plog.log_end_offset
    for r in range(10):  # recent ones: within the lag
        for k in range(4):
            model.produce(plog, [(b"key-%d" % k, b"new %d " % r + b"x" * 60)], ts=now - 1_000)
    plog.roll()
    model.produce(plog, [(b"head", b"h")])
    checkpoint, _ = clean_log(plog, now=now)
    stored = check(plog, model)
    first_recent_segment = max(s.base_offset for s in plog.segments if s.base_offset <= recent_from)
    assert checkpoint <= first_recent_segment
    # Every recent record is still there, the superseded old ones below are gone.
    kept = {o for o, _, _ in stored}
    assert all(o in kept for o in model.by_offset if o >= first_recent_segment)
    assert len([o for o in kept if o < checkpoint]) <= 4
    # Once the lag passed, the rest is cleaned too.
    now += 120_000
    assert clean_log(plog, checkpoint, now=now, force=True)[0] == plog.active.base_offset
    stored = check(plog, model)
    assert len([o for o, _, _ in stored if o < plog.active.base_offset]) == 4
    plog.close()


@pytest.mark.parametrize("codec", [1, 2, 3, 4], ids=["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_are_cleaned_and_keep_their_codec_and_offsets(tmp_path, appender, codec):
    plog = open_compacted(tmp_path, appender, segment_bytes=4000)
    model = Model()
    for r in range(12):  # batches of 5 records where keys repeat inside and across batches
        model.produce(plog, [(b"key-%d" % ((r * 5 + i) % 7), b"round %d rec %d " % (r, i) + b"z" * 50)
                             for i in range(5)], codec)
    plog.roll()
    model.produce(plog, [(b"head", b"h")], codec)
    before = {b["base_offset"]: b for b in parse_batches(read_all(plog, 0))}
    checkpoint, stats = clean_log(plog)
    assert stats.records_removed > 0
    check(plog, model)
    for batch in parse_batches(read_all(plog, 0)):
        original = before[batch["base_offset"]]
        assert batch["compression"] == codec
        assert batch["last_offset_delta"] == original["last_offset_delta"]
        assert batch["record_count"] <= original["record_count"]
    plog = reopen(plog)
    check(plog, model)
    plog.close()


def test_keyless_records_are_dropped_control_batches_and_last_producer_batches_kept(tmp_path, appender):
    plog = open_compacted(tmp_path, appender)
    offset = 0
    stored_batches = []

    def follow(batch: bytes) -> None:
        nonlocal offset
        plog.append_as_follower(batch)
        stored_batches.append(bytes(batch))
        offset = plog.log_end_offset

    # producer 7 writes k1 twice (sequences 0..1 and 2..3), then k1 is overwritten by others
    follow(build_batch([(b"k1", b"p7-a", [], 1), (b"k2", b"p7-b", [], 2)], base_offset=0,
                       producer_id=7, producer_epoch=0, base_sequence=0))
    follow(build_batch([(b"k1", b"p7-c", [], 3), (b"k2", b"p7-d", [], 4)], base_offset=2,
                       producer_id=7, producer_epoch=0, base_sequence=2))
    follow(build_batch([(None, b"no key", [], 5)], base_offset=4))
    follow(build_control_batch(True, producer_id=9, producer_epoch=0, base_offset=5))
    follow(build_batch([(b"k1", b"final-1", [], 6), (b"k2", b"final-2", [], 7)], base_offset=6))
    plog.roll()
    follow(build_batch([(b"head", b"h", [], 8)], base_offset=8))
    plog.update_high_watermark(plog.log_end_offset)
    clean_log(plog)
    batches = parse_batches(read_all(plog, 0))
    summary = [(b["base_offset"], b["last_offset_delta"], b["record_count"], b["producer_id"], b["is_control"])
               for b in batches]
    assert summary == [
        (2, 1, 0, 7, False),   # producer 7's last batch, emptied but kept: its sequence survives
        (5, 0, 1, 9, True),    # the transaction marker
        (6, 1, 2, -1, False),
        (8, 0, 1, -1, False),
    ]
    assert batches[0]["base_sequence"] == 2
    assert [r["value"] for r in batches[2]["records"]] == [b"final-1", b"final-2"]
    plog = reopen(plog)
    assert [b["base_offset"] for b in parse_batches(read_all(plog, 0))] == [2, 5, 6, 8]
    assert plog.log_end_offset == 9
    plog.close()


def test_compact_only_ignores_retention_compact_delete_applies_it(tmp_path, appender):
    now = 100_000_000
    for policy, survives in (("compact", True), ("compact,delete", False)):
        path = tmp_path / policy
        plog = PartitionLog(path / str(TP), TP, LogConfig(**{**COMPACT, "cleanup_policy": policy}, retention_ms=1000),
                            appender, clock=lambda: now)
        model = Model()
        updates(plog, model, keys=5, rounds=10)
        segments = len(plog.segments)
        deleted = plog.delete_old_segments(now)
        if survives:
            assert deleted == 0 and len(plog.segments) == segments
            check(plog, model)
        else:
            assert deleted == segments and plog.log_start_offset == plog.log_end_offset
        clean_log(plog, now=now)
        plog.close()


# -- the swap and crash recovery -----------------------------------------------------------------

class Crash(Exception):
    pass


STEPS = ["cleaned", "swap-partial", "swap", "deleted-partial", "deleted", "final-partial", "final"]


def _kill(plog: PartitionLog) -> None:
    """What kill -9 leaves: file descriptors gone, nothing renamed, deleted or trimmed on purpose."""
    for segment in plog.segments + [s for _, s in plog._pending_deletes]:
        if segment.fd >= 0:
            os.close(segment.fd)
            segment.fd = -1


@pytest.mark.parametrize("recover", [True, False], ids=["unclean", "clean-flag"])
@pytest.mark.parametrize("step", STEPS)
def test_a_crash_at_each_step_of_the_swap_loses_nothing(tmp_path, appender, step, recover):
    plog = open_compacted(tmp_path, appender, segment_bytes=2500)
    model = Model()
    updates(plog, model, keys=10, rounds=25, per_batch=2)
    plog.flush()

    def fault(name: str) -> None:
        if name == step:
            raise Crash(name)

    with pytest.raises(Crash):
        clean_log(plog, fault=fault)
    leftovers = files(plog)
    if step == "swap":
        assert any(f.endswith(".log" + SWAP_SUFFIX) for f in leftovers)
    if step == "cleaned":
        assert any(f.endswith(CLEANED_SUFFIX) for f in leftovers)
    _kill(plog)
    again = PartitionLog(plog.directory, TP, plog.config, appender, recover=recover,
                         high_watermark=plog.high_watermark, recovery_point=plog.recovery_point)
    assert not [f for f in files(again) if f.endswith((CLEANED_SUFFIX, SWAP_SUFFIX, ".deleted"))]
    assert again.log_end_offset == plog.log_end_offset
    check(again, model)
    # The log works on: more updates, a full clean, a restart.
    updates(again, model, keys=10, rounds=3, tag="more")
    clean_log(again, force=True)
    check(again, model)
    again = reopen(again)
    check(again, model)
    again.close()


def test_swap_discarded_when_the_log_changed_under_the_cleaner(tmp_path, appender):
    from kbroker.log.cleaner import apply_job, cleanable_range, prepare_job, run_job

    plog = open_compacted(tmp_path, appender)
    model = Model()
    updates(plog, model, keys=6, rounds=20)
    job = prepare_job(plog, cleanable_range(plog, None, 0))
    run_job(job)
    plog.truncate_to(plog.segments[2].base_offset + 1)  # a follower truncating meanwhile
    assert apply_job(job) is False
    assert not [f for f in files(plog) if f.endswith(CLEANED_SUFFIX)]
    for offset in [o for o in model.by_offset if o >= plog.log_end_offset]:
        del model.by_offset[offset]
    check(plog, model)
    plog.close()


# -- the log manager and its thread --------------------------------------------------------------

def test_log_manager_cleans_on_its_thread_and_checkpoints(tmp_path, appender):
    config = LogConfig(cleaner_backoff_ms=0)
    mgr = LogManager([tmp_path], config, appender=appender)
    mgr.topic_overrides["compacted"] = {"cleanup.policy": "compact", "segment.bytes": "1500",
                                        "min.cleanable.dirty.ratio": "0.1"}
    mgr.startup()
    assert mgr.cleaner.running
    tp, plain = TopicPartition("compacted", 0), TopicPartition("plain", 0)
    model, plain_model = Model(), Model()
    updates(mgr.get_or_create_log(tp), model, keys=10, rounds=20)
    updates(mgr.get_or_create_log(plain), plain_model, keys=10, rounds=20)
    plain_size = mgr.logs[plain].size_bytes
    deadline = time.monotonic() + 20
    total = 0
    while time.monotonic() < deadline and not total:
        total += mgr.clean().logs_cleaned  # the broker's housekeeping, on the owner's thread
        time.sleep(0.01)
    assert total == 1
    assert mgr.logs[plain].size_bytes == plain_size  # cleanup.policy=delete: never compacted
    check(mgr.logs[tp], model)
    assert read_checkpoint(tmp_path / CLEANER_OFFSET) == {tp: mgr.logs[tp].active.base_offset}
    mgr.shutdown()
    assert not mgr.cleaner.running
    mgr = LogManager([tmp_path], config, appender=appender, cleaner_thread=False)
    mgr.topic_overrides["compacted"] = {"cleanup.policy": "compact", "segment.bytes": "1500"}
    mgr.startup()
    assert mgr.cleaner_offsets == {tp: mgr.logs[tp].active.base_offset}
    check(mgr.logs[tp], model)
    assert mgr.clean(wait=True).logs_cleaned == 0  # nothing dirty
    mgr.delete_log(tp)
    assert tp not in mgr.cleaner_offsets
    mgr.shutdown()
    assert read_checkpoint(tmp_path / CLEANER_OFFSET) == {}


def test_cleaner_disabled_by_the_broker_key(tmp_path, appender):
    config = LogConfig.from_broker_properties({"log.cleaner.enable": "false"})
    mgr = LogManager([tmp_path], config, appender=appender)
    mgr.topic_overrides["c"] = {"cleanup.policy": "compact", "segment.bytes": "1500"}
    mgr.startup()
    assert not mgr.cleaner.running
    plog = mgr.get_or_create_log(TopicPartition("c", 0))
    updates(plog, Model(), keys=3, rounds=30)
    assert mgr.clean(wait=True).logs_cleaned == 0
    mgr.shutdown()


def test_config_keys_map_as_kafka():
    config = LogConfig.from_broker_properties({
        "log.cleaner.min.cleanable.ratio": "0.25", "log.cleaner.delete.retention.ms": "1000",
        "log.cleaner.min.compaction.lag.ms": "5", "log.cleaner.max.compaction.lag.ms": "60000",
        "log.cleaner.backoff.ms": "100", "log.cleanup.policy": "delete,compact"})
    assert (config.min_cleanable_dirty_ratio, config.delete_retention_ms, config.min_compaction_lag_ms,
            config.max_compaction_lag_ms, config.cleaner_backoff_ms) == (0.25, 1000, 5, 60000, 100)
    assert config.compact and config.delete and config.max_segment_ms == 60000
    topic = config.with_overrides({"min.cleanable.dirty.ratio": "0.75", "delete.retention.ms": "7",
                                   "cleanup.policy": "compact"})
    assert topic.min_cleanable_dirty_ratio == 0.75 and topic.delete_retention_ms == 7 and not topic.delete
    values = config.topic_values()
    assert values["min.cleanable.dirty.ratio"] == "0.25" and values["max.compaction.lag.ms"] == "60000"
    assert "" not in values and not any(k.startswith("log.cleaner") for k in values)
    from kbroker.config.errors import ConfigError
    for bad in ({"min.cleanable.dirty.ratio": "1.5"}, {"log.cleaner.enable": "x"}, {"": "1"}):
        with pytest.raises(ConfigError):
            config.with_overrides(bad)


def test_aborted_and_open_transactions_never_hide_committed_values(tmp_path, appender):
    plog = open_compacted(tmp_path, appender)

    def follow(batch: bytes) -> None:
        plog.append_as_follower(batch)

    follow(build_batch([(b"a", b"a-1", [], 1), (b"b", b"b-1", [], 2)], base_offset=0))
    follow(build_batch([(b"a", b"a-committed", [], 3)], base_offset=2, producer_id=5, producer_epoch=0,
                       base_sequence=0, is_transactional=True))
    follow(build_control_batch(True, producer_id=5, producer_epoch=0, base_offset=3))
    follow(build_batch([(b"a", b"a-aborted", [], 4), (b"b", b"b-aborted", [], 5)], base_offset=4, producer_id=6,
                       producer_epoch=0, base_sequence=0, is_transactional=True))
    follow(build_control_batch(False, producer_id=6, producer_epoch=0, base_offset=6))
    follow(build_batch([(b"b", b"b-open", [], 6)], base_offset=7, producer_id=8, producer_epoch=0,
                       base_sequence=0, is_transactional=True))  # no marker yet
    plog.roll()
    follow(build_batch([(b"head", b"h", [], 9)], base_offset=8))
    plog.update_high_watermark(plog.log_end_offset)
    clean_log(plog)
    stored = decode(read_all(plog, 0))
    assert stored == [(1, b"b", b"b-1"), (2, b"a", b"a-committed"), stored[2],
                      (4, b"a", b"a-aborted"), (5, b"b", b"b-aborted"), stored[5],
                      (7, b"b", b"b-open"), (8, b"head", b"h")]
    plog.close()


def test_max_compaction_lag_forces_cleaning_below_the_ratio_and_rolls(tmp_path, appender):
    now = 50_000_000
    clock = lambda: now  # noqa: E731
    config = dict(COMPACT, min_cleanable_dirty_ratio=1.0, max_compaction_lag_ms=10_000, segment_bytes=100_000)
    plog = PartitionLog(tmp_path / str(TP), TP, LogConfig(**config), appender, clock=clock)
    model = Model()
    for r in range(5):
        model.produce(plog, [(b"k", b"v%d" % r)], ts=now)
    model.produce(plog, [(b"k", b"later")], ts=now + 20_000)  # segment.ms is a week, but the lag rolls
    assert len(plog.segments) == 2
    checkpoint, _ = clean_log(plog, now=now + 5_000)
    assert checkpoint is not None  # dirty ratio of the one cleanable segment is 1.0 anyway
    model.produce(plog, [(b"k", b"x")], ts=now + 20_001)
    model.produce(plog, [(b"k", b"y")], ts=now + 40_000)  # rolls again
    assert clean_log(plog, checkpoint, now=now + 21_000)[0] is None  # not yet past the lag, ratio < 1
    assert clean_log(plog, checkpoint, now=now + 40_000)[0] is not None  # past max.compaction.lag.ms
    check(plog, model)
    plog.close()


def test_a_segment_with_a_txnindex_keeps_its_base_when_small_segments_are_merged(tmp_path, appender):
    plog = open_compacted(tmp_path, appender)
    model = Model()
    updates(plog, model, keys=4, rounds=40)
    pinned = plog.segments[3].base_offset
    txn_index = plog.directory / f"{pinned:020d}.txnindex"
    txn_index.write_bytes(b"\x00" * 34)
    checkpoint, _ = clean_log(plog)
    model.produce(plog, [(b"key-0", b"last")])
    plog.roll()
    clean_log(plog, checkpoint, force=True)  # the second pass merges the small cleaned segments
    bases = [s.base_offset for s in plog.segments]
    assert pinned in bases and len(bases) <= 4
    assert txn_index.read_bytes() == b"\x00" * 34
    check(plog, model)
    plog.close()
