"""Sequential appends to segment files: io_uring when the kernel allows it, pwritev otherwise.

Contract (every backend): when ``write``/``writev``/``submit`` return, the bytes are in the page
cache at the given file positions (logically appended), not necessarily on disk. They are durable
only after ``sync(fd)`` (or a ``sync_fds`` entry of ``submit``) returns. Writes are completed in full
(short writes are resumed); on failure an ``OSError`` with the kernel's errno (EIO, ENOSPC, ...) is
raised and the caller must treat bytes past the old end of file as garbage (truncate them).
"""
from collections.abc import Sequence
from typing import Literal

Buffer = bytes | bytearray | memoryview

def io_uring_available() -> bool:
    """True when an io_uring instance can be created here (probed once, cached)."""

class Appender:
    backend: Literal["io_uring", "pwritev"]
    def write(self, fd: int, position: int, buf: Buffer) -> int:
        """Write all of ``buf`` at ``position``; returns len(buf)."""
    def writev(self, fd: int, position: int, bufs: Sequence[Buffer]) -> int:
        """Write the buffers back to back from ``position``; returns the total length."""
    def submit(self, writes: Sequence[tuple[int, int, Sequence[Buffer]]], sync_fds: Sequence[int] = ()) -> int:
        """Write many (fd, position, bufs) at once (io_uring: one submission), then fdatasync
        each of ``sync_fds`` (io_uring: linked after the writes). Returns total bytes written.
        Raises OSError for the first failing write; the others may or may not have landed."""
    def sync(self, fd: int) -> None:
        """fdatasync(fd)."""
    def inject_error(self, errno: int, after_writes: int = 0) -> None:
        """Test hook: the write after ``after_writes`` more successful ones fails with ``errno``
        and leaves none of its bytes (0 clears it). Works the same on both backends."""
    @property
    def closed(self) -> bool: ...
    def close(self) -> None:
        """Idempotent."""
    def __enter__(self) -> Appender: ...
    def __exit__(self, *exc: object) -> None: ...

class UringAppender(Appender):
    def __init__(self, queue_depth: int = 64) -> None:
        """Raises OSError when io_uring cannot be set up. A call with more requests than
        ``queue_depth`` submits them in rounds."""
    @property
    def queue_depth(self) -> int:
        """Submission queue entries (the kernel rounds up to a power of two)."""

class PwritevAppender(Appender):
    def __init__(self) -> None: ...

def open_appender(prefer: Literal["auto", "io_uring", "pwritev"] = "auto", queue_depth: int = 64) -> Appender:
    """``auto`` (or the ``KBROKER_APPENDER`` environment variable when set) picks io_uring when
    available and pwritev otherwise; never raises for a missing io_uring under ``auto``. It knows no
    file system: a broker's log manager picks per log dir (``kbroker.log.appenders``)."""
