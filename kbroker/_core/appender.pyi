"""Sequential appends to segment files: io_uring when the kernel allows it, pwritev otherwise.

Contract (every backend): when ``write``/``writev``/``submit`` return, the bytes are in the page
cache at the given file positions (logically appended), not necessarily on disk. They are durable
only after ``sync(fd)`` (or a ``sync_fds`` entry of ``submit``) returns. Writes are completed in full
(short writes are resumed); on failure an ``OSError`` with the kernel's errno (EIO, ENOSPC, ...) is
raised and the caller must treat bytes past the old end of file as garbage (truncate them).

Asynchronous writes (every backend): ``start_write`` queues a write and returns at once; its
outcome comes back exactly once from ``reap`` as ``(tag, errno)``, errno 0 meaning all of the
buffer is in the page cache at its position (same meaning as a returned ``write``; nonzero: the
bytes from that position on are garbage, as for a raised OSError). Until then the buffer stays
pinned and must not be modified. io_uring submits without waiting, so the kernel copies the
bytes on an io-wq worker while the caller goes on; pwritev writes inside ``start_write`` and
only queues the completion, so the observable API is the same. ``fileno`` is an eventfd for an
event loop (readable when completions may be waiting; ``reap`` clears it).
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
        """fdatasync(fd). Async writes to ``fd`` still in flight are waited for first (their
        completions stay queued for ``reap``; check them before trusting the sync). The same
        holds for ``submit``'s ``sync_fds``."""
    def inject_error(self, errno: int, after_writes: int = 0) -> None:
        """Test hook: the write after ``after_writes`` more successful ones fails with ``errno``
        and leaves none of its bytes (0 clears it). A ``start_write`` counts as a write and its
        completion reports ``errno``. Works the same on both backends."""
    def start_write(self, fd: int, position: int, buf: Buffer, tag: int) -> None:
        """Queue a write of all of ``buf`` at ``position`` without waiting for it; ``tag`` (any
        signed 64-bit int) identifies its completion in ``reap``. ``buf`` is pinned (its buffer
        export held: a bytearray cannot be resized) until that completion is reaped or the
        appender closed, and must not be modified meanwhile. When queue-depth writes are
        already in the kernel, first blocks (GIL released) until one completes (kept for
        ``reap``). An empty ``buf`` completes at once with errno 0."""
    def reap(self, wait: bool = False) -> list[tuple[int, int]]:
        """Completions of async writes as ``(tag, errno)`` (0: success), in completion order,
        each reported once (short writes are resumed and EAGAIN/EINTR retried internally).
        ``wait``: with nothing completed yet but something in flight, block (GIL released,
        signal handlers run) until at least one completes. Clears the ``fileno`` eventfd."""
    @property
    def in_flight(self) -> int:
        """Async writes started and not yet reaped (completed-but-unreaped ones included)."""
    def fileno(self) -> int:
        """Non-blocking close-on-exec eventfd, readable when async completions may be waiting
        (for ``loop.add_reader``); created on first call, closed by ``close``. May be readable
        with nothing to reap (io_uring signals it for synchronous calls' completions too)."""
    @property
    def closed(self) -> bool: ...
    def close(self) -> None:
        """Idempotent. Waits for async writes still in flight, discards unreaped completions,
        releases pinned buffers and the eventfd."""
    def __enter__(self) -> Appender: ...
    def __exit__(self, *exc: object) -> None: ...

class UringAppender(Appender):
    def __init__(self, queue_depth: int = 64) -> None:
        """Raises OSError when io_uring cannot be set up. At most ``queue_depth`` async writes
        are in the kernel at once (``start_write`` back-pressure)."""
    @property
    def queue_depth(self) -> int:
        """Submission queue entries (the kernel rounds up to a power of two)."""

class PwritevAppender(Appender):
    def __init__(self) -> None: ...

def open_appender(prefer: Literal["auto", "io_uring", "pwritev"] = "auto", queue_depth: int = 64) -> Appender:
    """``auto`` (or the ``KBROKER_APPENDER`` environment variable when set) picks io_uring when
    available and pwritev otherwise; never raises for a missing io_uring under ``auto``. It knows no
    file system: a broker's log manager picks per log dir (``kbroker.log.appenders``)."""
