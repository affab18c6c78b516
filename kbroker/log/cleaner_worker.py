"""The log cleaner's scan and copy (``cleaner.run_job``) in a child process, off the broker's GIL.

A cleaner thread in the broker would hold the GIL for every record it decodes, and the event loop waits for it (up
to the switch interval at a time). Here each cleaner thread keeps one child python running this module's ``main``,
started by the thread's first job and kept for its life (its imports cost a few hundred ms). The thread hands it a
prepared job and blocks on the answer without the GIL; the child builds the offset map, writes the ``.cleaned``
files and answers which groups it wrote with its statistics. What touches the live log stays in the broker: choosing
and preparing the job, the swap and the cleaner checkpoint (``LogManager.clean``), so recovery after a crash is the
same as with a thread.

- The segments travel as the job's duplicated fds (SCM_RIGHTS over a SOCK_SEQPACKET socketpair), so the child reads
  the very files the job was prepared from, however they are renamed or deleted meanwhile.
- ``log.cleaner.io.max.bytes.per.second`` is one ``cleaner.Throttler`` in shared memory: the children count
  against one ceiling, and a new rate reaches a job in progress.
- A cancelled job (its log deleted, the broker stopping) kills its child; the thread removes the ``.cleaned`` files
  and starts another child for its next job. A child that dies otherwise fails only its job.
- The child dies with the thread that started it (PR_SET_PDEATHSIG) and stops at its next batch if the broker is
  gone; a crash point it reaches (tests/crash) kills the broker first, since it stands for the machine's crash.
"""
from __future__ import annotations

import ctypes
import os
import pickle
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from random import Random
from typing import TYPE_CHECKING, cast

from kbroker.config.topic import LogConfig
from kbroker.log import cleaner
from kbroker.log.cleaner import CleanerAborted, CleanJob, CleanStats, Source, Throttler
from kbroker.log.names import TopicPartition

if TYPE_CHECKING:
    from kbroker.log.partition_log import PartitionLog
    from kbroker.log.segment import Segment

_CHUNK = 60_000          # bytes of payload per packet (a SEQPACKET record must fit the socket buffer)
_FDS_PER_PACKET = 250    # below the kernel's SCM_MAX_FD (253)
_HEADER = struct.Struct(">II")  # payload bytes, fds that follow
_PR_SET_PDEATHSIG = 1
_POLL_S = 0.1            # how often a waiting thread looks at its job's cancellation
# The child's program: main() imported, not this file run as __main__ (kbroker.log imports this module already, and
# the classes the broker pickles must be the imported ones).
_CHILD = "import sys; from kbroker.log.cleaner_worker import main; sys.exit(main(sys.argv[1:]))"


@dataclass(frozen=True)
class _JobSpec:
    """What ``run_job`` needs of a CleanJob, without the live log objects."""
    directory: str
    config: LogConfig
    first_dirty: int
    end_offset: int
    delete_horizon_ms: int
    dirty_from: int
    groups: list[list[int]]
    sources: list[tuple[int, int, int, int, bool]]  # base offset, size, mtime ns, index entries, has .txnindex

    @classmethod
    def of(cls, job: CleanJob) -> _JobSpec:
        return cls(str(job.directory), job.config, job.first_dirty, job.end_offset, job.delete_horizon_ms,
                   job.dirty_from, job.groups,
                   [(s.base_offset, s.size, s.mtime_ns, s.index_entries, s.has_txn_index) for s in job.sources])

    def job(self, fds: Sequence[int], cancelled: threading.Event) -> CleanJob:
        # The child has no PartitionLog or Segment: run_job never looks at them (apply_job, in the broker, does).
        sources = [Source(cast("Segment", None), fd, base, size, mtime, entries, txn)
                   for fd, (base, size, mtime, entries, txn) in zip(fds, self.sources, strict=True)]
        return CleanJob(cast("PartitionLog", None), TopicPartition("", 0), Path(self.directory), self.config,
                        self.first_dirty, self.end_offset, self.delete_horizon_ms, sources, self.dirty_from,
                        groups=self.groups, cancelled=cancelled)


@dataclass(frozen=True)
class _Result:
    cleaned: list[int]
    stats: CleanStats
    error: BaseException | None


def _send(sock: socket.socket, obj: object, fds: Sequence[int] = ()) -> None:
    data = pickle.dumps(obj, pickle.HIGHEST_PROTOCOL)
    sock.sendall(_HEADER.pack(len(data), len(fds)))
    for i in range(0, len(fds), _FDS_PER_PACKET):
        socket.send_fds(sock, [b"f"], list(fds[i:i + _FDS_PER_PACKET]))
    with memoryview(data) as view:
        for i in range(0, len(data), _CHUNK):
            sock.sendall(view[i:i + _CHUNK])


