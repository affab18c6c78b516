"""Each log dir's appender: the RWF_NOWAIT probe (and what it predicts on this machine), the choice it drives per
dir, KBROKER_APPENDER forcing one backend everywhere, the startup log line, and logs writing with their own dir's
appender, a move between dirs included."""
from __future__ import annotations

import asyncio
import errno
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kbroker._core.appender import io_uring_available, open_appender
from kbroker.log import LogConfig, LogManager, TopicPartition, appenders
from kbroker.log.appenders import Probe
from kbroker.log.log_dir_mover import LogDirMover

from .helpers import make_batch, read_all, values_of

URING = io_uring_available()
needs_uring = pytest.mark.skipif(not URING, reason="io_uring cannot be set up on this kernel")
INLINE = Probe(True, "succeeded")
PUNTS = Probe(False, "answered EOPNOTSUPP")


def _fs_type(path: Path) -> str:
    """The file system type of the longest mount point holding ``path`` (/proc/mounts)."""
    best, kind = "", ""
    for line in Path("/proc/mounts").read_text().splitlines():
        _, point, fs = line.split()[:3]
        point = point.replace("\\040", " ")
        if (str(path) == point or str(path).startswith(point.rstrip("/") + "/")) and len(point) > len(best):
            best, kind = point, fs
    return kind


def _probes(monkeypatch, answers: dict[Path, Probe]) -> list[Path]:
    """Make the probe answer ``answers[dir]``; returns the dirs probed, in order."""
    asked: list[Path] = []

    def probe(directory: Path) -> Probe:
        asked.append(directory)
        return answers[directory]
    monkeypatch.setattr(appenders, "probe_nowait_writes", probe)
    return asked


def _values(tags, n: int = 3) -> list[bytes]:
    """What ``make_batch(n, value_size=100, tag=t)`` for each tag holds, in order."""
    return [f"{t}:{j}:".encode().ljust(100, b"x") for t in tags for j in range(n)]


def _dirs(tmp_path: Path, *names: str) -> list[Path]:
    return [(tmp_path / n).resolve() for n in names]


def _backend_of_logs_in(mgr: LogManager, directory: Path) -> set[str]:
    return {s._appender.backend for p in mgr.logs.values() if p.directory.parent == directory for s in p.segments}


# -- the probe ------------------------------------------------------------------------------


def test_the_probe_leaves_nothing_and_answers_as_this_file_system_does(tmp_path):
    probe = appenders.probe_nowait_writes(tmp_path)
    assert list(tmp_path.iterdir()) == []
    if _fs_type(tmp_path) == "ext4":  # fs/ext4/file.c: a buffered write with IOCB_NOWAIT is EOPNOTSUPP
        assert probe == PUNTS
    assert probe.answer in ("succeeded", "answered EAGAIN", "answered EOPNOTSUPP", "answered EINVAL",
                            "answered ENOSYS")
    assert probe.inline == (probe.answer in ("succeeded", "answered EAGAIN"))


_WORKERS = """
import os, sys
from kbroker._core.appender import open_appender
fd = os.open(os.path.join(sys.argv[1], "f"), os.O_RDWR | os.O_CREAT, 0o600)
with open_appender("io_uring") as a:
    for i in range(64):
        a.write(fd, i * 65536, b"x" * 65536)
    print(sorted({open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")}))
"""


