# cython: language_level=3
"""C-level declarations of kbroker._core.appender (implementation and docs in appender.pyx)."""
from cpython.pythread cimport PyThread_type_lock
from posix.uio cimport iovec
from liburing.queue cimport io_uring


# One write request: a run of at most IOV_MAX iovecs of one (fd, position, bufs) entry.
cdef struct WriteOp:
    int fd
    int state           # OP_PENDING / OP_INFLIGHT / OP_DONE / OP_FAILED
    int err             # positive errno once OP_FAILED
    bint linked         # issued inside an IOSQE_IO_LINK chain (may come back -ECANCELED)
    long long pos       # file position of the next unwritten byte
    Py_ssize_t iov      # index into Appender._iov of the first unwritten iovec
    Py_ssize_t niov     # iovecs left
    size_t left         # bytes left


# One fdatasync request of submit(sync_fds=...).
cdef struct SyncOp:
    int fd
    int state
    int err


cdef class Appender:
    cdef readonly str backend
    cdef bint _closed
    cdef int _inject_errno          # 0: no injected failure armed
    cdef long long _inject_after    # successful writes still allowed before it fires
    cdef PyThread_type_lock _lock   # one call at a time: the staging arrays are shared
    # Staging arrays, grown on demand and reused across calls (no malloc on the hot path).
    cdef Py_buffer* _views
    cdef Py_ssize_t _nviews
    cdef Py_ssize_t _views_cap
    cdef iovec* _iov
    cdef Py_ssize_t _niov
    cdef Py_ssize_t _iov_cap
    cdef WriteOp* _ops
    cdef Py_ssize_t _nops
    cdef Py_ssize_t _ops_cap
    cdef SyncOp* _syncs
    cdef Py_ssize_t _nsyncs
    cdef Py_ssize_t _syncs_cap

    cdef int _acquire(self) except -1
    cdef void _release(self) noexcept
    cdef int _reserve(self, Py_ssize_t nbufs, Py_ssize_t nops, Py_ssize_t nsyncs) except -1
    cdef int _take_injected(self) noexcept
    cdef long long _write_one(self, int fd, long long position, object bufs, bint single) except -1
    cdef long long _stage(self, int fd, long long pos, object bufs, bint single) except -1
    cdef int _stage_syncs(self, object sync_fds) except -1
    cdef void _release_views(self) noexcept
    cdef int _raise_first_error(self) except -1
    cdef long long _run(self) except -1
    cdef int _execute(self) except -1
    cdef void _teardown(self) noexcept


cdef class UringAppender(Appender):
    cdef io_uring _ring
    cdef bint _ring_live
    cdef unsigned int _depth
    cdef Py_ssize_t _sync_seen      # CQEs of the current synchronous call consumed so far

    cdef int _enter(self, unsigned int wait_nr) except? -1
    cdef Py_ssize_t _reap(self) except -1
    cdef int _ring_failed(self, int err) except -1
    cdef int _prep_write(self, Py_ssize_t i, bint link) except -1
    cdef int _prep_sync(self, Py_ssize_t j) except -1


cdef class PwritevAppender(Appender):
    pass
