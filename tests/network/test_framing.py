"""FrameReader's pool of big frame buffers: frames parse right across reuse (sockets and TLS-style fills, in any
chunking), a buffer anything still refers to (the frame, a view of its records, a write pinning it) is not handed
out again, the pool keeps to its bounds, and a Produce request decoded from a pooled buffer through a real
Connection carries its records exactly."""
from __future__ import annotations

import asyncio
import os
import random
import socket
import time

import pytest

from kbroker.network import framing
from kbroker.network.framing import BIG_FIRST_BYTES, SCRATCH_BYTES, FrameReader
from kbroker.protocol import encode_request
from tests.network.loopback import connection_on_loopback, read_frame

KIB = 1024


class Dry(Exception):
    pass


@pytest.fixture(autouse=True)
def empty_pool(monkeypatch):
    """Each test starts with an empty pool of its own (the module's is shared by every reader in a process)."""
    pool: list[bytearray] = []
    monkeypatch.setattr(framing, "_BIG_POOL", pool)
    return pool


def stream_of(frames: list[bytes]) -> bytes:
    return b"".join(len(f).to_bytes(4, "big") + f for f in frames)


class Reader:
    """A plaintext FrameReader fed by hand; ``keep(frame)`` decides what a frame's consumer holds on to."""

    def __init__(self, keep=lambda frame: None) -> None:
        self.frames: list[bytes] = []
        self.kept: list[object] = []
        self.buffers: list[int] = []  # id of each big frame's underlying buffer, in order
        self._keep = keep
        self.reader = FrameReader(64 << 20, self._frame, lambda size, head: pytest.fail(f"refused {size}"),
                                  lambda: True, borrow=True)

    def _frame(self, frame) -> None:
        self.frames.append(bytes(frame))
        if len(frame) > SCRATCH_BYTES - 4:
            self.buffers.append(id(frame.obj if isinstance(frame, memoryview) else frame))
        kept = self._keep(frame)
        if kept is not None:
            self.kept.append(kept)

    def feed(self, data: bytes, chunks: list[int]) -> None:
        """``data`` as recv_into would land it, at most ``chunks[i]`` bytes per call (cycled)."""
        pos, i = 0, 0
        while pos < len(data):
            room = self.reader.room()
            n = min(len(room), chunks[i % len(chunks)], len(data) - pos)
            room[:n] = data[pos:pos + n]
            del room
            self.reader.advance(n)
            pos += n
            i += 1


def test_frames_parse_right_across_reuse_in_any_chunking(empty_pool, monkeypatch):
    fresh = []
    keep = framing._keep
    monkeypatch.setattr(framing, "_keep", lambda buf: (fresh.append(len(buf)), keep(buf)))
    rng = random.Random(29)
    sizes = [300 * KIB, 70 * KIB, 5, 1100 * KIB, 0, 2 * 1024 * KIB + 3, 200 * KIB, 65 * KIB, 3 * 1024 * KIB, 12]
    frames = [rng.randbytes(n) for n in sizes * 3]
    r = Reader()
    r.feed(stream_of(frames), [rng.choice([1, 3, 4000, 65536, 1 << 20]) for _ in range(50)])
    assert r.frames == frames
    big = [f for f in frames if len(f) > SCRATCH_BYTES - 4]
    assert len(r.buffers) == len(big) == 21
    # the first round allocates (its growth steps too), the next two take what the pool holds
    assert 0 < len(fresh) <= 10 and len(empty_pool) <= framing.BIG_POOL_COUNT
    fresh.clear()
    r.feed(stream_of(frames), [65536])
    assert r.frames[30:] == frames and fresh == []


