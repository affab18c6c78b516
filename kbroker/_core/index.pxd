# cython: language_level=3
"""C-level declarations of kbroker._core.index, so other Cython modules (the log layer) can
``cimport`` the index classes and call the ``nogil`` lookups without going through Python."""

from libc.stdint cimport int64_t


cdef class _Mapping:
    """One mmap(2) region; unmapped when its last owner (index or numpy view) is gone."""
    cdef char *addr
    cdef Py_ssize_t length


cdef class _AbstractIndex:
    cdef public str path
    cdef readonly int64_t base_offset
    cdef readonly bint writable
    cdef bint _is_open                  # False once closed (no descriptor is kept: see _reopen)
    cdef Py_ssize_t _esize              # entry size in bytes
    cdef Py_ssize_t _warm_entries       # Kafka's warm tail: 8192 // entry size
    cdef Py_ssize_t _max_index_bytes    # size requested at open, restored by reset()
    cdef Py_ssize_t _entries
    cdef Py_ssize_t _max_entries        # whole entries the current mapping can hold
    cdef Py_ssize_t _reserved           # bytes from the start known to be allocated on disk
    cdef char *_data                    # == _map.addr (NULL when nothing is mapped)
    cdef _Mapping _map
    cdef object _dtype

    cdef int _open(self, object path, int64_t base_offset, Py_ssize_t max_index_bytes,
                   bint writable, Py_ssize_t esize, object dtype) except -1
    cdef int _check_open(self) except -1
    cdef int _check_writable(self) except -1
    cdef int _check_length(self) except -1
    cdef int _reserve(self, Py_ssize_t end) except -1
    cdef int _reopen(self) except -1
    cdef int _resize_file(self, Py_ssize_t size) except -1
    cdef int _resize_fd(self, int fd, Py_ssize_t size) except -1
    cdef int _truncate_entries(self, Py_ssize_t n) except -1
    cdef Py_ssize_t _norm_entry(self, Py_ssize_t n) except -1
    cdef int _check_room(self) except -1
    cdef char *_new_entry(self) except NULL
    cdef int _check_relative_offset(self, Py_ssize_t i, int64_t relative_offset) except -1
    # Defined by each kind of index.
    cdef tuple _pair(self, Py_ssize_t slot)
    cdef Py_ssize_t _count_offsets_below(self, int64_t relative_offset) noexcept
    cdef int _check_entry(self, Py_ssize_t i) except -1


cdef class OffsetIndex(_AbstractIndex):
    # Slot (0-based entry number) of the greatest entry <= key, or -1. Callers must hold the GIL
    # or otherwise exclude concurrent appends/resizes; safe (returns -1) on a closed index.
    cdef Py_ssize_t c_slot_for_offset(self, int64_t offset) noexcept nogil
    cdef Py_ssize_t c_slot_for_position(self, int64_t position) noexcept nogil
    # Absolute offset / file position of entry ``n`` (0 <= n < _entries, unchecked).
    cdef int64_t c_offset_at(self, Py_ssize_t n) noexcept nogil
    cdef int64_t c_position_at(self, Py_ssize_t n) noexcept nogil
    cdef int c_append(self, int64_t offset, int64_t position) except -1


cdef class TimeIndex(_AbstractIndex):
    cdef Py_ssize_t c_slot_for_timestamp(self, int64_t timestamp) noexcept nogil
    cdef int64_t c_timestamp_at(self, Py_ssize_t n) noexcept nogil
    cdef int64_t c_offset_at(self, Py_ssize_t n) noexcept nogil
    # 1 when appended, 0 when the timestamp is not newer than the last entry's.
    cdef int c_maybe_append(self, int64_t timestamp, int64_t offset) except -1
