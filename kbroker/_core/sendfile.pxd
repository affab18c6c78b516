# cython: language_level=3, embedsignature=True
"""C-level entry points of kbroker._core.sendfile, for Cython modules that cimport them.

Both run without the GIL and never raise: they return the bytes sent and leave the errno
that stopped them in ``*err`` (0 when ``count`` was reached or the file ended). EINTR is
retried once something was sent; before that it is reported, so the caller can run Python's
signal handlers (the def wrappers do) and call again.
"""
from libc.stdint cimport int64_t


cdef int64_t sendfile_nogil(int sock_fd, int file_fd, int64_t offset, int64_t count,
                            int* err) noexcept nogil

cdef int64_t copy_nogil(int sock_fd, int file_fd, int64_t offset, int64_t count,
                        char* buf, Py_ssize_t bufsize, int* err) noexcept nogil
