# cython: language_level=3, embedsignature=True
"""Zero-copy transfer of a file range to a socket with sendfile(2).

Record bytes of a Fetch never enter Python: the connection writes its header, then hands each
segment range to ``send_range``. ``copy_range`` does the same through a caller-owned bounce
buffer with pread(2) + send(2), for comparison and for sockets sendfile cannot serve.

Both loop in C with the GIL released, over partial transfers and EINTR, until ``count`` bytes
are sent, the file ends, or the socket would block (a non-blocking socket is full). Errors are
raised only when nothing was sent; otherwise the byte count is returned and the same error
comes back from the next call (sockets keep failing once broken).

SIGPIPE: send(2) gets MSG_NOSIGNAL, so a closed peer is EPIPE. sendfile(2) takes no flags and
relies on the signal being ignored, which CPython sets up at start-up; an embedding application
that restores SIG_DFL for SIGPIPE must use copy_range or ignore SIGPIPE itself.
"""
from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.exc cimport PyErr_CheckSignals
from libc.errno cimport EAGAIN, EINTR, errno
from libc.stdint cimport INT64_MAX, int64_t
from libc.string cimport strerror
from posix.types cimport off_t
from posix.unistd cimport pread

cdef extern from "<sys/sendfile.h>" nogil:
    ssize_t sendfile(int out_fd, int in_fd, off_t* offset, size_t count)

cdef extern from *:
    """
    #include <errno.h>
    #define KB_WOULD_BLOCK(e) ((e) == EAGAIN || (e) == EWOULDBLOCK)  /* the same on Linux */
    """
    bint KB_WOULD_BLOCK(int e) nogil

cdef extern from "<sys/socket.h>" nogil:
    ssize_t send(int sockfd, const void* buf, size_t length, int flags)
    enum: MSG_NOSIGNAL

# Linux transfers at most this much per sendfile(2) call (MAX_RW_COUNT); asking for more only
# makes the kernel clamp it.
cdef int64_t _SENDFILE_CHUNK = 0x7ffff000


cdef int64_t sendfile_nogil(int sock_fd, int file_fd, int64_t offset, int64_t count,
                            int* err) noexcept nogil:
    """sendfile(2) loop; see sendfile.pxd for the contract."""
    cdef int64_t sent = 0, want
    cdef off_t pos
    cdef ssize_t r
    err[0] = 0
    while sent < count:
        pos = <off_t>(offset + sent)     # sendfile moves this copy, never the file position
        want = count - sent
        if want > _SENDFILE_CHUNK:
            want = _SENDFILE_CHUNK
        r = sendfile(sock_fd, file_fd, &pos, <size_t>want)
        if r > 0:
            sent += r
        elif r == 0:                     # offset at or past the end of the file
            break
        elif errno == EINTR and sent > 0:
            continue                     # bytes are already out: finish rather than lose them
        else:
            err[0] = errno
            break
    return sent


cdef int64_t copy_nogil(int sock_fd, int file_fd, int64_t offset, int64_t count,
                        char* buf, Py_ssize_t bufsize, int* err) noexcept nogil:
    """pread(2) + send(2) loop through buf; same contract as sendfile_nogil."""
    cdef int64_t sent = 0, want
    cdef ssize_t got, done, w
    err[0] = 0
    while sent < count:
        want = count - sent
        if want > bufsize:
            want = bufsize
        got = pread(file_fd, buf, <size_t>want, <off_t>(offset + sent))
        if got == 0:
            break
        if got < 0:
            if errno == EINTR and sent > 0:
                continue
            err[0] = errno
            break
        done = 0
        while done < got:
            w = send(sock_fd, buf + done, <size_t>(got - done), MSG_NOSIGNAL)
            if w > 0:
                done += w
            elif w < 0 and errno == EINTR and sent + done > 0:
                continue
            else:
                # Would block, or failed: what was read but not sent is simply read again by
                # the next call, which starts at offset + returned count.
                err[0] = errno if w < 0 else EAGAIN
                return sent + done
        sent += got
    return sent


cdef int64_t _checked_count(int64_t offset, int64_t count) except -1:
    if offset < 0:
        raise ValueError(f"offset must be >= 0, got {offset}")
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    return count if count <= INT64_MAX - offset else INT64_MAX - offset


cdef int64_t _finish(int64_t sent, int err) except -2:
    """Python-level outcome of one C loop: the count, or -1 to retry after EINTR, or raise."""
    if sent > 0 or err == 0 or KB_WOULD_BLOCK(err):
        return sent
    if err == EINTR:
        PyErr_CheckSignals()             # a handler's exception (KeyboardInterrupt) propagates
        return -1
    raise OSError(err, strerror(err).decode("utf-8", "replace"))  # -> BrokenPipeError etc.


def send_range(int sock_fd, int file_fd, int64_t offset, int64_t count):
    """Send up to ``count`` bytes of ``file_fd`` starting at ``offset`` (the file position is not
    moved) with sendfile(2). Returns the bytes sent; 0 if the socket would block or the file
    ends before ``offset``. Raises OSError (errno kept) only when nothing was sent."""
    cdef int64_t sent
    cdef int err = 0
    count = _checked_count(offset, count)
    while True:
        with nogil:
            sent = sendfile_nogil(sock_fd, file_fd, offset, count, &err)
        sent = _finish(sent, err)
        if sent >= 0:
            return sent


def copy_range(int sock_fd, int file_fd, int64_t offset, int64_t count, object buffer):
    """The same transfer with pread(2) + send(2) through ``buffer`` (a bytearray or any other
    writable contiguous buffer; its size is the chunk size). Same return and error rules."""
    cdef Py_buffer view
    cdef int64_t sent
    cdef int err = 0
    count = _checked_count(offset, count)
    # The export pins the buffer: nobody can resize a bytearray while the GIL is released.
    PyObject_GetBuffer(buffer, &view, PyBUF_WRITABLE)
    try:
        if view.len <= 0:
            raise ValueError("buffer must not be empty")
        while True:
            with nogil:
                sent = copy_nogil(sock_fd, file_fd, offset, count, <char*>view.buf, view.len,
                                  &err)
            sent = _finish(sent, err)
            if sent >= 0:
                return sent
    finally:
        PyBuffer_Release(&view)
