"""Moving a partition between log dirs in-process: the future log's copy (gaps of a compacted log,
appends and truncations during the copy), the swap, what a restart makes of each leftover, stopping a
move, and DescribeLogDirs' view of a future replica."""
from __future__ import annotations

import asyncio
import errno
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from kbroker.handlers.log_dirs import describe_log_dirs
from kbroker.log import LogConfig, LogManager, TopicPartition, future_replica, log_dir_mover
from kbroker.log.checkpoint import HIGH_WATERMARK, LOG_START_OFFSET, RECOVERY_POINT, read_checkpoint
from kbroker.log.log_dir_mover import LogDirMover

from .helpers import make_batch, read_all, values_of

TP = TopicPartition("moving", 0)


def _manager(tmp_path: Path, appender, **config) -> LogManager:
    mgr = LogManager([tmp_path / "a", tmp_path / "b"], LogConfig(**config), appender=appender,
                     cleaner_thread=False)
    mgr.startup()
    return mgr


def _crash(mgr: LogManager) -> None:
    """What a killed process leaves: files closed, locks released, no flush, no marker."""
    for plog in list(mgr.logs.values()) + list(mgr.future_logs.values()):
        for segment in plog.segments:
            segment.close()
    for fd in mgr._locks.values():
        os.close(fd)
    mgr._locks.clear()


def _fill(mgr: LogManager, batches: int, tag: str = "") -> None:
    plog = mgr.get_or_create_log(TP)
    for i in range(batches):
        plog.append(make_batch(5, value_size=200, tag=f"{tag}{i}"))
    plog.update_high_watermark(plog.log_end_offset)


def _other(mgr: LogManager) -> Path:
    here = mgr.logs[TP].directory.parent
    return next(d for d in mgr.log_dirs if d != here)


def _move(mgr: LogManager, during=None) -> None:
    """Create the future log in the other dir and run the mover to the swap; ``during()`` runs between rounds."""
    async def go() -> None:
        mover = LogDirMover(mgr)
        mgr.create_future_log(TP, _other(mgr))
        mover.start(TP)
        while TP in mover.tasks:
            if during is not None:
                during()
            await asyncio.sleep(0)
        mover.stop()
    asyncio.run(go())


def test_move_copies_every_batch_swaps_and_moves_the_checkpoints(tmp_path, appender):
    mgr = _manager(tmp_path, appender, segment_bytes=4096)
    _fill(mgr, 60)
    before, source = read_all(mgr.logs[TP]), mgr.logs[TP].directory.parent
    target = _other(mgr)
    _move(mgr)
    moved = mgr.logs[TP]
    assert moved.directory == target / str(TP) and TP not in mgr.future_logs
    assert read_all(moved) == before and len(moved.segments) > 5
    assert moved.high_watermark == moved.log_end_offset == 300
    for name in (RECOVERY_POINT, LOG_START_OFFSET, HIGH_WATERMARK):
        assert TP in read_checkpoint(target / name) and TP not in read_checkpoint(source / name)
    assert [p.name for p in source.iterdir() if p.name.startswith(str(TP))] == [
        p.name for p in source.iterdir() if p.name.endswith("-delete")]
    mgr.shutdown()  # removes the replaced copy
    assert not any(p.name.startswith(str(TP)) for p in source.iterdir())
    again = _manager(tmp_path, appender, segment_bytes=4096)
    assert again.logs[TP].directory == target / str(TP) and read_all(again.logs[TP]) == before
    again.shutdown()


def test_a_long_log_is_copied_a_few_segments_per_round(tmp_path, appender, monkeypatch):
    monkeypatch.setattr(future_replica, "ROUND_BYTES", 10000)
    monkeypatch.setattr(log_dir_mover, "SWAP_BYTES", 0)
    mgr = _manager(tmp_path, appender, segment_bytes=4096)
    _fill(mgr, 60)
    before = read_all(mgr.logs[TP])
    assert len(future_replica.plan(mgr.logs[TP], 0)) < len(mgr.logs[TP].segments) // 3
    _move(mgr)
    assert read_all(mgr.logs[TP]) == before
    mgr.shutdown()


