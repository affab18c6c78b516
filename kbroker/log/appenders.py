"""Which appender each log dir writes with.

io_uring copies a buffered write inline, on the submitting thread, only where the file system takes
non-blocking buffered writes (the file's FMODE_BUF_WASYNC, XFS among them); elsewhere (ext4, tmpfs) it hands every
write to an io-wq kernel worker (``iou-wrk`` threads; torvalds/linux io_uring/rw.c, ``io_write``), and the
broker's synchronous append waits for that thread to be scheduled: per 16 KiB append here, pwritev took 0.55x the
CPU of io_uring on ext4. The same file mode decides whether ``pwritev2`` takes ``RWF_NOWAIT`` for a buffered write
(fs/read_write.c ``generic_write_checks_count``: EINVAL without it; ext4 answers EOPNOTSUPP first, in
fs/ext4/file.c ``ext4_buffered_write_iter``; man 2 pwritev2), so each dir is probed once at startup: ``auto``
picks io_uring where it can be set up and the probe says writes go inline, pwritev elsewhere.
``KBROKER_APPENDER=io_uring|pwritev`` forces one backend for every dir (how the tests keep io_uring covered).

One appender per backend, shared by every dir that uses it.
"""
from __future__ import annotations

import errno
import logging
import os
from pathlib import Path
from typing import Literal, NamedTuple, cast

from kbroker._core.appender import Appender, io_uring_available, open_appender

log = logging.getLogger(__name__)

Backend = Literal["io_uring", "pwritev"]
ENV = "KBROKER_APPENDER"
PROBE_FILE = ".appender-probe"  # named while open only: unlinked before the probe writes
# RWF_NOWAIT refused for a buffered write: the file system cannot do it without blocking (EOPNOTSUPP; EINVAL from
# generic_write_checks_count, or a kernel before 4.14 without RWF_NOWAIT), or no pwritev2 (ENOSYS): io_uring punts
PUNTS = {errno.EOPNOTSUPP: "EOPNOTSUPP", errno.EINVAL: "EINVAL", errno.ENOSYS: "ENOSYS"}


class Probe(NamedTuple):
    inline: bool  # buffered writes complete on the submitting thread here
    answer: str   # what pwritev2 RWF_NOWAIT answered (or why it could not be asked)


class Choice(NamedTuple):
    backend: Backend
    why: str


def probe_nowait_writes(directory: Path) -> Probe:
    """Write one byte with RWF_NOWAIT to a fresh file in ``directory``. Success or EAGAIN (it would
    block this time): the file system takes non-blocking buffered writes. Raises OSError when the
    file cannot be made or the answer is another error."""
    flag = getattr(os, "RWF_NOWAIT", None)
    if flag is None:
        return Probe(False, "this Python has no RWF_NOWAIT")
    path = directory / PROBE_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.unlink(path)  # nothing left behind, whatever happens next
        os.pwritev(fd, [b"\0"], 0, flag)
    except OSError as exc:
        if exc.errno in PUNTS:
            return Probe(False, f"answered {PUNTS[exc.errno]}")
        if exc.errno == errno.EAGAIN:
            return Probe(True, "answered EAGAIN")
        raise
    finally:
        os.close(fd)
    return Probe(True, "succeeded")


def choose(directory: Path) -> Choice:
    """The backend ``directory``'s logs write with, and why (for the startup log)."""
    forced = os.environ.get(ENV, "").strip().lower()
    if forced in ("io_uring", "pwritev"):
        return Choice(cast(Backend, forced), f"{ENV}={forced}")
    if not io_uring_available():
        return Choice("pwritev", "io_uring cannot be set up on this kernel")
    try:
        probe = probe_nowait_writes(directory)
    except OSError as exc:
        return Choice("pwritev", f"could not probe buffered writes here: {exc}")
    if probe.inline:
        return Choice("io_uring", f"buffered writes complete inline here: pwritev2 RWF_NOWAIT {probe.answer}")
    return Choice("pwritev", "io_uring would hand buffered writes to kernel workers here: "
                             f"pwritev2 RWF_NOWAIT {probe.answer}")


class DirAppenders:
    """Each log dir's appender, chosen on first use (``choose``) and logged once per dir.
    ``given``: one appender for every dir (tests, benchmarks), which the caller closes."""

    def __init__(self, given: Appender | None = None) -> None:
        self._given = given
        self._by_backend: dict[str, Appender] = {}
        self._by_dir: dict[Path, Appender] = {}
        if given is not None:
            self._by_backend[given.backend] = given

    def of(self, directory: Path) -> Appender:
        found = self._by_dir.get(directory)
        if found is None:
            found = self._by_dir[directory] = self._open(directory)
        return found

    def _open(self, directory: Path) -> Appender:
        if self._given is not None:
            log.info("log dir %s: appender %s (given to the log manager)", directory, self._given.backend)
            return self._by_backend[self._given.backend]
        backend, why = choose(directory)
        try:
            shared = self._shared(backend)
        except OSError as exc:  # forced io_uring where it cannot be set up (``auto`` checked first)
            backend, why = "pwritev", f"{why}, but io_uring cannot be set up: {exc}"
            shared = self._shared(backend)
        log.info("log dir %s: appender %s (%s)", directory, backend, why)
        return shared

    def _shared(self, backend: Backend) -> Appender:
        found = self._by_backend.get(backend)
        if found is None:
            found = self._by_backend[backend] = open_appender(backend)
        return found

    def close(self) -> None:
        """Close the appenders opened here (not a given one)."""
        for appender in self._by_backend.values():
            if appender is not self._given:
                appender.close()
        self._by_backend.clear()
        self._by_dir.clear()
