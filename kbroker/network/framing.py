"""Kafka's framing on the way in: a 4-byte big-endian size, then that many bytes of request.

``recv_into`` a scratch buffer; small frames are copied out of it (one memcpy of a few bytes beats a syscall per
frame), a frame bigger than what the scratch holds gets a buffer of its own and the socket (or the TLS transport)
reads straight into it, so Produce payloads land where the log will validate them in place.
``socket.request.max.bytes`` is checked on the 4-byte size, before any allocation. The frame's buffer grows as its
bytes arrive: a peer that claims 100 MB and sends 64 KiB costs 256 KiB, not 100 MB. A plaintext connection reads
into one scratch shared by the loop and owns a scratch (from a small pool) only while it holds part of a frame, so
thousands of idle connections cost a few KiB each, not 64 KiB.

Big frames' buffers are pooled (at most BIG_POOL_COUNT of them, BIG_POOL_BYTES together): a new bytearray is
zero-filled by CPython, a memset that was 4-5 % of the broker's CPU under a Produce load. A pooled buffer is
reused only once nothing but the pool refers to it (``sys.getrefcount``): the frame handed on, every memoryview of
it (the decoded request's records) and every Py_buffer pinned on it (an appender's write) hold a reference, so a
buffer some request still uses is never handed out again, whenever that request ends. A pooled buffer may be
longer than its frame: the frame is then a memoryview of its first ``size`` bytes.
"""
from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TypeAlias

SCRATCH_BYTES = 64 * 1024
BIG_FIRST_BYTES = 256 * 1024  # a big frame's buffer starts at this (or twice what arrived) ...
BIG_GROWTH = 8                # ... and grows by this factor when full
_SHARED_SCRATCH = bytearray(SCRATCH_BYTES)  # plaintext reads land here (the loop is one thread)
_SPARE_SCRATCH: list[bytearray] = []        # owned scratches given back, reused
SPARE_SCRATCH_KEPT = 32
BIG_POOL_COUNT = 8                # big frame buffers kept for reuse ...
BIG_POOL_BYTES = 32 * 1024 * 1024  # ... and their bytes together
# lent ones included: a buffer is free when nothing else refers to it (checked and taken on the loop's one thread)
_BIG_POOL: list[bytearray] = []

# a whole request: a small frame's copy, a big frame's buffer, or a view of a longer pooled buffer's first bytes
Frame: TypeAlias = bytearray | memoryview


def _refs(pool: list[bytearray], i: int) -> int:
    return sys.getrefcount(pool[i])


_UNUSED_REFS = _refs([bytearray(1)], 0)  # what _refs says of a buffer only the pool holds


def _take_big(need: int, want: int) -> bytearray:
    """A buffer for a big frame of ``want`` bytes, at least ``need`` long: the shortest free pooled one holding the
    whole frame, else the longest free one of at least ``need``, else a new one of ``need`` bytes."""
    pool = _BIG_POOL
    whole = part = -1
    for i in range(len(pool)):
        if _refs(pool, i) != _UNUSED_REFS:
            continue  # lent: a frame, a view of it or a pinned write still holds it
        size = len(pool[i])
        if size >= want:
            if whole < 0 or size < len(pool[whole]):
                whole = i
        elif size >= need and (part < 0 or size > len(pool[part])):
            part = i
    if whole >= 0 or part >= 0:
        return pool[whole if whole >= 0 else part]
    fresh = bytearray(need)
    _keep(fresh)
    return fresh


def _keep(fresh: bytearray) -> None:
    """Pool a new buffer if the bounds allow, making room by dropping free pooled buffers shorter than it (the
    shortest first): the pool drifts towards the sizes of the frames that come."""
    pool, size = _BIG_POOL, len(fresh)
    held = sum(map(len, pool))
    shorter = sorted((i for i in range(len(pool)) if len(pool[i]) < size and _refs(pool, i) == _UNUSED_REFS),
                     key=lambda i: len(pool[i]))
    dropped: set[int] = set()
    for i in shorter:
        if len(pool) - len(dropped) < BIG_POOL_COUNT and held + size <= BIG_POOL_BYTES:
            break
        dropped.add(i)
        held -= len(pool[i])
    if len(pool) - len(dropped) < BIG_POOL_COUNT and held + size <= BIG_POOL_BYTES:
        pool[:] = [b for i, b in enumerate(pool) if i not in dropped]
        pool.append(fresh)