def test_appends_during_the_copy_are_in_the_new_log(tmp_path, appender, monkeypatch):
    monkeypatch.setattr(log_dir_mover, "SWAP_BYTES", 2000)  # several worker rounds
    mgr = _manager(tmp_path, appender, segment_bytes=8192)
    _fill(mgr, 40)
    target = _other(mgr)
    appended = []

    def append() -> None:
        if len(appended) < 30:
            mgr.logs[TP].append(make_batch(3, tag=f"late{len(appended)}"))
            appended.append(1)

    _move(mgr, append)
    assert appended and mgr.logs[TP].log_end_offset == 200 + 3 * len(appended)
    assert mgr.logs[TP].directory.parent == target
    late = [v for v in values_of(read_all(mgr.logs[TP])) if v.startswith(b"late")]
    assert len(late) == 3 * len(appended)
    mgr.shutdown()


def test_a_compacted_log_with_gaps_is_copied_as_is(tmp_path, appender):
    mgr = _manager(tmp_path, appender)
    plog = mgr.get_or_create_log(TP)
    for base in (0, 10, 12, 40):  # offsets the cleaner left
        plog.append_as_follower(make_batch(2, base_offset=base), allow_gaps=True)
    plog.update_high_watermark(plog.log_end_offset)
    before = read_all(plog)
    _move(mgr)
    assert read_all(mgr.logs[TP]) == before and mgr.logs[TP].log_end_offset == 42
    mgr.shutdown()


def test_a_truncation_of_the_current_log_is_followed(tmp_path, appender):
    mgr = _manager(tmp_path, appender, segment_bytes=4096)
    _fill(mgr, 30)
    current = mgr.logs[TP]
    future = mgr.create_future_log(TP, _other(mgr))
    future_replica.copy(future, future_replica.plan(current, future.log_end_offset))
    assert future.log_end_offset == 150
    current.truncate_to(100)  # a follower diverging from its leader
    for i in range(20):
        current.append(make_batch(5, tag=f"new{i}"))
    _finish(mgr)
    assert read_all(mgr.logs[TP]) == read_all(current) and b"new19" in read_all(mgr.logs[TP])
    mgr.shutdown()


def _finish(mgr: LogManager) -> None:
    async def go() -> None:
        mover = LogDirMover(mgr)
        mover.start(TP)
        while TP in mover.tasks:
            await asyncio.sleep(0)
        mover.stop()
    asyncio.run(go())


def test_restart_resumes_a_copy_cut_short(tmp_path, appender):
    mgr = _manager(tmp_path, appender, segment_bytes=4096)
    _fill(mgr, 40)
    before = read_all(mgr.logs[TP])
    future = mgr.create_future_log(TP, _other(mgr))
    ranges = future_replica.plan(mgr.logs[TP], 0)
    future_replica.copy(future, ranges[:2])
    future_replica.close_ranges(ranges)
    _crash(mgr)
    again = _manager(tmp_path, appender, segment_bytes=4096)
    assert TP in again.future_logs and 0 < again.future_logs[TP].log_end_offset < 200
    _finish(again)
    assert TP not in again.future_logs and read_all(again.logs[TP]) == before
    again.shutdown()


def test_clean_restart_keeps_a_move_in_flight(tmp_path, appender):
    mgr = _manager(tmp_path, appender, segment_bytes=4096)
    _fill(mgr, 40)
    before, target = read_all(mgr.logs[TP]), _other(mgr)
    future = mgr.create_future_log(TP, target)
    ranges = future_replica.plan(mgr.logs[TP], 0)
    future_replica.copy(future, ranges[:3])
    future_replica.close_ranges(ranges)
    copied = future.log_end_offset
    mgr.shutdown()
    again = _manager(tmp_path, appender, segment_bytes=4096)
    assert again.future_logs[TP].log_end_offset == copied and TP in read_checkpoint(target / RECOVERY_POINT)
    _finish(again)
    assert again.logs[TP].directory == target / str(TP) and read_all(again.logs[TP]) == before
    again.shutdown()


