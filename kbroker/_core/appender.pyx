# cython: language_level=3, embedsignature=True
"""Sequential appends to segment files: io_uring when the kernel allows it, pwritev otherwise.

Both backends share the staging done here: every buffer is pinned with the buffer protocol
(no copy) and described by an iovec in arrays that are allocated once and reused, so a call
on the hot path performs no malloc.  The views stay acquired until the kernel has answered
for every request that points into them, and the GIL is released while waiting.

The asynchronous API (start_write / reap / in_flight / fileno) keeps each write in a slot of
fixed-size chunks (allocated when the number of unreaped writes first grows, then reused).
On io_uring its SQEs carry ``ASYNC_UD | slot`` as user_data, so whichever call consumes the
completion queue (reap, a synchronous write, back-pressure in start_write) can tell them from
the per-call synchronous requests and park them in the completed FIFO for reap().

liburing comes from python-liburing: its static-inline helpers (SQE prep, CQ ring access)
are compiled in from its header, and the few non-inline functions (ring setup/teardown and
io_uring_submit_and_wait) are reached through the C-API that its ``liburing.queue`` Cython
module exports, so this module links against no extra library.
"""
import os

cimport cython
from cpython.buffer cimport PyObject_CheckBuffer, PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.exc cimport PyErr_CheckSignals
from cpython.mem cimport PyMem_Malloc, PyMem_Realloc, PyMem_Free
from cpython.pythread cimport (
    PyThread_allocate_lock, PyThread_free_lock, PyThread_acquire_lock, PyThread_release_lock,
)
from cpython.sequence cimport PySequence_Fast, PySequence_Fast_GET_ITEM, PySequence_Fast_GET_SIZE
from libc.errno cimport errno, EINTR, EAGAIN, EBUSY, EIO
from libc.stdint cimport uint64_t
from posix.uio cimport iovec, pwritev
from posix.unistd cimport fdatasync, close as c_close, read as c_read, write as c_write

# Aliased cimports: names with a leading "__" would be mangled inside class bodies.
from liburing.lib.uring cimport (
    __io_uring as c_ring,
    __io_uring_sqe as c_sqe,
    __io_uring_cqe as c_cqe,
    __iovec as c_iovec,
    __io_uring_get_sqe as c_get_sqe,
    __io_uring_prep_write as c_prep_write,
    __io_uring_prep_writev as c_prep_writev,
    __io_uring_prep_fsync as c_prep_fsync,
    __io_uring_sqe_set_data64 as c_set_data64,
    __io_uring_sqe_set_flags as c_set_flags,
    __io_uring_cq_ready as c_cq_ready,
    __io_uring_sq_ready as c_sq_ready,
    __io_uring_cq_advance as c_cq_advance,
    __IOSQE_IO_LINK as IOSQE_IO_LINK,
    __IORING_FSYNC_DATASYNC as IORING_FSYNC_DATASYNC,
)
from liburing.queue cimport (
    io_uring,
    io_uring_queue_init as uring_queue_init,
    io_uring_queue_exit as uring_queue_exit,
    io_uring_submit_and_wait as uring_submit_and_wait,
)
from liburing.register cimport io_uring_register_eventfd as uring_register_eventfd

cdef extern from *:
    """
    static inline void kbroker_clear_view(Py_buffer* v) { v->obj = NULL; }
    """
    # Mark a Py_buffer as not holding an export (PyBuffer_Release is then a no-op); Cython
    # types Py_buffer.obj as an object, so a plain assignment would touch reference counts.
    void clear_view "kbroker_clear_view"(Py_buffer* v) noexcept nogil

cdef extern from "<sys/eventfd.h>":
    int eventfd(unsigned int initval, int flags) nogil
    enum: EFD_CLOEXEC
    enum: EFD_NONBLOCK

cdef extern from "<limits.h>":
    enum: IOV_MAX

cdef extern from "<errno.h>":
    """
    static inline void kbroker_clear_errno(void) { errno = 0; }
    """
    enum: ECANCELED
    # A plain `errno = 0` in a function would make a Python-style local in Cython.
    void clear_errno "kbroker_clear_errno"() noexcept nogil

cdef enum:
    OP_PENDING = 0
    OP_INFLIGHT = 1
    OP_DONE = 2
    OP_FAILED = 3

cdef enum:
    SLOT_FREE = 0
    SLOT_KERNEL = 1     # submitted to the ring, its CQE not consumed yet
    SLOT_RETRY = 2      # short write / EAGAIN / EINTR: the rest must be resubmitted
    SLOT_DONE = 3       # in the completed FIFO, waiting for reap()

cdef enum:
    SLOT_SHIFT = 6
    SLOT_CHUNK = 64     # 1 << SLOT_SHIFT slots per chunk

# user_data of asynchronous SQEs: this bit plus the slot index. Synchronous calls use small
# indexes into their per-call op arrays, so the two never collide.
cdef unsigned long long ASYNC_UD = (<unsigned long long>1) << 63


cdef inline AsyncSlot* slot_at(AsyncSlot** chunks, Py_ssize_t i) noexcept nogil:
    return &chunks[i >> SLOT_SHIFT][i & (SLOT_CHUNK - 1)]


# The kernel never moves more than this in one read/write call (MAX_RW_COUNT); larger
# requests come back short and are resumed, so cap IORING_OP_WRITE's 32-bit length here.
cdef size_t MAX_RW = 0x7ffff000

cdef Py_ssize_t INITIAL_CAP = 64


