"""LogManager: JBOD placement, checkpoints, clean shutdown, restart, and a failing disk."""
from __future__ import annotations

import errno
import logging
import os
import subprocess

import pytest

from kbroker import errors
from kbroker.log import LogConfig, LogManager, TopicPartition
from kbroker.log.checkpoint import read_checkpoint, write_checkpoint

from .helpers import make_batch, read_all, values_of


def _crash(mgr):
    """What a killed process leaves: files closed, locks released, no flush, no marker."""
    for plog in mgr.logs.values():
        plog.close()
    for fd in mgr._locks.values():
        os.close(fd)
    mgr._locks.clear()


def _manager(dirs, appender, **config):
    mgr = LogManager(dirs, LogConfig(**config), appender=appender)
    mgr.startup()
    return mgr


def test_partitions_spread_over_log_dirs_least_loaded_first(tmp_path, appender):
    dirs = [tmp_path / f"disk{i}" for i in range(3)]
    mgr = _manager(dirs, appender)
    for p in range(9):
        mgr.get_or_create_log(TopicPartition("t", p))
    per_dir = {d.resolve(): len([x for x in d.iterdir() if x.is_dir()]) for d in dirs}
    assert sorted(per_dir.values()) == [3, 3, 3]
    assert (dirs[0] / "t-0").is_dir() and (dirs[1] / "t-1").is_dir() and (dirs[2] / "t-2").is_dir()
    mgr.shutdown()


def test_checkpoint_file_format(tmp_path):
    path = tmp_path / "recovery-point-offset-checkpoint"
    write_checkpoint(path, {TopicPartition("b", 1): 7, TopicPartition("a", 0): 42})
    assert path.read_text() == "0\n2\na 0 42\nb 1 7\n"
    assert read_checkpoint(path) == {TopicPartition("a", 0): 42, TopicPartition("b", 1): 7}


@pytest.mark.parametrize("text, where, why", [
    ("", 1, "missing version or count line"),
    ("1\n0\n", 1, "unsupported version"),
    ("0\nx\n", 2, "bad entry count"),
    ("0\n2\na 0 42\n", 2, "count says 2 entries, file has 1"),
    ("0\n1\na 0\n", 3, "expected 'topic partition offset'"),
    ("0\n1\na zero 42\n", 3, "expected integers"),
    ("0\n2\na 0 42\na 0 43\n", 4, "a-0 appears twice"),
])
def test_malformed_checkpoint_is_refused_with_file_and_line(tmp_path, text, where, why):
    from kbroker.log.checkpoint import MalformedCheckpointError

    path = tmp_path / "log-start-offset-checkpoint"
    path.write_text(text)
    with pytest.raises(MalformedCheckpointError) as caught:
        read_checkpoint(path)
    assert str(caught.value).startswith(f"{path}:{where}: ") and why in str(caught.value)


def test_clean_shutdown_writes_checkpoints_and_marker_then_restarts_without_recovery(tmp_path, appender, caplog):
    d = tmp_path / "data"
    mgr = _manager([d], appender)
    plog = mgr.get_or_create_log(TopicPartition("events", 0))
    for i in range(5):
        plog.append(make_batch(2, tag=str(i)))
    plog.update_high_watermark(10)
    data = read_all(plog)
    mgr.shutdown()
    assert (d / ".kafka_cleanshutdown").exists()
    assert read_checkpoint(d / "recovery-point-offset-checkpoint") == {TopicPartition("events", 0): 10}
    assert read_checkpoint(d / "log-start-offset-checkpoint") == {TopicPartition("events", 0): 0}
    assert read_checkpoint(d / "replication-offset-checkpoint") == {TopicPartition("events", 0): 10}
    caplog.set_level(logging.INFO)
    mgr = _manager([d], appender)
    assert not (d / ".kafka_cleanshutdown").exists()  # a crash from now on is detectable
    assert "recovering" not in caplog.text
    plog = mgr.get_log(TopicPartition("events", 0))
    assert plog.high_watermark == 10 and read_all(plog) == data
    mgr.shutdown()


def test_unclean_restart_recovers_and_keeps_acknowledged_data(tmp_path, appender, caplog):
    d = tmp_path / "data"
    mgr = _manager([d], appender)
    plog = mgr.get_or_create_log(TopicPartition("events", 0))
    for i in range(5):
        plog.append(make_batch(2, tag=str(i)))
    data = read_all(plog)
    _crash(mgr)
    caplog.set_level(logging.INFO)
    mgr2 = _manager([d], appender)
    assert "recovering" in caplog.text
    assert read_all(mgr2.get_log(TopicPartition("events", 0))) == data
    mgr2.shutdown()