class FrameReader:
    """One connection's inbound bytes cut into frames, each handed whole to ``on_frame``.

    Bytes come in two ways: ``room()`` then ``advance(n)`` (a plaintext socket, one ``recv_into`` per readable
    event), or ``fill(read, dry)`` (TLS: plaintext decrypted record by record until the source runs dry).
    ``taking()`` says whether the connection takes frames now (open and reading); parsing stops when it does not
    and goes on with ``parse_buffered()``. A frame larger than ``max_frame`` goes to ``on_oversize`` with its
    size and its first two bytes (a TLS record spoken to a plaintext listener starts 0x16 0x03), and nothing
    more is parsed."""

    def __init__(self, max_frame: int, on_frame: Callable[[Frame], None],
                 on_oversize: Callable[[int, bytes], None], taking: Callable[[], bool], *, borrow: bool) -> None:
        self.max_frame = max_frame
        self._on_frame = on_frame
        self._on_oversize = on_oversize
        self._taking = taking
        # plaintext borrows the shared scratch while idle; TLS decrypts into a scratch of its own
        self._borrow = borrow
        self._scratch = _SHARED_SCRATCH if borrow else bytearray(SCRATCH_BYTES)
        self._scratch_view = memoryview(self._scratch)
        self._start = 0   # first unparsed byte in scratch
        self._end = 0     # end of received bytes in scratch
        self._big: bytearray | None = None  # a frame being received directly (grows as it arrives)
        self._big_view: memoryview | None = None
        self._big_got = 0
        self._big_size = 0  # the frame's size
        self._closed = False

    def limit(self, max_frame: int) -> None:
        """Frames over ``max_frame`` bytes go to ``on_oversize`` from now on (SASL lowers it while it authenticates)."""
        self.max_frame = max_frame

    @property
    def buffered(self) -> bool:
        """Bytes wait in the scratch (whole frames, perhaps, that no readable event will announce)."""
        return self._start != self._end

    def close(self) -> None:
        """The connection is gone: settle nothing more, keep no frame."""
        self._closed = True
        self._big = self._big_view = None

    # -- a socket: room, then advance ---------------------------------------------------------

    def room(self) -> memoryview:
        """Where the next received bytes go: the rest of the big frame, or the scratch's free end (a partial
        frame at the scratch's end moved to its front first)."""
        if self._big is not None:
            return self._big_room()
        self._compact()
        return self._scratch_view[self._end:]

    def advance(self, n: int) -> None:
        """``n`` bytes arrived in ``room()``: hand on the frames they complete."""
        if self._big is not None:
            self._big_got += n
            if self._big_got == self._big_size:
                self._on_frame(self._take_whole())
            return
        self._end += n
        self._parse()
        self._settle()

    def parse_buffered(self) -> None:
        """Frames received before the connection stopped taking them: parse them now."""
        if self._big is None and self._start != self._end:
            self._parse()
            self._settle()

    # -- a decrypting source ------------------------------------------------------------------

    def fill(self, read: Callable[[int, memoryview], int], dry: type[Exception]) -> bool:
        """Take plaintext from ``read(nbytes, into)`` (one TLS record per call, ``dry`` raised once none is
        left) while the connection takes frames. False when the source ended (a read of 0 bytes)."""
        while self._taking():
            big = self._big
            if big is not None:
                # a large frame (Produce): fill it record by record in a tight loop, one record per read
                # being all OpenSSL gives (clients often write records of a few KiB)
                got, total = self._big_got, self._big_size
                try:
                    while got < total:
                        if got == len(big):
                            self._big_got = got
                            self._big_room()
                            big = self._big
                            assert big is not None
                        view = self._big_view
                        assert view is not None
                        end = min(len(big), total)  # a pooled buffer may be longer than the frame
                        n = read(end - got, view[got:end])
                        if not n:
                            return False
                        got += n
                except dry:
                    self._big_got = got
                    return True
                self._big_got = got
                self._on_frame(self._take_whole())
                continue
            self._compact()
            # small frames: fill the scratch with as many records as wait, then parse them
            end, cap, view = self._end, len(self._scratch), self._scratch_view
            running_dry = False
            try:
                while end < cap:
                    n = read(cap - end, view[end:])
                    if not n:
                        return False
                    end += n
            except dry:
                running_dry = True
            self._end = end
            self._parse()
            if running_dry:
                break
        return True

    # -- inside -------------------------------------------------------------------------------

    def _compact(self) -> None:
        """Room at the scratch's end: empty, it starts over; full, its partial frame moves to the front."""
        if self._start == self._end:
            self._start = self._end = 0
        elif self._end == len(self._scratch):
            left = self._end - self._start
            self._scratch[:left] = self._scratch[self._start:self._end]
            self._start, self._end = 0, left

    def _big_room(self) -> memoryview:
        """Where the rest of the big frame goes (never past its end). A full buffer is replaced by one BIG_GROWTH
        times larger (at most the frame's size; a free pooled one if there is one), so memory follows the bytes
        received, not the size the peer claimed. Another buffer and one copy: measured on 1 MiB Produce frames,
        doubling in place (bytearray.extend) cost the broker 2.3x the CPU of allocating the whole frame at once;
        one 8x step from 256 KiB costs the same as the single allocation."""
        big = self._big
        assert big is not None and self._big_view is not None  # set together with _big
        got, size = self._big_got, self._big_size
        if got == len(big):
            grown = _take_big(min(size, BIG_GROWTH * len(big)), size)
            grown[:got] = self._big_view[:got]
            self._big_view.release()
            self._big, self._big_view = grown, memoryview(grown)
        return self._big_view[got:size]

    def _take_whole(self) -> Frame:
        """The big frame, all received: its buffer, or a view of its first bytes if the buffer is longer."""
        big, view, size = self._big, self._big_view, self._big_size
        assert big is not None and view is not None  # set together with _big
        self._big, self._big_view, self._big_got = None, None, 0
        return big if len(big) == size else view[:size]

    def _parse(self) -> None:
        scratch = self._scratch
        while self._taking() and self._end - self._start >= 4:
            start = self._start
            size = int.from_bytes(scratch[start:start + 4], "big", signed=True)
            if size < 0 or size > self.max_frame:
                return self._on_oversize(size, bytes(scratch[start:start + 2]))
            have = self._end - start - 4
            if have >= size:
                frame = scratch[start + 4:start + 4 + size]  # a small copy, owned by the request
                self._start = start + 4 + size
                self._on_frame(frame)
            elif size > len(scratch) - 4:
                # big frame: the socket fills it directly, its buffer growing with what arrives
                frame = _take_big(min(size, max(BIG_FIRST_BYTES, 2 * have)), size)
                frame[:have] = scratch[start + 4:self._end]
                self._start = self._end = 0
                self._big, self._big_view, self._big_got, self._big_size = frame, memoryview(frame), have, size
                return
            else:
                return

    def _settle(self) -> None:
        """Plaintext: give an emptied owned scratch back; move a partial frame out of the shared one."""
        if not self._borrow or self._closed:
            return
        scratch = self._scratch
        if self._start == self._end:
            self._start = self._end = 0
            if scratch is not _SHARED_SCRATCH:
                if len(_SPARE_SCRATCH) < SPARE_SCRATCH_KEPT:
                    _SPARE_SCRATCH.append(scratch)
                self._use_scratch(_SHARED_SCRATCH)
        elif scratch is _SHARED_SCRATCH:
            own = _SPARE_SCRATCH.pop() if _SPARE_SCRATCH else bytearray(SCRATCH_BYTES)
            left = self._end - self._start
            own[:left] = scratch[self._start:self._end]
            self._use_scratch(own)
            self._start, self._end = 0, left

    def _use_scratch(self, scratch: bytearray) -> None:
        self._scratch = scratch
        self._scratch_view = memoryview(scratch)
