"""The cleaner's scan and copy in child processes (``kbroker.log.cleaner_worker``): one per cleaner thread, kept
alive; the swap stays in the broker; a child killed or cancelled fails only its job; the I/O rate is one ceiling over
every child; a child dies with its broker."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from kbroker.log import LogConfig, LogManager, TopicPartition
from kbroker.log.cleaner import UNLIMITED_RATE, Throttler
from kbroker.log.cleaner_threads import MODE_ENV, CleanerThread
from kbroker.log.names import CLEANED_SUFFIX

from .test_cleaner import Model, check, updates

COMPACTED = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.1"}
TP = TopicPartition("compacted", 0)


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _gone(pid: int) -> bool:
    """Exited (a zombie counts: it runs no more)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _wait(what, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, f"not within {timeout}s: {what.__doc__ or what}"
        time.sleep(0.01)


def _manager(tmp_path: Path, appender, threads: int = 1) -> LogManager:
    mgr = LogManager([tmp_path], LogConfig(cleaner_backoff_ms=0), appender=appender, cleaner_threads=threads)
    mgr.startup()
    return mgr


def _dirty(mgr: LogManager, tp: TopicPartition, rounds: int = 60, per_batch: int = 5,
           segment_bytes: int = 4096) -> Model:
    mgr.topic_overrides[tp.topic] = {**COMPACTED, "segment.bytes": str(segment_bytes)}
    model = Model()
    updates(mgr.get_or_create_log(tp), model, keys=50, rounds=rounds, per_batch=per_batch)
    return model


def _cleaned_files(mgr: LogManager, tp: TopicPartition) -> list[str]:
    directory = mgr.logs[tp].directory if tp in mgr.logs else None
    return [] if directory is None or not directory.exists() else \
        [name for name in os.listdir(directory) if name.endswith(CLEANED_SUFFIX)]


def test_the_cleaning_runs_in_a_child_process_kept_for_the_next_one(tmp_path, appender):
    mgr = _manager(tmp_path, appender)
    try:
        assert mgr.cleaner.thread_count == 1 and mgr.cleaner.processes == {}  # started by the first job
        first = TopicPartition("compacted", 1)
        model = _dirty(mgr, first)
        assert mgr.clean(wait=True).logs_cleaned == 1
        check(mgr.logs[first], model)
        (pid,) = mgr.cleaner.processes.values()
        assert _parent(pid) == os.getpid()
        assert b"kbroker.log.cleaner_worker" in Path(f"/proc/{pid}/cmdline").read_bytes()

        # 40,000 records: a CPU time the child's counters show
        model = _dirty(mgr, TP, rounds=800, per_batch=200, segment_bytes=256 << 10)
        before = _cpu_s(pid)
        assert mgr.clean(wait=True).logs_cleaned == 1
        assert list(mgr.cleaner.processes.values()) == [pid]  # the same child: no start-up per job
        assert _cpu_s(pid) - before >= 0.05  # the offset map and the copy of 40,000 records ran there
        check(mgr.logs[TP], model)
        assert _cleaned_files(mgr, TP) == []
    finally:
        mgr.shutdown()
    _wait(lambda: _gone(pid))
    assert mgr.cleaner.processes == {}


def test_a_broker_with_fds_past_fd_setsize_cleans(tmp_path, appender):
    """A broker holds an fd per segment and index: its cleaner's socket may be numbered past select()'s 1024."""
    held = []
    try:
        while not held or held[-1] < 1100:
            held.append(os.open(os.devnull, os.O_RDONLY))
        mgr = _manager(tmp_path, appender)
        try:
            model = _dirty(mgr, TP)
            stats = mgr.clean(wait=True)
            assert (stats.logs_cleaned, stats.discarded) == (1, 0)
            check(mgr.logs[TP], model)
        finally:
            mgr.shutdown()
    finally:
        for fd in held:
            os.close(fd)


def test_kbroker_log_cleaner_thread_keeps_the_work_in_the_cleaner_thread(tmp_path, appender, monkeypatch):
    monkeypatch.setenv(MODE_ENV, "thread")
    mgr = _manager(tmp_path, appender)
    try:
        model = _dirty(mgr, TP)
        assert mgr.clean(wait=True).logs_cleaned == 1
        assert mgr.cleaner.processes == {} and mgr.cleaner.thread_count == 1
        check(mgr.logs[TP], model)
    finally:
        mgr.shutdown()


def test_an_unknown_kbroker_log_cleaner_value_is_named_and_processes_are_used(monkeypatch, caplog):
    monkeypatch.setenv(MODE_ENV, "threads")
    assert CleanerThread(1).in_processes
    assert "KBROKER_LOG_CLEANER='threads': expected process or thread" in caplog.text


def _held_job(mgr: LogManager) -> tuple[Model, int]:
    """A cleaning in flight in the child, with its first ``.cleaned`` files written, and the child stopped (SIGSTOP)
    so that it cannot finish before the test acts: the I/O rate alone cannot hold a job this small (the throttle
    first checks after 0.3 s, and a fresh-clone CI saw the job end before the test deleted its log)."""
    mgr.cleaner.throttle.rate = 200_000.0
    model = _dirty(mgr, TP)
    mgr.clean()
    _wait(lambda: _cleaned_files(mgr, TP) != [] and bool(mgr.cleaner.processes))
    (pid,) = mgr.cleaner.processes.values()
    os.kill(pid, signal.SIGSTOP)
    assert not mgr._cleaning[TP].done.is_set(), "the cleaning ended before the test could hold it"
    return model, pid


def test_a_killed_cleaner_process_fails_only_its_job_and_the_next_job_gets_a_new_one(tmp_path, appender, caplog):
    mgr = _manager(tmp_path, appender)
    try:
        model, pid = _held_job(mgr)
        os.kill(pid, signal.SIGKILL)  # as the OOM killer would
        # The next step swaps nothing in for the failed job, and cleans the log again in a new child (the rate it
        # starts with is in the shared state).
        mgr.cleaner.throttle.rate = UNLIMITED_RATE
        stats = mgr.clean(wait=True)
        assert f"compacted-0: cleaning failed: RuntimeError('the cleaner process {pid} exited with -9')" in caplog.text
        assert (stats.logs_cleaned, stats.discarded) == (1, 0)
        (new_pid,) = mgr.cleaner.processes.values()
        assert new_pid != pid and _gone(pid)
        assert _cleaned_files(mgr, TP) == []
        check(mgr.logs[TP], model)
    finally:
        mgr.shutdown()


def test_deleting_a_log_mid_cleaning_kills_its_process_and_leaves_no_cleaned_files(tmp_path, appender):
    mgr = _manager(tmp_path, appender)
    try:
        _, pid = _held_job(mgr)
        directory = mgr.logs[TP].directory
        cleaned = [directory / name for name in _cleaned_files(mgr, TP)]
        mgr.delete_log(TP)  # aborts the cleaning first (Kafka's abortCleaning before the delete)
        assert _gone(pid)
        assert not any(path.exists() for path in cleaned)
        assert mgr.clean(wait=True).logs_cleaned == 0

        mgr.cleaner.throttle.rate = UNLIMITED_RATE
        other = TopicPartition("compacted", 1)
        model = _dirty(mgr, other)
        assert mgr.clean(wait=True).logs_cleaned == 1
        check(mgr.logs[other], model)
    finally:
        mgr.shutdown()


_SHARER = textwrap.dedent("""
    import sys, time
    from kbroker.log.cleaner import Throttler
    throttle = Throttler.attach(int(sys.argv[1]))
    print("ready", flush=True)
    sys.stdin.readline()
    for _ in range(int(sys.argv[2])):
        throttle(int(sys.argv[3]))
        time.sleep(0.05)
""")


def test_the_io_rate_is_one_ceiling_over_every_cleaner_process():
    """Kafka's Throttler shared by its cleaner threads, here by processes: two children reading 10 kB per 50 ms
    (each 200 kB/s at most unthrottled) against 100 kB/s. Past the first check interval the bytes so far took at
    least bytes / rate; only the last interval (at most 0.3 s of both children, 7 calls each) may run ahead. Each
    child on a ceiling of its own would be done in about 5 s."""
    rate, calls, size, pause = 100_000.0, 50, 10_000, 0.05
    throttle = Throttler(rate)
    children = [subprocess.Popen([sys.executable, "-c", _SHARER, str(throttle.fd), str(calls), str(size)],
                                 pass_fds=(throttle.fd,), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
                for _ in range(2)]
    for child in children:
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
    start = time.monotonic()
    for child in children:
        assert child.stdin is not None
        child.stdin.write(b"go\n")
        child.stdin.close()
    assert [child.wait(60) for child in children] == [0, 0]
    elapsed = time.monotonic() - start
    ahead = 2 * (0.3 / pause + 1) * size
    assert elapsed >= (2 * calls * size - ahead) / rate  # 8.6 s


_BROKER = textwrap.dedent("""
    import sys, time
    from kbroker.log.cleaner import Throttler
    from kbroker.log.cleaner_worker import CleanerProcess
    child = CleanerProcess(Throttler())
    child.start()
    print(child.pid, flush=True)
    time.sleep(60)
""")


def test_a_cleaner_process_dies_with_its_broker():
    broker = subprocess.Popen([sys.executable, "-c", _BROKER], stdout=subprocess.PIPE)
    try:
        assert broker.stdout is not None
        pid = int(broker.stdout.readline())
        assert _parent(pid) == broker.pid
        os.kill(broker.pid, signal.SIGKILL)
        broker.wait(10)
        _wait(lambda: _gone(pid), 10)
    finally:
        if broker.poll() is None:
            broker.kill()
            broker.wait()
