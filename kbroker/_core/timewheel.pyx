# cython: language_level=3, embedsignature=True
"""Kafka's hierarchical timing wheel, for delayed operations.

Same structure as Kafka's TimingWheel/SystemTimer: level 0 has ``wheel_size`` buckets of
``tick_ms``; a timer beyond a level's interval (tick * size) goes to the overflow level, whose
tick is that interval, created on demand. A timer sits in bucket ``(expire // tick) % size`` of
the finest level whose window holds it, and each scheduled bucket is keyed by the start of its
tick in a small min-heap of buckets (Kafka's DelayQueue; one entry per bucket, not per timer).
``advance`` pops due buckets in order, moves the clock to each bucket's expiration and
reinserts its timers, which falls them down to finer levels or out as due, like
SystemTimer.advanceClock does with ``bucket.flush(addTimerTaskEntry)``.

Differences from Kafka, all in what ``advance`` returns:

* exact: an item is returned only once ``now_ms >= expire_ms`` (Kafka fires a whole tick
  early); items of the current tick that are not due yet wait on the due list;
* ordered: items come sorted by (expire // tick_ms, insertion order). Cascading appends old
  timers behind newer ones of the same tick, so the output is sorted when it is not already;
* never back: a ``now_ms`` below the latest one seen counts as the latest one.

Times are non-negative ms below 2**62 (so ``-1`` can mean "nothing" and sums never overflow);
an ``expire_ms`` below 0 is simply due.
"""
cimport cython
from cpython.long cimport PyLong_AsLongLongAndOverflow
from libc.stdint cimport INT64_MAX, int32_t, int64_t, uint32_t, uint64_t
from libc.stdlib cimport free, qsort, realloc

cdef extern from *:
    """
    #define KB_TW_TIME_MAX ((int64_t)0x3FFFFFFFFFFFFFFFLL)
    #define KB_TW_GEN_MASK 0x7FFFFFFFu
    #define KB_TW_SLOT_MAX 0x7FFFFFFF
    """
    const int64_t KB_TW_TIME_MAX     # times are in [0, 2**62): t + tick and t - cur fit int64
    const uint32_t KB_TW_GEN_MASK    # 31-bit generation keeps handles below 2**63
    const int32_t KB_TW_SLOT_MAX

cdef int32_t _POOL_START = 64
cdef int64_t _SIZE_MAX = 1 << 20     # buckets per level; keeps _nlevels * size in int32


cdef int _cmp_out(const void* a, const void* b) noexcept nogil:
    cdef const tw_out* x = <const tw_out*>a
    cdef const tw_out* y = <const tw_out*>b
    if x.key != y.key:
        return -1 if x.key < y.key else 1
    if x.seq != y.seq:
        return -1 if x.seq < y.seq else 1
    return 0


cdef inline void _heap_put(int32_t* heap, tw_bucket* bks, int32_t pos, int32_t b) noexcept nogil:
    """Place bucket ``b`` at ``pos`` of the bucket heap, keeping its back-pointer in step."""
    heap[pos] = b
    bks[b].heap_pos = pos


