# cython: language_level=3, embedsignature=True
"""C-level layout of kbroker._core.timewheel.TimingWheel, for modules that cimport it.

Timer nodes live in one malloc'd pool and are addressed by slot index (int32), so the
per-bucket doubly linked lists are intrusive and add/cancel never allocate once the pool
is warm. A handle is ``gen << 32 | slot``: the generation is bumped whenever a slot is
freed, so a handle kept after its timer fired or was cancelled never matches a reused slot.
"""
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t

# Deepest possible hierarchy: tick >= 1 and wheel_size >= 2, so after at most 62 levels the
# next interval would not fit in int64 and the top level takes everything (see _add_level).
cdef enum:
    TW_MAX_LEVELS = 64
    TW_FREE = -1        # tw_node.bucket of a slot on the free list
    TW_DUE = -2         # tw_node.bucket of a timer on the due list

ctypedef struct tw_node:
    int64_t expire      # absolute expiry in ms (clamped to >= 0)
    uint64_t seq        # insertion counter: orders the items of one tick
    int32_t prev        # neighbours in the bucket (or due) list; -1 = none.
    int32_t next        # while the slot is free, `next` links the free list
    int32_t bucket      # global bucket index, TW_DUE or TW_FREE
    uint32_t gen        # 31-bit generation, part of the handle

ctypedef struct tw_bucket:
    int64_t expiration  # tick start of the bucket's current round (valid while heap_pos >= 0)
    int32_t head
    int32_t tail
    int32_t count
    int32_t heap_pos    # position in the bucket heap, -1 when not scheduled

ctypedef struct tw_out:
    int64_t key         # expire // tick_ms of level 0: "bucket order"
    uint64_t seq
    int32_t slot


cdef class TimingWheel:
    cdef int64_t _size                          # buckets per level
    cdef int _nlevels
    cdef int64_t _ticks[TW_MAX_LEVELS]          # tick of each level (level 0 = tick_ms)
    cdef int64_t _cur[TW_MAX_LEVELS]            # current time of each level, multiple of its tick
    cdef int64_t _interval[TW_MAX_LEVELS]       # tick * size, or INT64_MAX: the level takes everything

    cdef tw_bucket* _buckets                    # _nlevels * _size buckets, level-major
    cdef int32_t* _heap                         # min-heap of scheduled buckets by expiration
    cdef int32_t _heap_len

    cdef tw_node* _nodes                        # the timer pool
    cdef tw_out* _out                           # scratch for advance(), same capacity as the pool
    cdef int32_t _cap
    cdef int32_t _free                          # head of the free-slot list, -1 if the pool is full
    cdef list _items                            # _items[slot] is the timer's item (None when free)
    cdef Py_ssize_t _len
    cdef uint64_t _seq

    cdef tw_bucket _due                         # timers already in (or before) the current tick
    cdef int64_t _due_min                       # lower bound of the due timers' expiries
    cdef int64_t _now                           # latest now_ms seen: the clock never goes back

    cpdef long long add(self, int64_t expire_ms, object item) except -1
    cpdef bint cancel(self, object handle) except -1
    cpdef list advance(self, int64_t now_ms)
    cpdef long long next_expiry_ms(self)

    cdef bint _cancel_handle(self, long long handle) except -1
    cdef int _add_level(self) except -1
    cdef int _grow_pool(self) except -1
    cdef bint _place(self, int32_t slot) noexcept
    cdef void _advance_clock(self, int64_t t) noexcept
    cdef void _link(self, int32_t slot, int32_t bucket) noexcept
    cdef void _unlink(self, int32_t slot) noexcept
    cdef void _free_node(self, int32_t slot) noexcept
    cdef void _heap_up(self, int32_t pos) noexcept
    cdef void _heap_down(self, int32_t pos) noexcept
    cdef int32_t _heap_pop(self) noexcept