def test_a_steady_size_reuses_one_buffer_and_allocates_nothing_more(empty_pool):
    frames = [os.urandom(1000 * KIB) for _ in range(6)]
    r = Reader()
    r.feed(stream_of(frames[:1]), [65536])
    assert [len(b) for b in empty_pool] == [BIG_FIRST_BYTES, 1000 * KIB]  # first buffer, grown once
    pooled = [id(b) for b in empty_pool]  # ids only: a reference here would keep them from reuse
    r.feed(stream_of(frames[1:]), [65536])
    assert r.frames == frames
    assert r.buffers[1:] == [pooled[1]] * 5 and [id(b) for b in empty_pool] == pooled


def test_a_pooled_buffer_longer_than_the_frame_is_handed_on_as_a_view_of_its_length(empty_pool):
    seen = []
    r = Reader(keep=lambda frame: seen.append((type(frame), len(frame))))
    big, small = os.urandom(900 * KIB), os.urandom(100 * KIB)
    r.feed(stream_of([big, small, big]), [4096])
    assert r.frames == [big, small, big]
    assert seen == [(bytearray, len(big)), (memoryview, len(small)), (bytearray, len(big))]
    # the 900 KiB frame grew from a 256 KiB buffer, which then carried the 100 KiB one; the 900 KiB buffer came back
    assert [len(b) for b in empty_pool] == [BIG_FIRST_BYTES, len(big)]
    assert r.buffers == [id(empty_pool[1]), id(empty_pool[0]), id(empty_pool[1])]


def test_a_frame_still_held_keeps_its_buffer_out_of_reuse(empty_pool):
    frames = [os.urandom(400 * KIB) for _ in range(4)]
    r = Reader(keep=lambda frame: frame)  # a handler that holds on to every frame
    r.feed(stream_of(frames), [65536])
    assert len(set(r.buffers)) == 4
    assert [bytes(k) for k in r.kept] == frames  # nothing was overwritten by a later frame
    r.kept.clear()
    r.feed(stream_of(frames[:1]), [65536])
    assert r.buffers[-1] in r.buffers[:4]  # let go: reused


def test_a_view_of_the_records_keeps_its_buffer_out_of_reuse(empty_pool):
    """What a decoded request holds: a memoryview slice into the frame (the frame itself let go)."""
    frames = [os.urandom(500 * KIB) for _ in range(3)]
    r = Reader(keep=lambda frame: memoryview(frame)[1000:2000] if not r.kept else None)
    r.feed(stream_of(frames), [65536])
    view = r.kept[0]
    assert bytes(view) == frames[0][1000:2000]
    assert r.buffers[0] not in r.buffers[1:] and r.buffers[1] == r.buffers[2]
    del view
    r.kept.clear()
    r.feed(stream_of(frames[:1]), [65536])
    assert r.buffers[-1] == r.buffers[0]  # the first of the two free 500 KiB buffers


def test_the_pool_keeps_to_its_count_and_bytes(empty_pool, monkeypatch):
    monkeypatch.setattr(framing, "BIG_POOL_COUNT", 3)
    monkeypatch.setattr(framing, "BIG_POOL_BYTES", 3 * 1024 * KIB)
    r = Reader(keep=lambda frame: frame)  # every frame held: nothing is free to reuse
    frames = [os.urandom(200 * KIB) for _ in range(6)]
    r.feed(stream_of(frames), [65536])
    assert len(empty_pool) == 3 and len(set(r.buffers)) == 6
    r.kept.clear()
    huge = os.urandom(4 * 1024 * KIB)  # grows 256 KiB -> 2 MiB -> 4 MiB; past the bytes bound
    r.feed(stream_of([huge]), [1 << 20])
    assert r.frames[-1] == huge
    assert len(empty_pool) <= 3 and sum(map(len, empty_pool)) <= 3 * 1024 * KIB
    assert all(len(b) < 4 * 1024 * KIB for b in empty_pool)
    assert len(empty_pool[-1]) == 2 * 1024 * KIB  # the 2 MiB step took the room of free 200 KiB ones