@cython.no_gc_clear  # tp_clear would set _items to None under a still-usable wheel
cdef class TimingWheel:
    """TimingWheel(tick_ms=1, wheel_size=20, start_ms=0)

    Hierarchical timing wheel. ``add`` returns an int handle for ``cancel``; ``advance(now_ms)``
    returns the due items. Not thread-safe: use it from one thread (the event loop).
    """

    def __cinit__(self, int64_t tick_ms=1, int64_t wheel_size=20, int64_t start_ms=0):
        if tick_ms < 1 or tick_ms > KB_TW_TIME_MAX:
            raise ValueError(f"tick_ms must be in [1, 2**62), got {tick_ms}")
        if wheel_size < 2 or wheel_size > _SIZE_MAX:
            raise ValueError(f"wheel_size must be in [2, {_SIZE_MAX}], got {wheel_size}")
        if start_ms < 0 or start_ms > KB_TW_TIME_MAX:
            raise ValueError(f"start_ms must be in [0, 2**62), got {start_ms}")
        self._size = wheel_size
        self._free = -1
        self._items = []
        self._due.head = self._due.tail = -1
        self._due.heap_pos = -1
        self._now = start_ms
        self._ticks[0] = tick_ms
        self._cur[0] = start_ms - start_ms % tick_ms
        self._add_level()
        self._grow_pool()

    def __dealloc__(self):
        # Items live in self._items, which Cython releases itself.
        free(self._buckets)
        free(self._heap)
        free(self._nodes)
        free(self._out)

    @property
    def current_ms(self):
        """Start of the current tick (start_ms rounded down to tick_ms, then advanced)."""
        return self._cur[0]

    def __len__(self):
        return self._len

    def __repr__(self):
        return (f"TimingWheel(tick_ms={self._ticks[0]}, wheel_size={self._size}, "
                f"current_ms={self._cur[0]}, pending={self._len}, levels={self._nlevels})")

    # ------------------------------------------------------------------ public API

    cpdef long long add(self, int64_t expire_ms, object item) except -1:
        """Schedule ``item``; returns a handle for cancel(). An item already due is returned by
        the next advance()."""
        cdef int32_t slot
        cdef int top = self._nlevels - 1
        cdef tw_node* n
        if expire_ms > KB_TW_TIME_MAX:
            raise OverflowError(f"expire_ms must be below 2**62, got {expire_ms}")
        if expire_ms < 0:
            expire_ms = 0
        # Everything that can fail happens before the timer is touched: overflow levels are
        # created here (so _place cannot fail) and the pool grows here.
        while (self._interval[top] != INT64_MAX
               and expire_ms - self._cur[top] >= self._interval[top]):
            self._add_level()
            top += 1
        if self._free < 0:
            self._grow_pool()
        slot = self._free
        n = &self._nodes[slot]
        self._free = n.next
        n.expire = expire_ms
        n.seq = self._seq
        if not self._place(slot):
            self._link(slot, TW_DUE)
            if self._due.count == 1 or expire_ms < self._due_min:
                self._due_min = expire_ms
        self._items[slot] = item
        self._seq += 1
        self._len += 1
        return (<long long>n.gen << 32) | slot

    cpdef bint cancel(self, object handle) except -1:
        """Remove a pending timer; False if it already expired, was cancelled, or is unknown."""
        cdef int overflow = 0
        cdef long long h = PyLong_AsLongLongAndOverflow(handle, &overflow)
        if overflow != 0 or h < 0:
            return False
        return self._cancel_handle(h)

    @cython.cdivision(True)     # expire >= 0 and tick_ms >= 1: C division is floor
    @cython.wraparound(False)   # slots are never negative
    cpdef list advance(self, int64_t now_ms):
        """Move the clock to ``now_ms`` and return every item with expire_ms <= now_ms, in bucket
        order (items of one tick in insertion order)."""
        cdef int32_t slot, nxt, b, i, m, nout = 0
        cdef int64_t exp, tick0 = self._ticks[0]
        cdef tw_node* nodes
        cdef tw_out* out
        cdef bint ordered = True
        cdef list result
        if now_ms > KB_TW_TIME_MAX:
            raise OverflowError(f"now_ms must be below 2**62, got {now_ms}")
        # Allocate the (GC-tracked) list first: creating one may run a collection, whose
        # finalizers may call back into this wheel. From here on nothing runs Python code.
        result = []
        if now_ms < self._now:
            now_ms = self._now
        self._now = now_ms
        nodes = self._nodes             # read only now: a finalizer may have grown the pool
        out = self._out

        # 1. Everything that is on the due list or falls out of a due bucket lands in _out
        #    (sized like the pool, so nothing here allocates or can fail halfway).
        slot = self._due.head
        while slot >= 0:
            out[nout].slot = slot
            nout += 1
            slot = nodes[slot].next
        self._due.head = self._due.tail = -1
        self._due.count = 0
        while self._heap_len > 0 and self._buckets[self._heap[0]].expiration <= now_ms:
            b = self._heap_pop()
            self._advance_clock(self._buckets[b].expiration)
            slot = self._buckets[b].head
            self._buckets[b].head = self._buckets[b].tail = -1
            self._buckets[b].count = 0
            while slot >= 0:
                nxt = nodes[slot].next
                if not self._place(slot):
                    out[nout].slot = slot
                    nout += 1
                slot = nxt
        self._advance_clock(now_ms)

        # 2. Keep what is due, put the rest of the current tick back on the due list.
        m = 0
        for i in range(nout):
            slot = out[i].slot
            exp = nodes[slot].expire
            if exp <= now_ms:
                out[m].slot = slot
                out[m].key = exp // tick0
                out[m].seq = nodes[slot].seq
                if m > 0 and _cmp_out(&out[m - 1], &out[m]) > 0:
                    ordered = False
                m += 1
            else:
                self._link(slot, TW_DUE)
                if self._due.count == 1 or exp < self._due_min:
                    self._due_min = exp
        if not ordered:
            qsort(out, m, sizeof(tw_out), _cmp_out)

        # 3. Hand the items over: fill the list first (growing it only reallocs, no GC) and free
        #    the timers once that cannot fail any more; if it does fail, they all stay due.
        try:
            for i in range(m):
                result.append(self._items[out[i].slot])
        except BaseException:
            for i in range(m):
                slot = out[i].slot
                self._link(slot, TW_DUE)
                if self._due.count == 1 or nodes[slot].expire < self._due_min:
                    self._due_min = nodes[slot].expire
            raise
        for i in range(m):
            slot = out[i].slot
            self._items[slot] = None     # result holds a reference: no finalizer runs here
            self._free_node(slot)
        return result

    cpdef long long next_expiry_ms(self):
        """Expiration of the earliest non-empty bucket (a lower bound for the next due item), or -1."""
        cdef long long best = -1
        # Cancels leave empty buckets scheduled (cancel stays O(1)); drop them lazily here.
        while self._heap_len > 0 and self._buckets[self._heap[0]].count == 0:
            self._heap_pop()
        if self._heap_len > 0:
            best = self._buckets[self._heap[0]].expiration
        if self._due.count > 0 and (best < 0 or self._due_min < best):
            best = self._due_min
        return best

    # ------------------------------------------------------------------ internals

    @cython.wraparound(False)   # slot is never negative
    cdef bint _cancel_handle(self, long long handle) except -1:
        cdef int64_t slot = handle & 0xFFFFFFFF
        cdef uint32_t gen = <uint32_t>(handle >> 32)
        cdef tw_node* n
        cdef object old
        if slot >= self._cap:
            return False
        n = &self._nodes[slot]
        if n.bucket == TW_FREE or n.gen != gen:
            return False
        self._unlink(<int32_t>slot)
        old = self._items[slot]          # keeps the item alive until the wheel is consistent,
        self._items[slot] = None         # so a finalizer may safely call back into the wheel
        self._free_node(<int32_t>slot)
        return True

    cdef int _add_level(self) except -1:
        """Create level _nlevels (Kafka's addOverflowWheel). Level 0's tick and current time are
        set by the caller; an overflow level's tick is the interval of the level below."""
        cdef int lvl = self._nlevels
        cdef int64_t tick, i, nb
        cdef tw_bucket* buckets
        cdef int32_t* heap
        if lvl >= TW_MAX_LEVELS:
            raise OverflowError("timing wheel hierarchy too deep")
        if lvl > 0:
            tick = self._interval[lvl - 1]
            self._ticks[lvl] = tick
            self._cur[lvl] = self._cur[lvl - 1] - self._cur[lvl - 1] % tick
        tick = self._ticks[lvl]
        # Past this the interval overflows int64; since every time difference fits int64, a
        # level that spans "everything" needs no overflow level of its own.
        self._interval[lvl] = tick * self._size if tick <= INT64_MAX // self._size else INT64_MAX
        nb = (lvl + 1) * self._size
        buckets = <tw_bucket*>realloc(self._buckets, nb * sizeof(tw_bucket))
        if buckets == NULL:
            raise MemoryError()
        self._buckets = buckets
        heap = <int32_t*>realloc(self._heap, nb * sizeof(int32_t))  # each bucket at most once
        if heap == NULL:
            raise MemoryError()
        self._heap = heap
        for i in range(lvl * self._size, nb):
            buckets[i].expiration = 0
            buckets[i].head = buckets[i].tail = -1
            buckets[i].count = 0
            buckets[i].heap_pos = -1
        self._nlevels = lvl + 1
        return 0

    cdef int _grow_pool(self) except -1:
        """Double the node pool (and the advance scratch, and the item list) and put the new
        slots on the free list, lowest first."""
        cdef int32_t cap, i
        cdef int64_t newcap
        cdef tw_node* nodes
        cdef tw_out* out
        cdef list pad
        while True:
            cap = self._cap
            newcap = cap * 2 if cap else _POOL_START
            if newcap > KB_TW_SLOT_MAX:
                newcap = KB_TW_SLOT_MAX
            if newcap <= cap:
                raise MemoryError("timing wheel is full (2**31 - 1 timers)")
            # This allocation may run the GC, and a finalizer may add timers (growing the pool
            # itself): only proceed if the pool is still the one measured above.
            pad = [None] * (newcap - cap)
            if self._free >= 0:
                return 0
            if self._cap == cap:
                break
        nodes = <tw_node*>realloc(self._nodes, newcap * sizeof(tw_node))
        if nodes == NULL:
            raise MemoryError()
        self._nodes = nodes
        out = <tw_out*>realloc(self._out, newcap * sizeof(tw_out))
        if out == NULL:
            raise MemoryError()
        self._out = out
        self._items.extend(pad)          # list + list: a realloc, no GC, no Python code
        for i in range(<int32_t>newcap - 1, self._cap - 1, -1):
            nodes[i].bucket = TW_FREE
            nodes[i].gen = 0
            nodes[i].prev = -1
            nodes[i].next = self._free
            self._free = i
        self._cap = <int32_t>newcap
        return 0

    @cython.cdivision(True)     # operands are non-negative and tick >= 1: C division is floor
    cdef bint _place(self, int32_t slot) noexcept:
        """Kafka's TimingWheel.add: link the timer into the finest level whose window holds it.
        Returns False (and links nothing) if it belongs to the current tick, i.e. is due.
        The levels it needs exist: add() creates them, and a reinserted timer only moves down."""
        cdef tw_node* n = &self._nodes[slot]
        cdef int64_t exp = n.expire, tick, vid, vexp
        cdef int lvl = 0
        cdef int32_t b
        cdef tw_bucket* bk
        if exp < self._cur[0] + self._ticks[0]:
            return False
        while exp - self._cur[lvl] >= self._interval[lvl] and self._interval[lvl] != INT64_MAX:
            lvl += 1
        tick = self._ticks[lvl]
        vid = exp // tick
        vexp = vid * tick
        b = <int32_t>(lvl * self._size + vid % self._size)
        self._link(slot, b)
        bk = &self._buckets[b]
        if bk.heap_pos < 0:
            bk.expiration = vexp
            bk.heap_pos = self._heap_len
            self._heap[self._heap_len] = b
            self._heap_len += 1
            self._heap_up(bk.heap_pos)
        elif vexp < bk.expiration:
            # Only the all-spanning top level can mix rounds in one bucket; keep the earliest so
            # the bucket is never late (its other timers are simply reinserted when it fires).
            bk.expiration = vexp
            self._heap_up(bk.heap_pos)
        return True

    @cython.cdivision(True)     # t >= 0, tick >= 1
    cdef void _advance_clock(self, int64_t t) noexcept:
        """Kafka's advanceClock: each level's current time becomes t rounded down to its tick.
        A level that does not move cannot move the (coarser) levels above it."""
        cdef int lvl
        for lvl in range(self._nlevels):
            if t < self._cur[lvl] + self._ticks[lvl]:
                break
            self._cur[lvl] = t - t % self._ticks[lvl]

    cdef void _link(self, int32_t slot, int32_t bucket) noexcept:
        """Append slot to the tail of bucket (TW_DUE: the due list)."""
        cdef tw_bucket* bk = &self._due if bucket == TW_DUE else &self._buckets[bucket]
        cdef tw_node* n = &self._nodes[slot]
        n.bucket = bucket
        n.next = -1
        n.prev = bk.tail
        if bk.tail >= 0:
            self._nodes[bk.tail].next = slot
        else:
            bk.head = slot
        bk.tail = slot
        bk.count += 1

    cdef void _unlink(self, int32_t slot) noexcept:
        cdef tw_node* n = &self._nodes[slot]
        cdef tw_bucket* bk = &self._due if n.bucket == TW_DUE else &self._buckets[n.bucket]
        if n.prev >= 0:
            self._nodes[n.prev].next = n.next
        else:
            bk.head = n.next
        if n.next >= 0:
            self._nodes[n.next].prev = n.prev
        else:
            bk.tail = n.prev
        bk.count -= 1

    cdef void _free_node(self, int32_t slot) noexcept:
        cdef tw_node* n = &self._nodes[slot]
        n.bucket = TW_FREE
        n.gen = (n.gen + 1) & KB_TW_GEN_MASK    # invalidates every handle issued for this slot
        n.prev = -1
        n.next = self._free
        self._free = slot
        self._len -= 1

    cdef void _heap_up(self, int32_t pos) noexcept:
        cdef int32_t* heap = self._heap
        cdef tw_bucket* bks = self._buckets
        cdef int32_t b = heap[pos], parent
        cdef int64_t e = bks[b].expiration
        while pos > 0:
            parent = (pos - 1) >> 1
            if bks[heap[parent]].expiration <= e:
                break
            _heap_put(heap, bks, pos, heap[parent])
            pos = parent
        _heap_put(heap, bks, pos, b)

    cdef void _heap_down(self, int32_t pos) noexcept:
        cdef int32_t* heap = self._heap
        cdef tw_bucket* bks = self._buckets
        cdef int32_t b = heap[pos], child
        cdef int64_t e = bks[b].expiration
        while True:
            child = 2 * pos + 1
            if child >= self._heap_len:
                break
            if child + 1 < self._heap_len and \
                    bks[heap[child + 1]].expiration < bks[heap[child]].expiration:
                child += 1
            if e <= bks[heap[child]].expiration:
                break
            _heap_put(heap, bks, pos, heap[child])
            pos = child
        _heap_put(heap, bks, pos, b)

    cdef int32_t _heap_pop(self) noexcept:
        """Unschedule and return the earliest bucket (the heap must not be empty)."""
        cdef int32_t top = self._heap[0]
        self._heap_len -= 1
        if self._heap_len > 0:
            self._heap[0] = self._heap[self._heap_len]
            self._heap_down(0)
        self._buckets[top].heap_pos = -1
        return top
