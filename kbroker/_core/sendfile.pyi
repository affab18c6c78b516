"""Zero-copy transfer of a file range to a socket with sendfile(2).

Record bytes of a Fetch never enter Python: the connection writes its header, then hands each
segment range to ``send_range``.
"""

def send_range(sock_fd: int, file_fd: int, offset: int, count: int) -> int:
    """Send up to ``count`` bytes of ``file_fd`` starting at ``offset`` (the file position is not
    moved). Retries partial transfers and EINTR until ``count`` is done or the socket would block.
    Returns the bytes sent: may be less than ``count`` (non-blocking socket full: wait for
    writability and call again with the rest), 0 only if nothing could be sent because of
    EAGAIN or because the file ends before ``offset``. Raises OSError (errno kept, e.g.
    BrokenPipeError, ConnectionResetError) when nothing was sent for another reason; if some bytes
    were sent first, returns them and the error is raised by the next call."""

def copy_range(sock_fd: int, file_fd: int, offset: int, count: int, buffer: bytearray) -> int:
    """The same transfer with pread + send through ``buffer`` (for comparison in bench/ and for
    sockets sendfile cannot serve). Same return and error rules."""