def test_a_claimed_size_costs_only_what_arrived(empty_pool):
    r = Reader()
    r.feed((50 << 20).to_bytes(4, "big") + os.urandom(60 * KIB), [65536])
    assert len(r.reader._big) == BIG_FIRST_BYTES and r.frames == []
    r.reader.close()
    assert len(empty_pool) == 1  # the closed reader's buffer is free again
    r2 = Reader()
    frame = os.urandom(200 * KIB)
    r2.feed(stream_of([frame]), [65536])
    assert r2.frames == [frame] and r2.buffers == [id(empty_pool[0])]


def test_fill_never_reads_past_a_frame_into_a_longer_pooled_buffer(empty_pool):
    """The TLS path: plaintext comes record by record; the bytes after a frame belong to the next one."""
    rng = random.Random(7)
    frames = [rng.randbytes(n) for n in (1000 * KIB, 90 * KIB, 7, 300 * KIB, 1000 * KIB, 80 * KIB)]
    data = stream_of(frames)
    got: list[bytes] = []
    reader = FrameReader(8 << 20, lambda f: got.append(bytes(f)), lambda size, head: pytest.fail("refused"),
                         lambda: True, borrow=False)
    pos = 0

    def read(n: int, into: memoryview) -> int:
        nonlocal pos
        if pos == len(data):
            raise Dry
        k = min(n, len(into), 2700, len(data) - pos)  # one TLS record at most
        into[:k] = data[pos:pos + k]
        pos += k
        return k
    while pos < len(data):
        assert reader.fill(read, Dry)
    assert got == frames


def test_a_produce_request_from_a_pooled_buffer_reaches_the_handler_intact():
    """Through a real Connection: Produce requests of 900 KiB and 100 KiB records, the 100 KiB ones decoded from a
    view of a longer pooled buffer; each handler sees its own records, and records kept stay as they were."""
    seen: list[bytes] = []
    kept: list[memoryview] = []
    under: list[int] = []  # length of the buffer under each request's records

    def dispatch(header, body, conn):
        records = body.topic_data[0].partition_data[0].records
        seen.append(bytes(records))
        under.append(len(records.obj))
        if header.correlation_id == 1:
            kept.append(records)
        return {"responses": [], "throttle_time_ms": 0}

    payloads = [os.urandom(n) for n in (900 * KIB, 100 * KIB, 900 * KIB, 100 * KIB)]
    with connection_on_loopback(dispatch) as (loop, conn, client, _):
        conn.max_frame = 8 << 20
        for correlation, payload in enumerate(payloads, 1):
            client.sendall(encode_request(0, 8, correlation, "c", {
                "transactional_id": None, "acks": 1, "timeout_ms": 1000,
                "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": payload}]}]}))
            deadline = time.monotonic() + 10
            while len(seen) < correlation:
                assert time.monotonic() < deadline
                loop.run_until_complete(asyncio.sleep(0.001))
            read_frame(client)
    assert seen == payloads
    assert bytes(kept[0]) == payloads[0]
    assert under[1] == under[3] == BIG_FIRST_BYTES and under[0] == under[2] < 1000 * KIB


def test_socket_recv_into_a_pooled_view_stops_at_the_frame(empty_pool):
    """room() of a frame in a longer pooled buffer ends where the frame does, so a recv_into there never takes the
    next frame's bytes."""
    a, b = socket.socketpair()
    try:
        r = Reader()
        r.feed(stream_of([os.urandom(900 * KIB)]), [65536])
        small, after = os.urandom(100 * KIB), os.urandom(3000)
        r.feed(stream_of([small])[:70 * KIB], [70 * KIB])
        room = r.reader.room()
        assert len(room) == 100 * KIB + 4 - 70 * KIB  # the rest of the frame, not the rest of the buffer
        del room
        b.sendall(stream_of([small])[70 * KIB:] + stream_of([after]))
        b.close()
        while True:
            room = r.reader.room()
            n = a.recv_into(room)
            del room
            if not n:
                break
            r.reader.advance(n)
        assert r.frames[1:] == [small, after]
    finally:
        a.close()
