# cython: language_level=3, embedsignature=True
"""Kafka's sparse indexes over preallocated, memory-mapped files, byte-compatible with Kafka.

``.index`` entries are 8 bytes: big-endian int32 offset relative to the segment's base offset,
then big-endian int32 position in the ``.log`` file.  ``.timeindex`` entries are 12 bytes:
big-endian int64 timestamp, then big-endian int32 relative offset.

Layout rules follow Kafka's AbstractIndex: a writable index is extended to ``max_index_bytes``
(rounded down to whole entries) and mapped; the valid entries of an existing file are
``file length // entry size``, which is exact only because ``close()``/``trim()`` cut the file to
its entries (after a crash the file is still at its preallocated size, ``sanity_check()`` fails
and the log layer rebuilds).

Lookups run in C on the mapped bytes (no numpy on the hot path) with Kafka's warm-tail-first
binary search, which keeps the pages touched by tail reads (consumers near the end of the log)
resident instead of faulting in the middle of a cold index on every search.

Concurrency: every method runs with the GIL held and none releases it, so Python callers see each
call as atomic.  The ``nogil`` cdef methods (see index.pxd) leave that to the caller.

One module: ``OffsetIndex`` and ``TimeIndex`` share the mapping, the file rules and the search above (as
Kafka's AbstractIndex); the compiled core keeps one extension per job.
"""

from libc.stdint cimport int64_t, uint32_t, uint64_t, INT32_MAX
from libc.errno cimport errno, EINTR
from posix.fcntl cimport open as c_open, O_RDWR, O_RDONLY, O_CREAT, O_CLOEXEC, posix_fallocate
from posix.unistd cimport close as c_close, ftruncate
from posix.stat cimport fstat, struct_stat
from posix.mman cimport (mmap, munmap, msync, madvise, MADV_RANDOM, PROT_READ, PROT_WRITE, MAP_SHARED, MAP_FAILED,
                         MS_SYNC)
from cpython.buffer cimport PyBuffer_FillInfo
from cpython.long cimport PyLong_Check
from cpython.number cimport PyNumber_Index

import io
import os

import numpy as np

# Bytes of index file reserved on disk at a time ahead of the entries (see _reserve).
cdef Py_ssize_t RESERVE_STEP = 64 * 1024

cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    /* memcpy keeps the 12-byte time-index entries (misaligned int64) free of UB;
       compilers turn it into a single load/store. */
    #if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    #  define KB_BE32(x) (x)
    #  define KB_BE64(x) (x)
    #else
    #  define KB_BE32(x) __builtin_bswap32(x)
    #  define KB_BE64(x) __builtin_bswap64(x)
    #endif
    static inline uint32_t kb_get_be32(const char *p) { uint32_t v; memcpy(&v, p, 4); return KB_BE32(v); }
    static inline uint64_t kb_get_be64(const char *p) { uint64_t v; memcpy(&v, p, 8); return KB_BE64(v); }
    static inline void kb_put_be32(char *p, uint32_t v) { v = KB_BE32(v); memcpy(p, &v, 4); }
    static inline void kb_put_be64(char *p, uint64_t v) { v = KB_BE64(v); memcpy(p, &v, 8); }
    """
    uint32_t kb_get_be32(const char *p) nogil
    uint64_t kb_get_be64(const char *p) nogil
    void kb_put_be32(char *p, uint32_t v) nogil
    void kb_put_be64(char *p, uint64_t v) nogil


class CorruptIndexError(ValueError):
    """The index file is not a valid index (Kafka's CorruptIndexException); rebuild it."""


_OFFSET_DTYPE = np.dtype([("offset", ">u4"), ("position", ">u4")])
_TIME_DTYPE = np.dtype([("timestamp", ">i8"), ("offset", ">u4")])

# Kafka: AbstractIndex keeps the last 8 KiB of entries "warm" (see module docstring).
cdef enum:
    WARM_BYTES = 8192

# Columns a search can run over.
cdef enum Column:
    COL_OFFSET_REL = 0      # .index:      be32 relative offset at +0
    COL_OFFSET_POS = 1      # .index:      be32 position at +4
    COL_TIME_TS = 2         # .timeindex:  be64 timestamp at +0
    COL_TIME_REL = 3        # .timeindex:  be32 relative offset at +8


cdef inline int64_t _load(const char *data, Py_ssize_t esize, Column col, Py_ssize_t i) noexcept nogil:
    cdef const char *p = data + i * esize
    if col == COL_OFFSET_REL:
        return kb_get_be32(p)
    elif col == COL_OFFSET_POS:
        return kb_get_be32(p + 4)
    elif col == COL_TIME_TS:
        return <int64_t>kb_get_be64(p)
    else:
        return kb_get_be32(p + 8)


cdef inline Py_ssize_t _bsearch(const char *data, Py_ssize_t esize, Column col, int64_t target,
                                Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    # Greatest slot in [lo, hi] with key <= target; caller guarantees key(lo) <= target.
    cdef Py_ssize_t mid
    cdef int64_t k
    while lo < hi:
        mid = lo + ((hi - lo + 1) >> 1)
        k = _load(data, esize, col, mid)
        if k > target:
            hi = mid - 1
        elif k < target:
            lo = mid
        else:
            return mid
    return lo


# `col` is a compile-time constant at every call site, so after inlining the branch in _load folds.
cdef inline Py_ssize_t _largest_lower_bound(const char *data, Py_ssize_t n, Py_ssize_t esize,
                                            Py_ssize_t warm, Column col, int64_t target) noexcept nogil:
    """Slot of the greatest entry with key <= target, or -1 (Kafka's largestLowerBoundSlotFor)."""
    if n == 0:
        return -1
    cdef Py_ssize_t first_hot = n - 1 - warm
    if first_hot < 0:
        first_hot = 0
    if _load(data, esize, col, first_hot) < target:
        return _bsearch(data, esize, col, target, first_hot, n - 1)
    if _load(data, esize, col, 0) > target:
        return -1
    return _bsearch(data, esize, col, target, 0, first_hot)


cdef inline Py_ssize_t _count_below(const char *data, Py_ssize_t n, Py_ssize_t esize, Column col,
                                    int64_t target) noexcept nogil:
    """Number of leading entries with key < target (keys non-decreasing; exact with duplicates,
    which the time index's offset column may have)."""
    cdef Py_ssize_t lo = 0, hi = n, mid
    while lo < hi:
        mid = lo + ((hi - lo) >> 1)
        if _load(data, esize, col, mid) < target:
            lo = mid + 1
        else:
            hi = mid
    return lo


cdef inline int64_t _index_i64(object value) except? -1:
    # Cython's own int64_t argument conversion accepts floats via __int__ (lookup(1.5) would
    # silently search for 1); require a real integer (__index__), with a fast path for int.
    if not PyLong_Check(value):
        value = PyNumber_Index(value)
    return value


cdef int64_t _as_i64(object value, str what) except? -1:
    # Out-of-int64 values are "out of range" for the contract (ValueError), not OverflowError.
    try:
        return _index_i64(value)
    except OverflowError:
        raise ValueError(f"{what} {value} is out of range") from None


cdef int _raise_errno(str op, str path) except -1:
    cdef int err = errno
    raise OSError(err, f"{op}: {os.strerror(err)}", path)


cdef class _Mapping:
    """One shared mapping of an index file.

    Numpy views returned by ``array()`` hold a reference to it, so closing or resizing the index
    never unmaps memory a view still points at (the old region is unmapped when the last view
    dies).  It exports a read-only buffer: nobody writes entries behind the index's back.
    """

    def __dealloc__(self):
        if self.addr != NULL:
            munmap(self.addr, <size_t>self.length)
            self.addr = NULL

    def __getbuffer__(self, Py_buffer *buf, int flags):
        PyBuffer_FillInfo(buf, self, self.addr, self.length, 1, flags)

    def __releasebuffer__(self, Py_buffer *buf):
        pass


cdef _Mapping _map_fd(int fd, Py_ssize_t length, bint writable, str path):
    cdef _Mapping m = _Mapping.__new__(_Mapping)
    cdef void *addr
    if length > 0:   # mmap(2) rejects length 0; an empty index maps nothing
        addr = mmap(NULL, <size_t>length, PROT_READ | PROT_WRITE if writable else PROT_READ,
                    MAP_SHARED, fd, 0)
        if addr == MAP_FAILED:
            _raise_errno("mmap", path)
        # Lookups are binary searches, not scans. Without MADV_RANDOM the first fault on a large,
        # mostly sparse index maps (and zeroes) a large folio: measured 2.3 ms per new index
        # here, against 0.03 ms with it. Advice only: a failure changes nothing.
        madvise(addr, <size_t>length, MADV_RANDOM)
        m.addr = <char *>addr
        m.length = length
    return m


cdef class _AbstractIndex:
    """What the offset and time index share: the file, its mapping and the entry count."""

    def __cinit__(self):
        self._is_open = False

    def __init__(self, path, int64_t base_offset, Py_ssize_t max_index_bytes=10485760,
                 bint writable=True):
        self._open(path, base_offset, max_index_bytes, writable, self.entry_size, self._entry_dtype)

    # No __dealloc__ trim: an index dropped without close() is left like after a crash (Kafka's behaviour);
    # the mapping itself is released with the last reference to _map. No descriptor is held between calls.

    cdef int _open(self, object path, int64_t base_offset, Py_ssize_t max_index_bytes,
                   bint writable, Py_ssize_t esize, object dtype) except -1:
        cdef struct_stat st
        cdef int fd
        cdef Py_ssize_t length, size
        if self._is_open:
            raise RuntimeError("index already initialised")
        if base_offset < 0:
            raise ValueError(f"base_offset must be >= 0, got {base_offset}")
        if writable and max_index_bytes < esize:
            raise ValueError(f"max_index_bytes {max_index_bytes} is smaller than one entry ({esize} bytes)")
        self.path = os.fsdecode(path)
        self.base_offset = base_offset
        self.writable = writable
        self._esize = esize
        self._warm_entries = WARM_BYTES // esize
        self._max_index_bytes = max_index_bytes // esize * esize
        self._dtype = dtype
        # O_CREAT even when read-only, as Kafka does: a missing index is an empty one.
        bpath = os.fsencode(self.path)
        fd = c_open(bpath, (O_RDWR if writable else O_RDONLY) | O_CREAT | O_CLOEXEC, 0o644)
        if fd < 0:
            _raise_errno("open", self.path)
        try:
            if fstat(fd, &st) != 0:
                _raise_errno("fstat", self.path)
            length = st.st_size
            self._entries = length // esize
            self._reserved = self._entries * esize  # written entries own their blocks
            if writable:
                # Never cut existing entries, even if max_index_bytes shrank since they were written.
                size = max(self._max_index_bytes, self._entries * esize)
                self._resize_fd(fd, size)
            else:
                # Map the whole file (a trailing partial entry is ignored, sanity_check reports it).
                self._map = _map_fd(fd, length, False, self.path)
                self._data = self._map.addr
                self._max_entries = self._entries
        except BaseException:
            self._map = None
            self._data = NULL
            self._entries = self._max_entries = 0
            raise
        finally:
            # As Kafka's AbstractIndex: the mapping stays, the descriptor goes (a broker hosting thousands of
            # partitions would hold three per segment); resizing and reserving open the file again.
            c_close(fd)
        self._is_open = True
        return 0

    cdef int _reopen(self) except -1:
        """A descriptor of the index file, for one resize, reservation or length check (the caller closes it).
        Never creates: a file renamed or removed behind the index is FileNotFoundError."""
        cdef int fd = c_open(os.fsencode(self.path), (O_RDWR if self.writable else O_RDONLY) | O_CLOEXEC)
        if fd < 0:
            _raise_errno("open", self.path)
        return fd

    cdef int _check_open(self) except -1:
        if not self._is_open:
            raise ValueError(f"index {self.path} is closed")
        return 0

    cdef int _check_writable(self) except -1:
        self._check_open()
        if not self.writable:
            raise io.UnsupportedOperation(f"index {self.path} was opened read-only")
        return 0

    cdef int _reserve(self, Py_ssize_t end) except -1:
        """Make sure the file's blocks up to byte ``end`` exist on disk before writing there.

        The file is sparse (grown with ftruncate, as Kafka does), so the first store into a new
        page of the mapping allocates a block; on a full disk that store would be SIGBUS. Reserving
        ahead in RESERVE_STEP chunks with posix_fallocate turns that into an OSError (ENOSPC) that
        the log layer handles, at the cost of one syscall per RESERVE_STEP bytes of entries."""
        cdef Py_ssize_t length
        cdef int rc, fd
        if end <= self._reserved:
            return 0
        length = min(RESERVE_STEP, self._max_entries * self._esize - self._reserved)
        if length < end - self._reserved:
            length = end - self._reserved
        fd = self._reopen()
        try:
            rc = posix_fallocate(fd, self._reserved, length)
        finally:
            c_close(fd)
        if rc != 0:
            raise OSError(rc, f"{os.strerror(rc)}: reserving index space in {self.path}")
        self._reserved += length
        return 0

    cdef int _check_length(self) except -1:
        cdef struct_stat st
        cdef int fd = self._reopen()
        cdef int rc = fstat(fd, &st)
        c_close(fd)
        if rc != 0:
            _raise_errno("fstat", self.path)
        if st.st_size % self._esize != 0:
            raise CorruptIndexError(
                f"index {self.path}: file length {st.st_size} is not a multiple of the entry size {self._esize}")
        return 0

    cdef int _resize_file(self, Py_ssize_t size) except -1:
        cdef int fd = self._reopen()
        try:
            self._resize_fd(fd, size)
        finally:
            c_close(fd)
        return 0

    cdef int _resize_fd(self, int fd, Py_ssize_t size) except -1:
        """Set the file length to ``size`` (whole entries) and remap it.

        Ordered so a failure never leaves the mapping larger than the file (touching mapped pages
        past EOF is SIGBUS): grow the file before mapping more, map less before shrinking."""
        cdef struct_stat st
        cdef _Mapping m
        if fstat(fd, &st) != 0:
            _raise_errno("fstat", self.path)
        if size > st.st_size:
            if ftruncate(fd, size) != 0:   # sparse, like Kafka's RandomAccessFile.setLength
                _raise_errno("ftruncate", self.path)
        if self._map is None or self._map.length != size:
            m = _map_fd(fd, size, True, self.path)
            self._map = m   # the old mapping lives on while a numpy view holds it
            self._data = m.addr
        self._max_entries = size // self._esize
        if self._reserved > size:
            self._reserved = size
        if size < st.st_size:
            if ftruncate(fd, size) != 0:
                _raise_errno("ftruncate", self.path)
        return 0

    cdef int _truncate_entries(self, Py_ssize_t n) except -1:
        self._check_writable()
        if n < 0 or n > self._entries:
            raise ValueError(f"cannot truncate {self._entries} entries to {n}")
        self._entries = n
        return 0

    cdef Py_ssize_t _norm_entry(self, Py_ssize_t n) except -1:
        self._check_open()
        if n < 0:
            n += self._entries
        if n < 0 or n >= self._entries:
            raise IndexError(f"entry {n} out of range (index has {self._entries} entries)")
        return n

    cdef int _check_room(self) except -1:
        if self._entries >= self._max_entries:
            raise IndexError(f"{self._kind} {self.path} is full ({self._entries} entries)")
        return 0

    cdef char *_new_entry(self) except NULL:
        """Count one more entry and return where to write it (its disk blocks reserved)."""
        self._reserve((self._entries + 1) * self._esize)
        self._entries += 1
        return self._data + (self._entries - 1) * self._esize

    cdef int _check_relative_offset(self, Py_ssize_t i, int64_t relative_offset) except -1:
        # The relative offset is a Java int32: read as unsigned, above INT32_MAX it is negative.
        if relative_offset > INT32_MAX:
            raise CorruptIndexError(f"{self._kind} {self.path}: entry {i} has offset "
                                    f"{self.base_offset + relative_offset - 4294967296} below base "
                                    f"{self.base_offset}")
        return 0

    # What the two kinds of index define.

    cdef tuple _pair(self, Py_ssize_t slot):
        """Entry ``slot`` as lookups return it; slot -1 (nothing found) gives the no-entry pair."""
        raise NotImplementedError

    cdef Py_ssize_t _count_offsets_below(self, int64_t relative_offset) noexcept:
        """Number of leading entries whose relative offset is below ``relative_offset``."""
        return 0

    cdef int _check_entry(self, Py_ssize_t i) except -1:
        """sanity_check() of entry ``i`` against entry ``i - 1``."""
        return 0

    @property
    def entries(self):
        """Number of valid entries."""
        self._check_open()
        return self._entries

    @property
    def max_entries(self):
        """Entries the current file size holds (== entries once trimmed or opened read-only)."""
        self._check_open()
        return self._max_entries

    @property
    def is_full(self):
        self._check_open()
        return self._entries >= self._max_entries

    @property
    def closed(self):
        return not self._is_open

    def entry(self, Py_ssize_t n):
        """Entry ``n`` (negative counts from the end): (absolute offset, position) in an
        OffsetIndex, (timestamp, absolute offset) in a TimeIndex."""
        return self._pair(self._norm_entry(n))

    def truncate_to(self, offset):
        """Drop every entry with offset >= ``offset`` (all of them when several share it)."""
        cdef int64_t target = _as_i64(offset, "offset")
        self._check_writable()
        if target <= self.base_offset:
            self._truncate_entries(0)
        else:
            self._truncate_entries(self._count_offsets_below(target - self.base_offset))

    def truncate_entries(self, Py_ssize_t n):
        """Keep only the first ``n`` entries (0 <= n <= entries)."""
        self._truncate_entries(n)

    def sanity_check(self):
        """Raise CorruptIndexError when the file is not whole entries or its entries are out of
        order: offsets must increase in an OffsetIndex (and positions be non-negative), timestamps
        increase and offsets not go back in a TimeIndex; no offset is below the base offset."""
        self._check_open()
        self._check_length()
        cdef Py_ssize_t i
        for i in range(self._entries):
            self._check_entry(i)

    def reset(self):
        """Drop every entry and restore the preallocated size given at open (recovery rebuilds)."""
        self._check_writable()
        self._entries = 0
        self._resize_file(self._max_index_bytes)
        self._reserved = 0

    def trim(self):
        """Shrink the file to exactly its entries (on roll and on close); no-op when read-only."""
        self._check_open()
        if self.writable:
            self._resize_file(self._entries * self._esize)

    def resize(self, Py_ssize_t max_index_bytes):
        """Set the file size to ``max_index_bytes`` rounded down to whole entries, e.g. to make a
        trimmed index appendable again. Raises ValueError if that would cut valid entries."""
        self._check_writable()
        if max_index_bytes < 0:
            raise ValueError(f"max_index_bytes must be >= 0, got {max_index_bytes}")
        cdef Py_ssize_t size = max_index_bytes // self._esize * self._esize
        if size < self._entries * self._esize:
            raise ValueError(
                f"cannot resize index {self.path} to {size} bytes: it holds {self._entries} entries")
        self._resize_file(size)

    def flush(self):
        """msync(2) the mapping so entries are on disk (no-op when read-only)."""
        self._check_open()
        if self.writable and self._data != NULL:
            if msync(self._data, <size_t>self._map.length, MS_SYNC) != 0:
                _raise_errno("msync", self.path)

    def close(self):
        """Trim (when writable) and unmap; the object is unusable afterwards. Idempotent. A file already
        renamed or removed behind the index (its directory deleted) is left as it is."""
        if not self._is_open:
            return
        try:
            if self.writable:
                try:
                    self._resize_file(self._entries * self._esize)
                except FileNotFoundError:
                    pass
        finally:
            self._map = None
            self._data = NULL
            self._entries = self._max_entries = 0
            self._is_open = False

    def renamed(self, path):
        """The file was renamed to ``path`` (a segment marked deleted): the resizes and the trim on close that
        follow open it there (no descriptor is kept across calls)."""
        self.path = os.fsdecode(path)

    def array(self):
        """Read-only numpy view of the valid entries (live: shares the mapping).

        The view keeps its mapping alive past close()/resize(), but reading entries that a later
        truncate_to() + trim() cut from the file is SIGBUS: do not keep views across those."""
        self._check_open()
        if self._entries == 0:
            a = np.empty(0, dtype=self._dtype)
            a.flags.writeable = False
            return a
        return np.frombuffer(self._map, dtype=self._dtype, count=self._entries)

    def __enter__(self):
        self._check_open()
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        if not self._is_open:
            return f"<{type(self).__name__} {self.path!r} closed>"
        return (f"<{type(self).__name__} {self.path!r} base={self.base_offset} "
                f"entries={self._entries}/{self._max_entries}{'' if self.writable else ' read-only'}>")


cdef class OffsetIndex(_AbstractIndex):
    """Kafka's ``.index``: maps offsets to positions in the segment's ``.log`` file."""

    entry_size = 8
    _entry_dtype = _OFFSET_DTYPE
    _kind = "index"

    cdef Py_ssize_t c_slot_for_offset(self, int64_t offset) noexcept nogil:
        if offset < self.base_offset:   # also keeps offset - base from overflowing
            return -1
        return _largest_lower_bound(self._data, self._entries, 8, self._warm_entries,
                                    COL_OFFSET_REL, offset - self.base_offset)

    cdef Py_ssize_t c_slot_for_position(self, int64_t position) noexcept nogil:
        return _largest_lower_bound(self._data, self._entries, 8, self._warm_entries,
                                    COL_OFFSET_POS, position)

    cdef int64_t c_offset_at(self, Py_ssize_t n) noexcept nogil:
        return self.base_offset + _load(self._data, 8, COL_OFFSET_REL, n)

    cdef int64_t c_position_at(self, Py_ssize_t n) noexcept nogil:
        return _load(self._data, 8, COL_OFFSET_POS, n)

    cdef int c_append(self, int64_t offset, int64_t position) except -1:
        cdef char *p
        self._check_writable()
        self._check_room()   # checked first, as Kafka does
        if offset < self.base_offset or offset - self.base_offset > INT32_MAX:
            raise ValueError(f"offset {offset} is outside the int32 range of relative offsets "
                             f"from base offset {self.base_offset}")
        if self._entries > 0 and offset <= self.c_offset_at(self._entries - 1):
            raise ValueError(f"offset {offset} is not greater than the last indexed offset "
                             f"{self.c_offset_at(self._entries - 1)} in {self.path}")
        if position < 0 or position > INT32_MAX:
            raise ValueError(f"position {position} is outside 0..{INT32_MAX}")
        p = self._new_entry()
        kb_put_be32(p, <uint32_t>(offset - self.base_offset))
        kb_put_be32(p + 4, <uint32_t>position)
        return 0

    cdef tuple _pair(self, Py_ssize_t slot):
        if slot < 0:
            return (self.base_offset, 0)
        return (self.c_offset_at(slot), self.c_position_at(slot))

    cdef Py_ssize_t _count_offsets_below(self, int64_t relative_offset) noexcept:
        return _count_below(self._data, self._entries, 8, COL_OFFSET_REL, relative_offset)

    cdef int _check_entry(self, Py_ssize_t i) except -1:
        cdef int64_t rel = _load(self._data, 8, COL_OFFSET_REL, i), prev
        self._check_relative_offset(i, rel)
        if i > 0:
            prev = _load(self._data, 8, COL_OFFSET_REL, i - 1)
            if rel <= prev:
                raise CorruptIndexError(f"index {self.path}: entry {i} offset {self.base_offset + rel} "
                                        f"is not greater than the previous {self.base_offset + prev}")
        if _load(self._data, 8, COL_OFFSET_POS, i) > INT32_MAX:
            raise CorruptIndexError(f"index {self.path}: entry {i} has a negative position")
        return 0

    @property
    def last_offset(self):
        """Absolute offset of the last entry, or base_offset when empty."""
        self._check_open()
        if self._entries == 0:
            return self.base_offset
        return self.c_offset_at(self._entries - 1)

    def append(self, offset, position):
        """Add (offset, position). Raises IndexError when full, ValueError when offset is not greater
        than the last entry's (or below base, or relative offset/position out of int32 range)."""
        self.c_append(_as_i64(offset, "offset"), _as_i64(position, "position"))

    def lookup(self, offset):
        """(absolute offset, position) of the greatest entry with offset <= ``offset``;
        (base_offset, 0) when there is none. Searches the warm tail (last 8 KiB) first."""
        if not self._is_open:
            self._check_open()
        return self._pair(self.c_slot_for_offset(_index_i64(offset)))

    def lookup_by_position(self, position):
        """Greatest entry with position <= ``position``; (base_offset, 0) when there is none."""
        if not self._is_open:
            self._check_open()
        return self._pair(self.c_slot_for_position(_index_i64(position)))


cdef class TimeIndex(_AbstractIndex):
    """Kafka's ``.timeindex``: maps increasing timestamps to the offsets holding them."""

    entry_size = 12
    _entry_dtype = _TIME_DTYPE
    _kind = "time index"

    cdef Py_ssize_t c_slot_for_timestamp(self, int64_t timestamp) noexcept nogil:
        return _largest_lower_bound(self._data, self._entries, 12, self._warm_entries,
                                    COL_TIME_TS, timestamp)

    cdef int64_t c_timestamp_at(self, Py_ssize_t n) noexcept nogil:
        return _load(self._data, 12, COL_TIME_TS, n)

    cdef int64_t c_offset_at(self, Py_ssize_t n) noexcept nogil:
        return self.base_offset + _load(self._data, 12, COL_TIME_REL, n)

    cdef int c_maybe_append(self, int64_t timestamp, int64_t offset) except -1:
        cdef int64_t last_ts = -1, last_off = self.base_offset
        cdef char *p
        self._check_writable()
        if self._entries > 0:
            last_ts = self.c_timestamp_at(self._entries - 1)
            last_off = self.c_offset_at(self._entries - 1)
        if timestamp <= last_ts:   # Kafka only indexes a strictly newer max timestamp
            return 0
        self._check_room()
        if offset < last_off:
            raise ValueError(f"offset {offset} is below the last indexed offset {last_off} "
                             f"in {self.path}")
        if offset - self.base_offset > INT32_MAX:
            raise ValueError(f"offset {offset} is outside the int32 range of relative offsets "
                             f"from base offset {self.base_offset}")
        p = self._new_entry()
        kb_put_be64(p, <uint64_t>timestamp)
        kb_put_be32(p + 8, <uint32_t>(offset - self.base_offset))
        return 1

    cdef tuple _pair(self, Py_ssize_t slot):
        if slot < 0:
            return (-1, self.base_offset)
        return (self.c_timestamp_at(slot), self.c_offset_at(slot))

    cdef Py_ssize_t _count_offsets_below(self, int64_t relative_offset) noexcept:
        # Exact with duplicates, which this column may have.
        return _count_below(self._data, self._entries, 12, COL_TIME_REL, relative_offset)

    cdef int _check_entry(self, Py_ssize_t i) except -1:
        cdef int64_t ts = _load(self._data, 12, COL_TIME_TS, i), prev_ts
        cdef int64_t rel = _load(self._data, 12, COL_TIME_REL, i), prev_rel
        self._check_relative_offset(i, rel)
        if i == 0:
            return 0
        prev_ts = _load(self._data, 12, COL_TIME_TS, i - 1)
        prev_rel = _load(self._data, 12, COL_TIME_REL, i - 1)
        if ts <= prev_ts:
            raise CorruptIndexError(f"time index {self.path}: entry {i} timestamp {ts} is not "
                                    f"greater than the previous {prev_ts}")
        if rel < prev_rel:
            raise CorruptIndexError(f"time index {self.path}: entry {i} offset {self.base_offset + rel} "
                                    f"is below the previous {self.base_offset + prev_rel}")
        return 0

    @property
    def last_entry(self):
        """(timestamp, absolute offset) of the last entry, or (-1, base_offset) when empty."""
        self._check_open()
        return self._pair(self._entries - 1)

    def maybe_append(self, timestamp, offset):
        """Append when ``timestamp`` is greater than the last entry's (Kafka's rule); returns whether it
        did. Raises IndexError when full, ValueError when ``offset`` goes backwards with a newer timestamp."""
        return self.c_maybe_append(_as_i64(timestamp, "timestamp"), _as_i64(offset, "offset")) == 1

    def lookup(self, timestamp):
        """(timestamp, absolute offset) of the greatest entry with timestamp <= ``timestamp``;
        (-1, base_offset) when there is none."""
        if not self._is_open:
            self._check_open()
        return self._pair(self.c_slot_for_timestamp(_index_i64(timestamp)))