cdef int raise_errno(int err, int fd=-1) except -1:
    """Raise what a failing syscall raises in Python: OSError(err, strerror), which CPython
    turns into the matching subclass (EPIPE -> BrokenPipeError, ...; ENOSPC/EIO stay OSError)."""
    if fd >= 0:
        raise OSError(err, f"{os.strerror(err)} (fd {fd})")
    raise OSError(err, os.strerror(err))


cdef inline void advance_op(iovec* iov, WriteOp* op, size_t done) noexcept nogil:
    """Account a short write of ``done`` bytes: drop whole iovecs, trim the partial one."""
    cdef iovec* cur
    op.left -= done
    op.pos += <long long>done
    while done > 0 and op.niov > 0:
        cur = &iov[op.iov]
        if done >= cur.iov_len:
            done -= cur.iov_len
            op.iov += 1
            op.niov -= 1
        else:
            cur.iov_base = <char*>cur.iov_base + done
            cur.iov_len -= done
            done = 0


cdef int pwritev_all(iovec* iov, WriteOp* op) noexcept nogil:
    """Write all of ``op`` with pwritev, resuming short writes and EINTR; 0 or an errno."""
    cdef ssize_t n
    cdef int cnt
    while op.left > 0:
        cnt = <int>(op.niov if op.niov < IOV_MAX else IOV_MAX)
        n = pwritev(op.fd, &iov[op.iov], cnt, op.pos)
        if n < 0:
            if errno == EINTR:
                continue
            return errno
        if n == 0:
            return EIO  # no progress on a regular file: never loop forever
        advance_op(iov, op, <size_t>n)
    return 0


cdef inline void* grow_array(void* array, Py_ssize_t* cap, Py_ssize_t need,
                             size_t item_size) except? NULL:
    """``array`` (of ``*cap`` items of ``item_size`` bytes) grown to hold at least ``need``
    items, at least doubling ``*cap`` when it grows; contents kept, as PyMem_Realloc does."""
    cdef void* p
    if need <= cap[0]:
        return array
    need = max(need, 2 * cap[0])
    p = PyMem_Realloc(array, <size_t>need * item_size)
    if p == NULL:
        raise MemoryError()
    cap[0] = need
    return p


cdef int fdatasync_retry(int fd) noexcept nogil:
    while fdatasync(fd) != 0:
        if errno != EINTR:
            return errno
    return 0


cdef object _uring_ok = None


def io_uring_available():
    """True when an io_uring instance can be created here (probed once, cached).

    Any failure (ENOSYS on old kernels, EPERM under seccomp or
    kernel.io_uring_disabled, ENOMEM from a locked-memory limit) means False.
    """
    global _uring_ok
    cdef io_uring ring
    if _uring_ok is None:
        ring = io_uring()
        try:
            clear_errno()  # see UringAppender._enter
            uring_queue_init(4, ring, 0)
        except Exception:
            _uring_ok = False
        else:
            uring_queue_exit(ring)
            _uring_ok = True
    return _uring_ok