def test_second_manager_on_the_same_dir_is_refused(tmp_path, appender):
    mgr = _manager([tmp_path / "d"], appender)
    with pytest.raises(RuntimeError, match="in use by another broker"):
        _manager([tmp_path / "d"], appender)
    mgr.shutdown()


def test_malformed_checkpoint_means_full_recovery_not_a_crash(tmp_path, appender):
    d = tmp_path / "data"
    mgr = _manager([d], appender)
    mgr.get_or_create_log(TopicPartition("x", 0)).append(make_batch(3))
    mgr.shutdown()
    (d / "recovery-point-offset-checkpoint").write_text("0\n1\ngarbage line here\n")
    (d / ".kafka_cleanshutdown").unlink()
    mgr = _manager([d], appender)
    assert mgr.get_log(TopicPartition("x", 0)).log_end_offset == 3
    mgr.shutdown()


@pytest.mark.parametrize("err", [errno.EIO, errno.ENOSPC])
def test_injected_disk_error_takes_only_that_dir_offline(tmp_path, appender, caplog, err):
    dirs = [tmp_path / "disk0", tmp_path / "disk1"]
    mgr = _manager(dirs, appender)
    bad = mgr.get_or_create_log(TopicPartition("a", 0))
    good = mgr.get_or_create_log(TopicPartition("a", 1))
    assert bad.directory.parent != good.directory.parent
    bad.append(make_batch(2, tag="acked"))
    acked = read_all(bad)
    appender.inject_error(err)
    with pytest.raises(errors.KafkaStorageError):
        bad.append(make_batch(2, tag="lost"))
    appender.inject_error(0)
    assert "is offline" in caplog.text and str(bad.directory.parent) in caplog.text
    assert mgr.offline_dirs == {bad.directory.parent}
    with pytest.raises(errors.KafkaStorageError):
        bad.append(make_batch(1))
    with pytest.raises(errors.KafkaStorageError):
        bad.read(0, 100)
    # the other disk keeps working, and new partitions go there
    good.append(make_batch(3))
    assert good.log_end_offset == 3
    assert mgr.get_or_create_log(TopicPartition("a", 2)).directory.parent == good.directory.parent
    mgr.shutdown()
    # the acknowledged batch is intact on the failed disk after a restart
    mgr = _manager(dirs, appender)
    assert read_all(mgr.get_log(TopicPartition("a", 0))) == acked
    mgr.shutdown()


@pytest.fixture
def tiny_tmpfs(tmp_path):
    mount_point = tmp_path / "tiny"
    mount_point.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(mount_point)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({result.stderr.strip()}); the injected-error test covers ENOSPC")
    yield mount_point
    subprocess.run(["umount", "-l", str(mount_point)], check=False)


def test_really_full_disk_goes_offline_and_acknowledged_data_survives(tmp_path, appender, tiny_tmpfs, caplog):
    # small index files so the 200 KiB tmpfs fills with log data, not preallocated indexes
    mgr = _manager([tiny_tmpfs, tmp_path / "big"], appender, segment_index_bytes=4096)
    full = mgr.get_or_create_log(TopicPartition("fill", 0))
    other = mgr.get_or_create_log(TopicPartition("fill", 1))
    assert full.directory.parent == tiny_tmpfs.resolve()
    acked = []
    with pytest.raises(errors.KafkaStorageError):
        for i in range(1000):
            batch = make_batch(10, value_size=200, tag=str(i))
            full.append(batch)
            acked += values_of(bytes(batch))
    assert "No space left on device" in caplog.text or "ENOSPC" in caplog.text or "errno 28" in caplog.text
    assert tiny_tmpfs.resolve() in mgr.offline_dirs
    other.append(make_batch(5))
    assert other.log_end_offset == 5
    mgr.shutdown()
    # the operator makes room, then restarts: every acknowledged record is there
    subprocess.run(["mount", "-o", "remount,size=2m", str(tiny_tmpfs)], check=True)
    mgr = _manager([tiny_tmpfs, tmp_path / "big"], appender, segment_index_bytes=4096)
    assert values_of(read_all(mgr.get_log(TopicPartition("fill", 0)))) == acked
    mgr.shutdown()
