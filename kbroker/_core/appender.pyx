# cython: language_level=3, embedsignature=True
"""Sequential appends to segment files: io_uring when the kernel allows it, pwritev otherwise.

Both backends share the staging done here: every buffer is pinned with the buffer protocol
(no copy) and described by an iovec in arrays that are allocated once and reused, so a call
on the hot path performs no malloc.  The views stay acquired until the kernel has answered
for every request that points into them, and the GIL is released while waiting.

One module: both backends are subclasses of one ``Appender`` whose staging (pinned views, iovec arrays, the
lock) and error mapping they share, and ``open_appender`` picks between them.

liburing comes from python-liburing: its static-inline helpers (SQE prep, CQ ring access)
are compiled in from its header, and the few non-inline functions (ring setup/teardown and
io_uring_submit_and_wait) are reached through the C-API that its ``liburing.queue`` Cython
module exports, so this module links against no extra library.
"""
import os

cimport cython
from cpython.buffer cimport PyObject_CheckBuffer, PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.mem cimport PyMem_Realloc, PyMem_Free
from cpython.pythread cimport (
    PyThread_allocate_lock, PyThread_free_lock, PyThread_acquire_lock, PyThread_release_lock,
)
from cpython.sequence cimport PySequence_Fast, PySequence_Fast_GET_ITEM, PySequence_Fast_GET_SIZE
from libc.errno cimport errno, EINTR, EAGAIN, EBUSY, EIO
from posix.uio cimport iovec, pwritev
from posix.unistd cimport fdatasync

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
        self._lock = PyThread_allocate_lock()
        if self._lock == NULL:
            raise MemoryError()
        self._reserve(INITIAL_CAP, INITIAL_CAP, 8)

    def __dealloc__(self):
        # Subclasses' __dealloc__ ran first (io_uring: the ring exited).
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
        """Release the backend's kernel resources (close() and dealloc): nothing in the base."""
        pass

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
        order given); the others may or may not have landed, and no sync is guaranteed."""
        cdef long long total = 0
        cdef Py_ssize_t nbufs = 0, nunits = 0
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
            self._run()
            return total
        finally:
            self._release_views()
            self._release()

    def sync(self, int fd):
        """fdatasync(fd), with the GIL released."""
        cdef int err
        self._acquire()
        try:
            with nogil:
                err = fdatasync_retry(fd)
            if err:
                raise_errno(err, fd)
        finally:
            self._release()

    def inject_error(self, int errno, long long after_writes=0):
        """Test hook: the non-empty write after ``after_writes`` more successful ones fails
        with ``errno`` and puts none of its bytes in the file (0 clears it). One-shot; a
        submit() entry counts as one write. Works the same on both backends."""
        if errno < 0 or after_writes < 0:
            raise ValueError("errno and after_writes must be >= 0")
        self._inject_errno = errno
        self._inject_after = after_writes

    @property
    def closed(self):
        return self._closed

    def close(self):
        """Tear down the backend (the io_uring instance); idempotent."""
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


# A GC pass must not clear _ring before __dealloc__ exits it.
@cython.no_gc_clear
cdef class UringAppender(Appender):
    """io_uring backend: one ring; each call is one submission of IORING_OP_WRITE(V) SQEs
    (plus IORING_OP_FSYNC/DATASYNC ones linked behind each synced fd's writes), awaited
    with io_uring_submit_and_wait with the GIL released. More requests than the queue
    depth go in rounds.

    Performance note: filesystems without async buffered writes (ext4 and tmpfs, unlike
    XFS/btrfs) cannot complete a buffered write inline, so the kernel punts every write SQE
    to an io-wq worker thread. A lone write() then costs a thread handoff that pwritev does
    not pay; batching many files in one submit() is where the ring earns its keep."""

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
        """Exit the ring (every call waits for its own requests, so none is in flight here)."""
        if self._ring_live:
            self._ring_live = False
            try:
                uring_queue_exit(self._ring)
            except Exception:
                pass

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
        """Consume every ready CQE: each updates its op and counts in _sync_seen. Returns how many."""
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
            self._sync_seen = 0
            while self._sync_seen < n:
                ret = self._enter(<unsigned int>(n - self._sync_seen))
                if ret < 0 and ret != -EINTR and ret != -EAGAIN and ret != -EBUSY:
                    self._ring_failed(-ret)
                self._reap()
        return 0


cdef class PwritevAppender(Appender):
    """pwritev(2) backend: one syscall per IOV_MAX iovecs with the GIL released, resuming
    short writes and EINTR; fdatasync(2) for syncs."""

    def __init__(self):
        self.backend = "pwritev"

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