cdef class Appender:
    """Base of both backends: staging of buffers, the test hook, locking and lifecycle.

    One call runs at a time per appender (a lock serialises threads, since the GIL is
    released while the kernel writes).  Not usable directly: use :func:`open_appender`.
    """

    def __cinit__(self, *args, **kwargs):
        self._efd = -1
        self._free_head = self._done_head = self._done_tail = self._retry_head = -1
        self._lock = PyThread_allocate_lock()
        if self._lock == NULL:
            raise MemoryError()
        self._reserve(INITIAL_CAP, INITIAL_CAP, 8)

    def __dealloc__(self):
        # Subclasses' __dealloc__ ran first (io_uring: in-flight writes drained).
        cdef Py_ssize_t k
        self._release_async_all()
        if self._efd >= 0:
            c_close(self._efd)
            self._efd = -1
        for k in range(self._nchunks):
            PyMem_Free(self._chunks[k])
        PyMem_Free(self._chunks)
        PyMem_Free(self._views)
        PyMem_Free(self._iov)
        PyMem_Free(self._ops)
        PyMem_Free(self._syncs)
        if self._lock != NULL:
            PyThread_free_lock(self._lock)

    def __init__(self, *args, **kwargs):
        raise TypeError("Appender is abstract: use open_appender(), UringAppender or PwritevAppender")

    # -- plumbing ------------------------------------------------------------------------

    cdef int _acquire(self) except -1:
        if not PyThread_acquire_lock(self._lock, 0):
            with nogil:
                PyThread_acquire_lock(self._lock, 1)
        if self._closed:
            PyThread_release_lock(self._lock)
            raise ValueError(f"I/O operation on a closed {type(self).__name__}")
        return 0

    cdef void _release(self) noexcept:
        PyThread_release_lock(self._lock)

    cdef int _reserve(self, Py_ssize_t nbufs, Py_ssize_t nops, Py_ssize_t nsyncs) except -1:
        """Grow the staging arrays (never shrinks). Only called while no view is held:
        Py_buffer structs are not moved under an exporter's feet."""
        self._views = <Py_buffer*>grow_array(self._views, &self._views_cap, nbufs, sizeof(Py_buffer))
        self._iov = <iovec*>grow_array(self._iov, &self._iov_cap, nbufs, sizeof(iovec))
        self._ops = <WriteOp*>grow_array(self._ops, &self._ops_cap, nops, sizeof(WriteOp))
        self._syncs = <SyncOp*>grow_array(self._syncs, &self._syncs_cap, nsyncs, sizeof(SyncOp))
        return 0

    cdef int _take_injected(self) noexcept:
        """Count one write against inject_error(): the errno it must fail with, or 0."""
        cdef int err = self._inject_errno
        if err and self._inject_after > 0:
            self._inject_after -= 1
            return 0
        self._inject_errno = 0  # one-shot
        return err

    cdef long long _stage(self, int fd, long long pos, object bufs, bint single) except -1:
        """Pin the buffers of one (fd, position, bufs) entry and cut it into WriteOps of at
        most IOV_MAX iovecs each. Returns its length. Capacity must have been reserved."""
        cdef object seq = None
        cdef object item
        cdef Py_ssize_t n, k, start, cnt, first_iov = self._niov
        cdef long long total = 0, p
        cdef size_t oplen
        cdef Py_buffer* view
        cdef WriteOp* op
        cdef int inject = 0
        if pos < 0:
            raise ValueError(f"negative file position {pos}")
        if single:
            n = 1
        else:
            if PyObject_CheckBuffer(bufs):
                raise TypeError("bufs must be a sequence of bytes-like objects, not a single buffer")
            seq = PySequence_Fast(bufs, "bufs must be a sequence of bytes-like objects")
            n = PySequence_Fast_GET_SIZE(seq)
        if self._nviews + n > self._views_cap:
            raise RuntimeError("buffer list changed size while being written")
        for k in range(n):
            item = bufs if single else <object>PySequence_Fast_GET_ITEM(seq, k)
            view = &self._views[self._nviews]
            PyObject_GetBuffer(item, view, PyBUF_SIMPLE)
            if view.len == 0:
                PyBuffer_Release(view)
                continue
            self._nviews += 1
            self._iov[self._niov].iov_base = view.buf
            self._iov[self._niov].iov_len = <size_t>view.len
            self._niov += 1
            total += view.len
        if total == 0:
            return 0  # empty writes issue nothing and do not advance the injection counter
        inject = self._take_injected()
        start = first_iov
        p = pos
        while start < self._niov:
            if self._nops >= self._ops_cap:
                raise RuntimeError("buffer list changed size while being written")
            cnt = min(<Py_ssize_t>IOV_MAX, self._niov - start)
            oplen = 0
            for k in range(start, start + cnt):
                oplen += self._iov[k].iov_len
            op = &self._ops[self._nops]
            self._nops += 1
            op.fd = fd
            op.pos = p
            op.iov = start
            op.niov = cnt
            op.left = oplen
            op.linked = False
            # An injected failure is decided here and the op is never issued, so the file
            # gets none of its bytes, as when the kernel fails a write up front.
            op.state = OP_FAILED if inject else OP_PENDING
            op.err = inject
            p += <long long>oplen
            start += cnt
        return total

    cdef int _stage_syncs(self, object sync_fds) except -1:
        cdef int fd
        cdef Py_ssize_t j
        cdef bint dup
        fds = [int(f) for f in sync_fds]
        self._reserve(0, 0, len(fds))
        for f in fds:
            fd = f
            dup = False
            for j in range(self._nsyncs):
                if self._syncs[j].fd == fd:
                    dup = True
                    break
            if dup:
                continue
            self._syncs[self._nsyncs].fd = fd
            self._syncs[self._nsyncs].state = OP_PENDING
            self._syncs[self._nsyncs].err = 0
            self._nsyncs += 1
        return 0

    cdef void _release_views(self) noexcept:
        cdef Py_ssize_t k
        for k in range(self._nviews):
            PyBuffer_Release(&self._views[k])
        self._nviews = 0
        self._niov = 0
        self._nops = 0
        self._nsyncs = 0

    cdef int _raise_first_error(self) except -1:
        """The first failed write in submission order wins; then the first failed sync."""
        cdef Py_ssize_t i
        for i in range(self._nops):
            if self._ops[i].state == OP_FAILED:
                raise_errno(self._ops[i].err, self._ops[i].fd)
        for i in range(self._nsyncs):
            if self._syncs[i].state == OP_FAILED:
                raise_errno(self._syncs[i].err, self._syncs[i].fd)
        return 0

    cdef long long _run(self) except -1:
        if self._nops or self._nsyncs:
            self._execute()
            self._raise_first_error()
        return 0

    cdef int _execute(self) except -1:
        raise NotImplementedError

    cdef void _teardown(self) noexcept:
        """Release what close() releases in every backend: pinned async buffers, the eventfd.
        Backends first make sure the kernel no longer reads those buffers."""
        self._release_async_all()
        if self._efd >= 0:
            c_close(self._efd)
            self._efd = -1

    # -- asynchronous slots ----------------------------------------------------------------

    cdef Py_ssize_t _alloc_slot(self) except -1:
        """Take a free slot (its view not acquired yet), adding a chunk when none is left."""
        cdef Py_ssize_t i, k, first
        cdef AsyncSlot* chunk
        cdef AsyncSlot* s
        if self._free_head < 0:
            self._chunks = <AsyncSlot**>grow_array(self._chunks, &self._chunks_cap,
                                                   max(<Py_ssize_t>4, self._nchunks + 1), sizeof(AsyncSlot*))
            chunk = <AsyncSlot*>PyMem_Malloc(SLOT_CHUNK * sizeof(AsyncSlot))
            if chunk == NULL:
                raise MemoryError()
            first = self._nchunks * SLOT_CHUNK
            self._chunks[self._nchunks] = chunk
            self._nchunks += 1
            for k in range(SLOT_CHUNK - 1, -1, -1):
                chunk[k].state = SLOT_FREE
                clear_view(&chunk[k].view)
                chunk[k].next = self._free_head
                self._free_head = first + k
        i = self._free_head
        s = slot_at(self._chunks, i)
        self._free_head = s.next
        s.next = -1
        clear_view(&s.view)
        s.state = SLOT_DONE  # not FREE: _release_async_all must release its view if it gets one
        self._async_live += 1
        return i

    cdef void _free_slot(self, Py_ssize_t i) noexcept:
        """Release the slot's view and put it back on the free list."""
        cdef AsyncSlot* s = slot_at(self._chunks, i)
        PyBuffer_Release(&s.view)  # no-op when the view was never acquired
        s.state = SLOT_FREE
        s.next = self._free_head
        self._free_head = i
        self._async_live -= 1

    cdef void _complete(self, Py_ssize_t i, int err, bint notify) noexcept:
        """Append a finished write to the completed FIFO. ``notify``: signal the eventfd
        ourselves (the kernel did not: a completion that never reached the ring). Invariant:
        the eventfd is readable whenever the FIFO is non-empty, so signalling on the
        empty -> non-empty transition is enough."""
        cdef AsyncSlot* s = slot_at(self._chunks, i)
        cdef bint was_empty = self._done_head < 0
        s.state = SLOT_DONE
        s.err = err
        s.next = -1
        if was_empty:
            self._done_head = i
        else:
            slot_at(self._chunks, self._done_tail).next = i
        self._done_tail = i
        if notify and was_empty:
            self._notify()

    cdef void _notify(self) noexcept:
        cdef uint64_t one = 1
        if self._efd >= 0:
            c_write(self._efd, &one, sizeof(one))  # only fails if the counter would overflow

    cdef void _release_async_all(self) noexcept:
        """Forget every async write (close/dealloc): only once the kernel is done with them."""
        cdef Py_ssize_t i
        cdef AsyncSlot* s
        for i in range(self._nchunks * SLOT_CHUNK):
            s = slot_at(self._chunks, i)
            if s.state != SLOT_FREE:
                PyBuffer_Release(&s.view)
                s.state = SLOT_FREE
            s.next = i - 1
        self._free_head = self._nchunks * SLOT_CHUNK - 1
        self._done_head = self._done_tail = self._retry_head = -1
        self._async_live = self._async_kernel = 0

    # Backend hooks (the pwritev defaults: nothing is ever left in flight).
    cdef int _make_room(self) except -1:
        return 0

    cdef int _issue(self, Py_ssize_t i) except -1:
        raise NotImplementedError

    cdef int _poll(self) except -1:
        return 0

    cdef int _wait_any(self) except -1:
        return 0

    cdef int _quiesce_fd(self, int fd) except -1:
        return 0

    cdef int _register_efd(self) except -1:
        return 0

    # -- public API ----------------------------------------------------------------------

    cdef long long _write_one(self, int fd, long long position, object bufs, bint single) except -1:
        """write() (``single``: bufs is one buffer) and writev(): one entry, no sync."""
        cdef long long total
        cdef Py_ssize_t n = 1 if single else len(bufs)
        self._acquire()
        try:
            self._reserve(n, 1 + n // IOV_MAX, 0)
            total = self._stage(fd, position, bufs, single)
            self._run()
            return total
        finally:
            self._release_views()
            self._release()

    def write(self, int fd, long long position, buf):
        """Write all of ``buf`` at ``position``; returns len(buf)."""
        return self._write_one(fd, position, buf, True)

    def writev(self, int fd, long long position, bufs):
        """Write the buffers back to back from ``position``; returns the total length."""
        return self._write_one(fd, position, bufs, False)

    def submit(self, writes, sync_fds=()):
        """Write many (fd, position, bufs) at once (io_uring: one submission), then
        fdatasync each of ``sync_fds`` (io_uring: linked after that fd's writes).
        Returns total bytes written. Raises OSError for the first failing write (in the
        order given); the others may or may not have landed, and no sync is guaranteed.
        Async writes in flight to a ``sync_fds`` entry are waited for before it is synced
        (their completions stay queued for reap())."""
        cdef long long total = 0
        cdef Py_ssize_t nbufs = 0, nunits = 0, j
        writes = PySequence_Fast(writes, "writes must be a sequence of (fd, position, bufs)")
        for w in writes:
            fd, position, bufs = w
            nbufs += len(bufs)
            nunits += 1
        self._acquire()
        try:
            self._reserve(nbufs, nunits + nbufs // IOV_MAX + 1, 0)
            for w in writes:
                fd, position, bufs = w
                total += self._stage(fd, position, bufs, False)
            if sync_fds:
                self._stage_syncs(sync_fds)
                if self._async_kernel:
                    for j in range(self._nsyncs):
                        self._quiesce_fd(self._syncs[j].fd)
            self._run()
            return total
        finally:
            self._release_views()
            self._release()

    def sync(self, int fd):
        """fdatasync(fd), with the GIL released. Async writes to ``fd`` still in flight are
        waited for first (their completions stay queued for reap(): a write that failed is
        not covered by a successful sync)."""
        cdef int err
        self._acquire()
        try:
            if self._async_kernel:
                self._quiesce_fd(fd)
            with nogil:
                err = fdatasync_retry(fd)
            if err:
                raise_errno(err, fd)
        finally:
            self._release()

    def inject_error(self, int errno, long long after_writes=0):
        """Test hook: the non-empty write after ``after_writes`` more successful ones fails
        with ``errno`` and puts none of its bytes in the file (0 clears it). One-shot; a
        submit() entry counts as one write, and so does a start_write() (whose completion
        then reports ``errno``). Works the same on both backends."""
        if errno < 0 or after_writes < 0:
            raise ValueError("errno and after_writes must be >= 0")
        self._inject_errno = errno
        self._inject_after = after_writes

    # -- asynchronous API ------------------------------------------------------------------

    def start_write(self, int fd, long long position, buf, long long tag):
        """Queue a write of all of ``buf`` at ``position`` and return without waiting for it
        (io_uring: submitted with io_uring_submit; pwritev: written before returning). Its
        completion is reported once by reap() as ``(tag, errno)``.

        ``buf`` stays pinned (its buffer export is held) until that completion is reaped or
        the appender is closed; the caller must not modify it meanwhile (a bytearray cannot
        be resized; writing into a memoryview or array is not detected and corrupts the
        write). When the queue depth worth of writes is already in the kernel, this first
        blocks (GIL released) until one completes; that completion is kept for reap()."""
        cdef Py_ssize_t i
        cdef AsyncSlot* s
        cdef int inject = 0
        if position < 0:
            raise ValueError(f"negative file position {position}")
        self._acquire()
        try:
            self._make_room()
            i = self._alloc_slot()
            s = slot_at(self._chunks, i)
            try:
                PyObject_GetBuffer(buf, &s.view, PyBUF_SIMPLE)
            except BaseException:
                self._free_slot(i)
                raise
            s.fd = fd
            s.pos = position
            s.base = <char*>s.view.buf
            s.left = <size_t>s.view.len
            s.tag = tag
            s.err = 0
            if s.left == 0:
                self._complete(i, 0, True)  # nothing to write; does not consume inject_error
                return
            inject = self._take_injected()
            if inject:
                self._complete(i, inject, True)  # never issued: the file gets none of it
            else:
                self._issue(i)
        finally:
            self._release()

    def reap(self, bint wait=False):
        """Completions of async writes as a list of ``(tag, errno)`` (errno 0: all of the
        buffer was written), in completion order; each write is reported exactly once and
        its buffer released. Short writes are resumed and EAGAIN/EINTR retried internally.
        With ``wait`` and nothing completed yet but something in flight, block (GIL released)
        until at least one completes. Also clears the fileno() eventfd."""
        cdef list out = []
        cdef Py_ssize_t i
        cdef AsyncSlot* s
        cdef uint64_t cnt
        self._acquire()
        try:
            if wait:
                self._wait_any()
            if self._efd >= 0:
                # Clear before collecting: a completion that lands after this read signals
                # the eventfd again, so none can be left without a wake-up.
                c_read(self._efd, &cnt, sizeof(cnt))  # non-blocking: EAGAIN when clear
            self._poll()
            while self._done_head >= 0:
                i = self._done_head
                s = slot_at(self._chunks, i)
                out.append((s.tag, s.err))
                self._done_head = s.next
                self._free_slot(i)
            self._done_tail = -1
            return out
        finally:
            self._release()

    @property
    def in_flight(self):
        """Async writes started and not yet reaped (completed ones included until reap())."""
        return self._async_live

    def fileno(self):
        """An eventfd (non-blocking, close-on-exec, owned by the appender) that is readable
        whenever async completions may be waiting, for ``loop.add_reader``; reap() clears it.
        Created on first call. It can be readable with nothing to reap (io_uring signals it for
        every completion, synchronous calls' included); reap() then returns []."""
        cdef int efd
        self._acquire()
        try:
            if self._efd < 0:
                efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)
                if efd < 0:
                    raise_errno(errno)
                self._efd = efd
                try:
                    self._register_efd()
                except BaseException:
                    c_close(efd)
                    self._efd = -1
                    raise
                if self._done_head >= 0:
                    self._notify()
            return self._efd
        finally:
            self._release()

    @property
    def closed(self):
        return self._closed

    def close(self):
        """Tear down the backend (the io_uring instance); idempotent. Async writes still in
        flight are completed first (blocking); completions not reaped yet are discarded and
        every pinned buffer is released, as is the eventfd."""
        if self._closed:
            return
        with nogil:
            PyThread_acquire_lock(self._lock, 1)
        try:
            if not self._closed:
                self._teardown()
                self._closed = True
        finally:
            PyThread_release_lock(self._lock)

    def __enter__(self):
        if self._closed:
            raise ValueError(f"I/O operation on a closed {type(self).__name__}")
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        state = "closed" if self._closed else "open"
        return f"<{type(self).__name__} backend={self.backend!r} {state}>"


# A GC pass must not clear _ring before __dealloc__ drains the in-flight writes through it.
@cython.no_gc_clear
cdef class UringAppender(Appender):
    """io_uring backend: one ring; each call is one submission of IORING_OP_WRITE(V) SQEs
    (plus IORING_OP_FSYNC/DATASYNC ones linked behind each synced fd's writes), awaited
    with io_uring_submit_and_wait with the GIL released. More requests than the queue
    depth go in rounds.

    Performance note: filesystems without async buffered writes (ext4 and tmpfs, unlike
    XFS/btrfs) cannot complete a buffered write inline, so the kernel punts every write SQE
    to an io-wq worker thread. A lone write() then costs a thread handoff that pwritev does
    not pay; batching many files in one submit() is where the ring earns its keep. The same
    punting is what makes start_write() worthwhile: the worker copies into the page cache on
    another core while the caller goes on (say, validating the next batch)."""

    def __init__(self, int queue_depth=64):
        """Raises OSError when io_uring cannot be set up."""
        if not 1 <= queue_depth <= 32768:
            raise ValueError(f"queue_depth must be in 1..32768, got {queue_depth}")
        self.backend = "io_uring"
        if self._ring_live:
            return  # __init__ called twice: keep the ring we have
        self._ring = io_uring()
        try:
            clear_errno()  # see _enter: python-liburing prefers a stale errno to its return value
            uring_queue_init(queue_depth, self._ring, 0)
        except OSError as exc:
            # python-liburing marks the object active even when setup failed: drop it.
            self._ring = None
            raise OSError(exc.errno, f"io_uring setup failed: {os.strerror(exc.errno)}") from None
        self._ring_live = True
        self._depth = self._ring.ptr.sq.ring_entries

    def __dealloc__(self):
        self._teardown()

    @property
    def queue_depth(self):
        """Submission queue entries of the ring (the kernel rounds up to a power of two)."""
        return self._depth

    cdef void _teardown(self) noexcept:
        """Drain in-flight async writes (resubmitting short ones), exit the ring, then release
        the buffers. A ring that fails while draining is abandoned: its writes are left to
        the kernel and the buffers released anyway (the kernel only reads them, so the
        process stays safe; the file bytes of those writes are undefined)."""
        cdef c_ring* r = &self._ring.ptr
        cdef int ret
        cdef Py_ssize_t i
        if self._ring_live:
            try:
                while self._async_kernel > 0:
                    self._reap()
                    while self._retry_head >= 0:
                        i = self._retry_head
                        if not self._prep_async(i):
                            break  # SQ full: submitted by the enter below, then retried
                        self._retry_head = slot_at(self._chunks, i).next
                    if self._async_kernel == 0:
                        break
                    ret = self._enter(0 if c_cq_ready(r) else 1)
                    if ret < 0 and ret != -EINTR and ret != -EAGAIN and ret != -EBUSY:
                        break
            except BaseException:
                pass
            self._ring_live = False
            try:
                uring_queue_exit(self._ring)
            except Exception:
                pass
        Appender._teardown(self)

    cdef int _ring_failed(self, int err) except -1:
        """io_uring_enter itself failed: in-flight requests cannot be accounted for, so retire
        the ring (and the appender) rather than reuse it half-consumed."""
        self._teardown()
        self._closed = True
        raise_errno(err)

    cdef int _enter(self, unsigned int wait_nr) except? -1:
        """Submit what is queued and wait for ``wait_nr`` CQEs, GIL released; -errno on
        failure (python-liburing raises OSError for negative returns: undo that)."""
        cdef int ret
        try:
            with nogil:
                # python-liburing's trap_error() reports the thread's errno in preference to
                # the -errno liburing returned, and liburing's raw syscalls leave errno alone:
                # clear it so a stale value (say EAGAIN from a socket) cannot mask -EINTR.
                # (Its exception check also re-takes the GIL after the call; measured: no
                # difference in throughput, so the official cimport is kept.)
                clear_errno()
                ret = uring_submit_and_wait(self._ring, wait_nr)
        except OSError as exc:
            return -(exc.errno or EIO)
        return ret

    cdef int _prep_write(self, Py_ssize_t i, bint link) except -1:
        cdef c_ring* r = &self._ring.ptr
        cdef WriteOp* op = &self._ops[i]
        cdef c_sqe* sqe = c_get_sqe(r)
        cdef size_t n
        if sqe == NULL:
            raise RuntimeError("io_uring submission queue unexpectedly full")
        if op.niov == 1:
            n = op.left if op.left < MAX_RW else MAX_RW
            c_prep_write(sqe, op.fd, self._iov[op.iov].iov_base, <unsigned int>n,
                         <unsigned long long>op.pos)
        else:
            c_prep_writev(sqe, op.fd, <c_iovec*>&self._iov[op.iov],
                          <unsigned int>min(op.niov, <Py_ssize_t>IOV_MAX),
                          <unsigned long long>op.pos)
        c_set_data64(sqe, <unsigned long long>i)
        if link:
            c_set_flags(sqe, IOSQE_IO_LINK)
        op.state = OP_INFLIGHT
        op.linked = link
        return 0

    cdef int _prep_sync(self, Py_ssize_t j) except -1:
        cdef c_sqe* sqe = c_get_sqe(&self._ring.ptr)
        if sqe == NULL:
            raise RuntimeError("io_uring submission queue unexpectedly full")
        c_prep_fsync(sqe, self._syncs[j].fd, IORING_FSYNC_DATASYNC)
        c_set_data64(sqe, <unsigned long long>(self._nops + j))
        self._syncs[j].state = OP_INFLIGHT
        return 0

    cdef Py_ssize_t _reap(self) except -1:
        """Consume every ready CQE: async ones go to the completed FIFO (or the retry list),
        synchronous ones update their op and count in _sync_seen. Returns how many."""
        cdef c_ring* r = &self._ring.ptr
        cdef unsigned int ready = c_cq_ready(r)
        cdef unsigned int head = r.cq.khead[0]
        cdef unsigned int mask = r.cq.ring_mask
        cdef unsigned int k
        cdef c_cqe* cqe
        cdef unsigned long long ud
        cdef int res
        cdef WriteOp* op
        cdef SyncOp* so
        for k in range(ready):
            cqe = &r.cq.cqes[(head + k) & mask]
            ud = cqe.user_data
            res = cqe.res
            if ud & ASYNC_UD:
                self._async_cqe(<Py_ssize_t>(ud & ~ASYNC_UD), res)
                continue
            if ud >= <unsigned long long>(self._nops + self._nsyncs):
                continue  # not this call's (cannot happen: every call consumes all of its CQEs)
            self._sync_seen += 1
            if ud < <unsigned long long>self._nops:
                op = &self._ops[ud]
                if res > 0:
                    if <size_t>res >= op.left:
                        op.left = 0
                        op.state = OP_DONE
                    else:
                        advance_op(self._iov, op, <size_t>res)  # short write: resume the rest
                        op.state = OP_PENDING
                elif res == 0:
                    op.state = OP_FAILED
                    op.err = EIO  # no progress on a regular file: never loop forever
                elif res == -EAGAIN or res == -EINTR or (res == -ECANCELED and op.linked):
                    op.state = OP_PENDING  # retry; ECANCELED: an earlier link broke the chain
                else:
                    op.state = OP_FAILED
                    op.err = -res
            else:
                so = &self._syncs[ud - <unsigned long long>self._nops]
                if res >= 0:
                    so.state = OP_DONE
                elif res == -EAGAIN or res == -EINTR or res == -ECANCELED:
                    so.state = OP_PENDING
                else:
                    so.state = OP_FAILED
                    so.err = -res
        c_cq_advance(r, ready)
        return ready

    cdef void _async_cqe(self, Py_ssize_t i, int res) noexcept:
        cdef AsyncSlot* s = slot_at(self._chunks, i)
        cdef int err
        if res > 0 and <size_t>res < s.left:
            s.base += res  # short write: resubmit the rest
            s.pos += res
            s.left -= <size_t>res
        elif res == -EAGAIN or res == -EINTR:
            pass
        else:
            if res > 0:
                s.left = 0
                err = 0
            elif res == 0:
                err = EIO  # no progress on a regular file: never loop forever
            else:
                err = -res
            self._async_kernel -= 1
            self._complete(i, err, False)  # the kernel signalled the eventfd for this CQE
            return
        s.state = SLOT_RETRY
        s.next = self._retry_head
        self._retry_head = i

    cdef int _prep_async(self, Py_ssize_t i) except -1:
        """Queue the SQE of slot ``i`` (not submitted); 0 when the SQ is full."""
        cdef AsyncSlot* s = slot_at(self._chunks, i)
        cdef c_sqe* sqe = c_get_sqe(&self._ring.ptr)
        cdef size_t n = s.left if s.left < MAX_RW else MAX_RW
        if sqe == NULL:
            return 0
        c_prep_write(sqe, s.fd, s.base, <unsigned int>n, <unsigned long long>s.pos)
        c_set_data64(sqe, ASYNC_UD | <unsigned long long>i)
        s.state = SLOT_KERNEL
        s.next = -1
        return 1

    cdef int _flush(self) except -1:
        """Submit every queued SQE without waiting for completions."""
        cdef c_ring* r = &self._ring.ptr
        cdef unsigned int queued
        cdef int ret
        while True:
            queued = c_sq_ready(r)
            if queued == 0:
                return 0
            ret = self._enter(0)
            if ret >= 0 or ret == -EINTR:
                continue
            if ret != -EAGAIN and ret != -EBUSY:
                return self._ring_failed(-ret)
            # The kernel is short of resources or of CQ room: make progress by consuming
            # completions (waiting for one when others are in flight), then submit again.
            if c_cq_ready(r) == 0 and self._async_kernel > <Py_ssize_t>queued:
                ret = self._enter(1)
                if ret < 0 and ret != -EINTR and ret != -EAGAIN and ret != -EBUSY:
                    return self._ring_failed(-ret)
            self._reap()

    cdef int _requeue(self) except -1:
        """Resubmit the retry list (short writes, EAGAIN/EINTR)."""
        cdef Py_ssize_t i
        while self._retry_head >= 0:
            while self._retry_head >= 0:
                i = self._retry_head
                if not self._prep_async(i):
                    break
                self._retry_head = slot_at(self._chunks, i).next
            self._flush()  # may consume CQEs that add to the retry list: loop
        return 0

    cdef int _harvest(self) except -1:
        self._reap()
        if self._retry_head >= 0:
            self._requeue()
        return 0

    cdef int _wait_cqe(self, bint check_signals) except -1:
        """Block (GIL released) until a CQE is ready. EINTR returns early, after running
        Python signal handlers when ``check_signals`` (a KeyboardInterrupt propagates)."""
        cdef int ret
        if c_cq_ready(&self._ring.ptr):
            return 0
        ret = self._enter(1)
        if ret >= 0 or ret == -EAGAIN or ret == -EBUSY:
            return 0
        if ret == -EINTR:
            if check_signals:
                PyErr_CheckSignals()
            return 0
        return self._ring_failed(-ret)

    cdef int _make_room(self) except -1:
        """Back-pressure: at most queue_depth async writes in the kernel at once (with the
        synchronous calls' own queue_depth that keeps the CQ, 2 x depth, from overflowing)."""
        while self._async_kernel >= <Py_ssize_t>self._depth:
            self._harvest()
            if self._async_kernel < <Py_ssize_t>self._depth:
                break
            self._wait_cqe(True)
        return 0

    cdef int _issue(self, Py_ssize_t i) except -1:
        if not self._prep_async(i):  # cannot happen: async SQEs are always flushed at once
            self._free_slot(i)
            raise RuntimeError("io_uring submission queue unexpectedly full")
        self._async_kernel += 1
        self._flush()
        return 0

    cdef int _poll(self) except -1:
        return self._harvest()

    cdef int _wait_any(self) except -1:
        while self._done_head < 0 and self._async_kernel > 0:
            self._harvest()
            if self._done_head >= 0:
                break
            self._wait_cqe(True)
        return 0

    cdef int _quiesce_fd(self, int fd) except -1:
        """Wait until no async write to ``fd`` is in the kernel (completions stay queued)."""
        cdef Py_ssize_t i, n
        cdef AsyncSlot* s
        cdef bint busy
        while self._async_kernel > 0:
            self._harvest()
            busy = False
            n = self._nchunks * SLOT_CHUNK
            for i in range(n):
                s = slot_at(self._chunks, i)
                if (s.state == SLOT_KERNEL or s.state == SLOT_RETRY) and s.fd == fd:
                    busy = True
                    break
            if not busy:
                break
            self._wait_cqe(True)
        return 0

    cdef int _register_efd(self) except -1:
        try:
            clear_errno()  # see _enter
            uring_register_eventfd(self._ring, self._efd)
        except OSError as exc:
            raise OSError(exc.errno, f"io_uring eventfd registration failed: {os.strerror(exc.errno)}") from None
        if c_cq_ready(&self._ring.ptr) and self._done_head < 0:
            self._notify()  # completions already in the CQ signalled nobody
        return 0

    cdef int _execute(self) except -1:
        cdef Py_ssize_t i, j, nw, ns, n
        cdef bint failed = False
        cdef int ret, rounds = 0
        cdef unsigned int depth = self._depth
        cdef WriteOp* ops = self._ops
        cdef SyncOp* syncs = self._syncs
        while True:
            nw = ns = 0
            for i in range(self._nops):
                if ops[i].state == OP_PENDING:
                    nw += 1
                elif ops[i].state == OP_FAILED:
                    failed = True
            for j in range(self._nsyncs):
                if syncs[j].state == OP_PENDING:
                    ns += 1
                elif syncs[j].state == OP_FAILED:
                    failed = True
            # After a failure nothing new starts (an injected failure still lets the
            # first round's other writes go, as a failing SQE would) and no sync runs.
            if failed:
                if rounds > 0:
                    break
                ns = 0
            if nw == 0 and ns == 0:
                break
            n = 0
            if nw == 0:
                # Only syncs are left, and every write has completed: no links needed.
                for j in range(self._nsyncs):
                    if syncs[j].state == OP_PENDING and n < depth:
                        self._prep_sync(j)
                        n += 1
            elif nw + ns <= depth:
                # Everything fits in one submission: chain each synced fd's writes and
                # its fdatasync with IOSQE_IO_LINK, so the sync starts only after those
                # writes completed in full (a failed or short write cancels the chain).
                for j in range(self._nsyncs):
                    if syncs[j].state != OP_PENDING:
                        continue
                    for i in range(self._nops):
                        if ops[i].state == OP_PENDING and ops[i].fd == syncs[j].fd:
                            self._prep_write(i, True)
                            n += 1
                    self._prep_sync(j)
                    n += 1
                for i in range(self._nops):
                    if ops[i].state == OP_PENDING:
                        self._prep_write(i, False)
                        n += 1
            else:
                # More than the ring holds: writes first, in rounds; syncs once they are done.
                for i in range(self._nops):
                    if ops[i].state == OP_PENDING:
                        self._prep_write(i, False)
                        n += 1
                        if n == depth:
                            break
            rounds += 1
            # CQEs of async writes may come in between: _reap() sends them to the completed
            # FIFO (or resubmits them) and counts only this call's in _sync_seen.
            self._sync_seen = 0
            while self._sync_seen < n:
                ret = self._enter(<unsigned int>(n - self._sync_seen))
                if ret < 0 and ret != -EINTR and ret != -EAGAIN and ret != -EBUSY:
                    self._ring_failed(-ret)
                self._reap()
                if self._retry_head >= 0:
                    self._requeue()
        return 0


cdef class PwritevAppender(Appender):
    """pwritev(2) backend: one syscall per IOV_MAX iovecs with the GIL released, resuming
    short writes and EINTR; fdatasync(2) for syncs. start_write() writes synchronously and
    queues the completion, so reap() and fileno() behave as with io_uring."""

    def __init__(self):
        self.backend = "pwritev"

    cdef int _issue(self, Py_ssize_t i) except -1:
        """start_write(): write now (GIL released) and queue the completion for reap()."""
        cdef AsyncSlot* s = slot_at(self._chunks, i)
        cdef iovec iov
        cdef WriteOp op
        cdef int err
        iov.iov_base = s.base
        iov.iov_len = s.left
        op.fd = s.fd
        op.pos = s.pos
        op.iov = 0
        op.niov = 1
        op.left = s.left
        with nogil:
            err = pwritev_all(&iov, &op)
        s.left = op.left
        self._complete(i, err, True)
        return 0

    cdef int _execute(self) except -1:
        cdef Py_ssize_t i, j
        cdef int err = 0
        cdef WriteOp* op
        with nogil:
            for i in range(self._nops):
                op = &self._ops[i]
                if op.state == OP_FAILED:  # injected
                    err = op.err
                    break
                err = pwritev_all(self._iov, op)
                if err:
                    op.state = OP_FAILED
                    op.err = err
                    break
                op.state = OP_DONE
            if not err:
                for j in range(self._nsyncs):
                    err = fdatasync_retry(self._syncs[j].fd)
                    if err:
                        self._syncs[j].state = OP_FAILED
                        self._syncs[j].err = err
                        break
                    self._syncs[j].state = OP_DONE
        return 0


def open_appender(prefer="auto", int queue_depth=64):
    """Return an appender. ``auto`` follows ``KBROKER_APPENDER`` (io_uring|pwritev) when set,
    else picks io_uring when available and pwritev otherwise; it never raises for a missing
    io_uring and logs nothing (check ``.backend``). ``io_uring`` raises OSError when io_uring
    cannot be set up. ``auto`` knows no file system: a broker's log manager picks per log dir
    (kbroker.log.appenders), pwritev where io_uring would punt buffered writes to workers."""
    if prefer == "auto":
        env = os.environ.get("KBROKER_APPENDER", "").strip().lower()
        if env == "pwritev":
            return PwritevAppender()
        if env == "io_uring" or io_uring_available():
            try:
                return UringAppender(queue_depth)
            except OSError:
                return PwritevAppender()
        return PwritevAppender()
    if prefer == "io_uring":
        return UringAppender(queue_depth)
    if prefer == "pwritev":
        return PwritevAppender()
    raise ValueError(f"unknown appender backend {prefer!r} (expected auto, io_uring or pwritev)")