def test_restart_completes_a_swap_cut_between_its_renames(tmp_path, appender):
    mgr = _manager(tmp_path, appender, segment_bytes=4096)
    _fill(mgr, 40)
    before, source, target = read_all(mgr.logs[TP]), mgr.logs[TP].directory.parent, _other(mgr)
    future = mgr.create_future_log(TP, target)
    future_replica.copy(future, future_replica.plan(mgr.logs[TP], 0))
    future.flush()
    uid = future_replica.uid_of(future.directory)
    _crash(mgr)
    os.rename(source / str(TP), source / future_replica.delete_dir_name(TP, uid))  # the first rename only
    again = _manager(tmp_path, appender, segment_bytes=4096)
    assert again.logs[TP].directory == target / str(TP) and read_all(again.logs[TP]) == before
    assert not again.future_logs and not any(p.name.startswith(str(TP)) for p in source.iterdir())
    again.shutdown()


@pytest.mark.parametrize("leftover", ["future-without-current", "delete-beside-current", "delete-alone"])
def test_restart_resolves_other_leftovers(tmp_path, appender, leftover):
    mgr = _manager(tmp_path, appender)
    _fill(mgr, 10)
    before, source, target = read_all(mgr.logs[TP]), mgr.logs[TP].directory.parent, _other(mgr)
    uid = future_replica.new_uid()
    if leftover == "future-without-current":  # the topic was deleted while it moved: the copy goes
        (target / future_replica.future_dir_name(TP, uid)).mkdir()
        mgr.delete_log(TP)
    elif leftover == "delete-beside-current":  # the replaced log of a finished swap: removed
        (target / future_replica.delete_dir_name(TP, uid)).mkdir()
    _crash(mgr)
    if leftover == "delete-alone":  # never made by a swap, but its data is not thrown away
        os.rename(source / str(TP), source / future_replica.delete_dir_name(TP, uid))
    again = _manager(tmp_path, appender)
    assert not any(p.name.endswith(("-future", "-delete")) for d in again.log_dirs for p in d.iterdir())
    if leftover == "future-without-current":
        assert TP not in again.logs
    else:
        assert again.logs[TP].directory == source / str(TP) and read_all(again.logs[TP]) == before
    again.shutdown()


def test_a_failing_target_disk_goes_offline_and_the_partition_stays(tmp_path, appender, monkeypatch):
    monkeypatch.setattr(log_dir_mover, "SWAP_BYTES", 0)  # the copy runs on the worker
    mgr = _manager(tmp_path, appender, segment_bytes=4096)
    _fill(mgr, 20)
    source, target = mgr.logs[TP].directory.parent, _other(mgr)
    mgr.future_appender.inject_error(errno.EIO, 3)
    _move(mgr)
    assert mgr.offline_dirs == {target} and not mgr.future_logs
    assert mgr.logs[TP].directory.parent == source
    mgr.logs[TP].append(make_batch(2))  # the current log keeps serving
    assert mgr.logs[TP].log_end_offset == 102
    mgr.shutdown()


def test_deleting_the_partition_while_the_worker_copies_removes_the_copy_after_it(tmp_path, appender):
    mgr = _manager(tmp_path, appender)
    _fill(mgr, 10)
    future = mgr.create_future_log(TP, _other(mgr))
    mgr.copying[TP] = future  # a worker round in flight
    mgr.delete_log(TP)
    assert future.directory.exists()  # not pulled from under the worker
    mgr.end_copy(TP, future)
    assert not future.directory.exists() and not mgr.future_logs
    mgr.shutdown()


def test_describe_log_dirs_shows_the_future_replica_and_its_lag(tmp_path, appender):
    mgr = _manager(tmp_path, appender)
    _fill(mgr, 10)
    source, target = mgr.logs[TP].directory.parent, _other(mgr)
    future = mgr.create_future_log(TP, target)
    future_replica.copy(future, future_replica.plan(mgr.logs[TP], 0)[:0])
    ctx = SimpleNamespace(log_manager=mgr, security=SimpleNamespace(authorizer=None))
    answer = describe_log_dirs(ctx, None, SimpleNamespace(topics=None), None)
    seen = {(r["log_dir"], p["is_future_key"]): (p["offset_lag"], p["partition_size"])
            for r in answer["results"] for t in r["topics"] for p in t["partitions"]}
    assert seen == {(str(source), False): (0, mgr.logs[TP].size_bytes), (str(target), True): (50, 0)}
    mgr.shutdown()