@needs_uring
def test_where_the_probe_says_punt_io_uring_writes_on_kernel_workers(tmp_path):
    """The premise, checked on this machine: a fresh process's io_uring writes to a dir the probe refuses start
    iou-wrk threads (on a file system that takes RWF_NOWAIT the premise cannot be checked this way)."""
    if appenders.probe_nowait_writes(tmp_path).inline:
        pytest.skip(f"{_fs_type(tmp_path)} takes non-blocking buffered writes here")
    out = subprocess.run([sys.executable, "-c", _WORKERS, str(tmp_path)], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    assert "iou-wrk" in out, out


@pytest.mark.parametrize("err, inline, answer", [
    (errno.EOPNOTSUPP, False, "answered EOPNOTSUPP"),
    (errno.EINVAL, False, "answered EINVAL"),
    (errno.ENOSYS, False, "answered ENOSYS"),
    (errno.EAGAIN, True, "answered EAGAIN"),
    (None, True, "succeeded"),
])
def test_each_answer_of_pwritev2(tmp_path, monkeypatch, err, inline, answer):
    calls = []

    def pwritev(fd, bufs, offset, flags):
        calls.append(flags)
        assert not (tmp_path / appenders.PROBE_FILE).exists()  # unlinked before the write
        if err is not None:
            raise OSError(err, os.strerror(err))
        return 1
    monkeypatch.setattr(appenders.os, "pwritev", pwritev)
    fds = len(os.listdir("/proc/self/fd"))
    assert appenders.probe_nowait_writes(tmp_path) == Probe(inline, answer)
    assert calls == [os.RWF_NOWAIT]
    assert len(os.listdir("/proc/self/fd")) == fds and list(tmp_path.iterdir()) == []


def test_another_error_is_raised_and_choose_falls_back_to_pwritev(tmp_path, monkeypatch):
    def pwritev(fd, bufs, offset, flags):
        raise OSError(errno.EIO, "Input/output error")
    monkeypatch.setattr(appenders.os, "pwritev", pwritev)
    monkeypatch.setattr(appenders, "io_uring_available", lambda: True)
    monkeypatch.delenv(appenders.ENV, raising=False)
    with pytest.raises(OSError):
        appenders.probe_nowait_writes(tmp_path)
    assert list(tmp_path.iterdir()) == []
    backend, why = appenders.choose(tmp_path)
    assert backend == "pwritev" and why.startswith("could not probe buffered writes here: [Errno 5]")
    backend, why = appenders.choose(tmp_path / "missing")
    assert backend == "pwritev" and "No such file or directory" in why


# -- the choice per dir -----------------------------------------------------------------------


@needs_uring
def test_each_dir_writes_with_the_backend_its_probe_chose_and_says_so_once(tmp_path, monkeypatch, caplog):
    monkeypatch.delenv(appenders.ENV, raising=False)
    fast, slow, slow2 = dirs = _dirs(tmp_path, "fast", "slow", "slow2")
    asked = _probes(monkeypatch, {fast: INLINE, slow: PUNTS, slow2: PUNTS})
    mgr = LogManager(dirs, LogConfig(segment_bytes=2048), cleaner_thread=False)
    with caplog.at_level(logging.INFO, logger="kbroker.log.appenders"):
        mgr.startup()
    assert asked == dirs  # once per dir, at startup
    lines = [r.getMessage() for r in caplog.records if r.name == "kbroker.log.appenders"]
    assert lines == [
        f"log dir {fast}: appender io_uring (buffered writes complete inline here: pwritev2 RWF_NOWAIT succeeded)",
        f"log dir {slow}: appender pwritev (io_uring would hand buffered writes to kernel workers here: "
        "pwritev2 RWF_NOWAIT answered EOPNOTSUPP)",
        f"log dir {slow2}: appender pwritev (io_uring would hand buffered writes to kernel workers here: "
        "pwritev2 RWF_NOWAIT answered EOPNOTSUPP)",
    ]
    for p in range(6):  # two partitions per dir (least loaded first), each rolling several segments
        plog = mgr.get_or_create_log(TopicPartition("t", p))
        for i in range(20):
            plog.append(make_batch(3, value_size=100, tag=f"{p}-{i}"))
    assert asked == dirs
    assert _backend_of_logs_in(mgr, fast) == {"io_uring"}
    assert _backend_of_logs_in(mgr, slow) == _backend_of_logs_in(mgr, slow2) == {"pwritev"}
    assert mgr.appenders.of(slow) is mgr.appenders.of(slow2)  # one appender per backend
    assert mgr.appenders.of(fast) is not mgr.appenders.of(slow)
    for p in range(6):
        plog = mgr.logs[TopicPartition("t", p)]
        assert len(plog.segments) > 2
        assert values_of(read_all(plog)) == _values(f"{p}-{i}" for i in range(20))
    shared = [mgr.appenders.of(d) for d in dirs]
    mgr.shutdown()
    assert all(a.closed for a in shared)
    again = LogManager(dirs, LogConfig(segment_bytes=2048), cleaner_thread=False)
    again.startup()  # reloaded logs take their dir's appender too
    assert _backend_of_logs_in(again, fast) == {"io_uring"} and _backend_of_logs_in(again, slow) == {"pwritev"}
    assert len(again.logs) == 6
    again.shutdown()


@pytest.mark.parametrize("forced", ["io_uring", "pwritev"])
def test_kbroker_appender_forces_one_backend_for_every_dir_whatever_the_probe(tmp_path, monkeypatch, caplog,
                                                                               forced):
    if forced == "io_uring" and not URING:
        pytest.skip("io_uring cannot be set up on this kernel")
    monkeypatch.setenv(appenders.ENV, forced)
    fast, slow = dirs = _dirs(tmp_path, "fast", "slow")
    asked = _probes(monkeypatch, {fast: INLINE, slow: PUNTS})
    mgr = LogManager(dirs, LogConfig(), cleaner_thread=False)
    with caplog.at_level(logging.INFO, logger="kbroker.log.appenders"):
        mgr.startup()
    assert asked == []
    assert [r.getMessage() for r in caplog.records if r.name == "kbroker.log.appenders"] == [
        f"log dir {d}: appender {forced} (KBROKER_APPENDER={forced})" for d in dirs]
    for p in range(2):
        mgr.get_or_create_log(TopicPartition("t", p)).append(make_batch(2))
    assert _backend_of_logs_in(mgr, fast) == _backend_of_logs_in(mgr, slow) == {forced}
    mgr.shutdown()


def test_without_io_uring_every_dir_takes_pwritev_unprobed(tmp_path, monkeypatch, caplog):
    monkeypatch.delenv(appenders.ENV, raising=False)
    monkeypatch.setattr(appenders, "io_uring_available", lambda: False)
    (only,) = dirs = _dirs(tmp_path, "d")
    asked = _probes(monkeypatch, {only: INLINE})
    mgr = LogManager(dirs, LogConfig(), cleaner_thread=False)
    with caplog.at_level(logging.INFO, logger="kbroker.log.appenders"):
        mgr.startup()
    assert asked == []
    assert f"log dir {only}: appender pwritev (io_uring cannot be set up on this kernel)" in caplog.text
    mgr.shutdown()


def test_forced_io_uring_that_cannot_be_set_up_falls_back_and_says_why(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv(appenders.ENV, "io_uring")

    def refuse(backend):
        if backend == "io_uring":
            raise PermissionError(errno.EPERM, "Operation not permitted")
        return open_appender(backend)
    monkeypatch.setattr(appenders, "open_appender", refuse)
    mgr = LogManager(_dirs(tmp_path, "d"), LogConfig(), cleaner_thread=False)
    with caplog.at_level(logging.INFO, logger="kbroker.log.appenders"):
        mgr.startup()
    assert ("appender pwritev (KBROKER_APPENDER=io_uring, but io_uring cannot be set up: "
            "[Errno 1] Operation not permitted)") in caplog.text
    assert mgr.get_or_create_log(TopicPartition("t", 0)).segments[0]._appender.backend == "pwritev"
    mgr.shutdown()


def test_a_given_appender_serves_every_dir_and_stays_open(tmp_path, appender, caplog):
    dirs = _dirs(tmp_path, "a", "b")
    mgr = LogManager(dirs, LogConfig(), appender=appender, cleaner_thread=False)
    with caplog.at_level(logging.INFO, logger="kbroker.log.appenders"):
        mgr.startup()
    assert [r.getMessage() for r in caplog.records if r.name == "kbroker.log.appenders"] == [
        f"log dir {d}: appender {appender.backend} (given to the log manager)" for d in dirs]
    for p in range(2):
        mgr.get_or_create_log(TopicPartition("t", p)).append(make_batch(2))
    assert all(s._appender is appender for p in mgr.logs.values() for s in p.segments)
    mgr.shutdown()
    assert not appender.closed


@needs_uring
def test_a_log_moved_to_another_dir_writes_with_that_dirs_appender(tmp_path, monkeypatch):
    monkeypatch.delenv(appenders.ENV, raising=False)
    fast, slow = dirs = _dirs(tmp_path, "fast", "slow")
    _probes(monkeypatch, {fast: INLINE, slow: PUNTS})
    mgr = LogManager(dirs, LogConfig(segment_bytes=4096), cleaner_thread=False)
    mgr.startup()
    tp = TopicPartition("moving", 0)
    mgr.preferred_dirs[tp] = fast
    plog = mgr.get_or_create_log(tp)
    for i in range(30):
        plog.append(make_batch(3, value_size=100, tag=f"a{i}"))
    plog.update_high_watermark(plog.log_end_offset)
    assert {s._appender.backend for s in plog.segments} == {"io_uring"}

    async def move() -> None:
        mover = LogDirMover(mgr)
        mgr.create_future_log(tp, slow)
        mover.start(tp)
        while tp in mover.tasks:
            await asyncio.sleep(0)
        mover.stop()
    asyncio.run(move())
    moved = mgr.logs[tp]
    assert moved.directory.parent == slow
    moved.append(make_batch(3, value_size=100, tag="b"))
    assert {s._appender.backend for s in moved.segments} == {"pwritev"}
    assert values_of(read_all(moved)) == _values([*(f"a{i}" for i in range(30)), "b"])
    assert moved.log_end_offset == 93
    mgr.shutdown()