def _packet(sock: socket.socket) -> bytes:
    data = sock.recv(_CHUNK)
    if not data:
        raise EOFError("the other end closed")
    return data


def _receive(sock: socket.socket) -> tuple[object, list[int]]:
    size, nfds = _HEADER.unpack(_packet(sock))
    fds: list[int] = []
    try:
        while len(fds) < nfds:
            data, got, _, _ = socket.recv_fds(sock, 1, _FDS_PER_PACKET)
            if not data:
                raise EOFError("the other end closed")
            fds += got
        parts, have = [], 0
        while have < size:
            parts.append(_packet(sock))
            have += len(parts[-1])
        return pickle.loads(b"".join(parts)), fds
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise


class CleanerProcess:
    """One cleaner thread's child: ``run`` is ``cleaner.run_job`` done by the child."""

    def __init__(self, throttle: Throttler) -> None:
        self._throttle = throttle
        self._proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None

    @property
    def pid(self) -> int | None:
        proc = self._proc  # read once: other threads ask while the owner may replace it
        return proc.pid if proc is not None and proc.poll() is None else None

    def start(self) -> None:
        """Start the child unless it runs (called on the thread that owns it: the child dies with that thread)."""
        if self._proc is not None and self._proc.poll() is None:
            return
        self.close()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # The kbroker this one runs from, also when it is not the installed one (bench's other trees).
        root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", _CHILD, str(theirs.fileno()),
                 str(self._throttle.fd), str(os.getpid())],
                pass_fds=(theirs.fileno(), self._throttle.fd), stdin=subprocess.DEVNULL, env=env)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._sock = ours

    def run(self, job: CleanJob) -> None:
        """Clean ``job`` in the child; as ``run_job``, the outcome is in ``job.error``/``job.cleaned``/``job.stats``,
        its fds are closed and ``job.done`` is set at the end."""
        try:
            if job.cancelled.is_set():
                raise CleanerAborted()
            self.start()
            assert self._sock is not None
            _send(self._sock, _JobSpec.of(job), [s.fd for s in job.sources])
            job.close_fds()  # the child holds its own copies now
            result = self._wait(job)
            job.cleaned[:] = result.cleaned
            job.stats = result.stats
            job.error = result.error
        except BaseException as exc:
            self.close()  # killed and reaped first: nothing writes the .cleaned files any more
            job.error = exc
            job.remove_cleaned_files()
            job.cleaned.clear()
            if not isinstance(exc, Exception):
                raise
        finally:
            job.close_fds()
            job.done.set()

    def _wait(self, job: CleanJob) -> _Result:
        assert self._sock is not None and self._proc is not None
        poller = select.poll()  # not select(): a broker has fds past FD_SETSIZE (every segment is one)
        poller.register(self._sock, select.POLLIN)
        while not poller.poll(_POLL_S * 1000):
            if job.cancelled.is_set():
                raise CleanerAborted()
        try:
            result, _ = _receive(self._sock)
        except (EOFError, ConnectionError):
            code = self._proc.wait()
            raise RuntimeError(f"the cleaner process {self._proc.pid} exited with {code}") from None
        assert isinstance(result, _Result)
        return result

    def close(self) -> None:
        """Kill and reap the child (between jobs it only waits for the next one: nothing to finish)."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
            self._proc.wait()
            self._proc = None


# -- the child ----------------------------------------------------------------------------------------------------

class _BrokerGone(threading.Event):
    """The job's cancellation in the child: set once the broker that started it is gone (reparented)."""

    def __init__(self, broker: int) -> None:
        super().__init__()
        self._broker = broker

    def is_set(self) -> bool:
        return os.getppid() != self._broker


def _die_with_parent(sig: int) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the reparenting check still stops the work
        pass


def _kill_broker_first(broker: int) -> None:
    def kill(_rng: Random) -> None:
        _die_with_parent(0)  # let this process write the crash point's line before it dies too
        os.kill(broker, signal.SIGKILL)
    cleaner.before_crash = kill


def _result(job: CleanJob) -> _Result:
    error = job.error
    if error is not None:
        try:
            pickle.dumps(error)
        except Exception:
            error = RuntimeError(repr(error))
    return _Result(list(job.cleaned), job.stats, error)


def main(argv: Sequence[str]) -> int:
    sock_fd, throttle_fd, broker = (int(a) for a in argv)
    _die_with_parent(signal.SIGKILL)
    if os.getppid() != broker:
        return 0
    _kill_broker_first(broker)
    throttle = Throttler.attach(throttle_fd)
    with socket.socket(fileno=sock_fd) as sock:
        while True:
            try:
                spec, fds = _receive(sock)
            except (EOFError, ConnectionError):
                return 0
            assert isinstance(spec, _JobSpec)
            job = spec.job(fds, _BrokerGone(broker))
            job.throttle = throttle
            cleaner.run_job(job)
            _send(sock, _result(job))
