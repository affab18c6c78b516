"""Responses on the way out, in request order.

Each request takes a slot in a FIFO; its response fills the slot when its handler finishes, and slots leave the
FIFO strictly in order (the SASL authenticator may answer twice for one frame) into the output queue. Bytes go
out with ``send`` (runs of them with one ``sendmsg``), large segment ranges (Fetch) with the Cython ``sendfile``,
small ones are read into the response (COPY_RANGE_BYTES); over TLS the transport encrypts the same queue.
Back-pressure: more than OUT_BACKLOG_BYTES of responses the peer has not taken pause reading (as Kafka mutes a
channel with a send pending), so a client that pipelines Fetches and never reads holds a few MB, not a copy of
every response.
"""
from __future__ import annotations

import collections
import itertools
import os
import socket
import time
from dataclasses import dataclass
from typing import Any

from kbroker._core.sendfile import send_range
from kbroker.protocol.outcome import NO_RESPONSE

# File ranges up to this size are read into the response, which then leaves in one sendmsg with
# the bytes around it; a sendfile of its own costs more than the copy (one more push, one more
# wakeup of the reader) until ranges get large.
COPY_RANGE_BYTES = 64 * 1024
# responses queued but not sent: reading pauses above OUT_BACKLOG_BYTES, resumes below half of it;
# a segment range queued for sendfile holds no copy and counts FILE_RANGE_COST (its bookkeeping)
OUT_BACKLOG_BYTES = 4 * 1024 * 1024
FILE_RANGE_COST = 1024
BYTES = (bytes, bytearray, memoryview)


class SegmentEnded(Exception):
    """A segment file is shorter than the range a response promised (the connection closes)."""


@dataclass(slots=True, eq=False)  # compared by identity: one per request
class ResponseSlot:
    """One request's place in the connection's answer order: what the connection records of it as it goes."""
    api_key: int
    version: int
    correlation_id: int
    chunks: list[Any] | object | None = None
    ready: bool = False
    received: float = 0.0  # when its bytes were read; a request is timed when this is set
    fetch_key: int = 0  # Fetch: FETCH_CONSUMER or FETCH_FOLLOWER (Kafka times both ways)
    throttle_ms: float = 0.0  # a client quota's throttle of this request (ms its connection is muted after it)
    # monotonic instants of a timed request (metrics on), set as it goes: handed to the handler, handler
    # returned (an answer given at once: once encoded, so it has no remote time), answer ready, answer queued
    # for the socket, answer written (kbroker.metrics.TimedRequest)
    dispatched: float = 0.0
    returned: float = 0.0
    ready_at: float = 0.0
    queued: float = 0.0
    sent: float = 0.0
    last_chunk: int = 0  # the number of chunks queued on the connection once its own were: written past it, it is sent


def _cost(chunk: Any) -> int:
    """What a queued chunk weighs in the output backlog."""
    return len(chunk) if isinstance(chunk, BYTES) else FILE_RANGE_COST


class OutputQueue:
    """Chunks of answers (bytes, or segment file ranges with ``fd``, ``position`` and ``length``) not written yet:
    ``pos`` bytes of the first are; ``backlog`` is what OUT_BACKLOG_BYTES bounds; ``entered`` and ``left`` count
    the chunks that ever did (a timed answer is written once ``left`` reaches its ``last_chunk``)."""

    __slots__ = ("chunks", "pos", "backlog", "entered", "left", "_stalls")

    def __init__(self) -> None:
        self.chunks: collections.deque[Any] = collections.deque()
        self.pos = 0
        self.backlog = 0
        self.entered = self.left = 0
        self._stalls = 0  # writable events in a row on which sendfile sent nothing

    def __bool__(self) -> bool:
        return bool(self.chunks)

    def __len__(self) -> int:
        return len(self.chunks)

    def put(self, chunk: Any) -> None:
        self.chunks.append(chunk)
        self.backlog += _cost(chunk)
        self.entered += 1

    def pop(self) -> Any:
        chunk = self.chunks.popleft()
        self.left += 1
        self.backlog -= _cost(chunk)
        return chunk

    def clear(self) -> None:
        self.chunks.clear()
        self.backlog = 0

    def take_ready(self, slots: collections.deque[ResponseSlot], timed: collections.deque[ResponseSlot]) -> None:
        """Queue the responses that are next in order, small segment ranges read in, while the backlog
        has room: responses waiting behind a long poll would otherwise all be read in at once when it
        ends (100 Fetches of 3 MB each held 300 MB); the rest are taken as the backlog drains. A timed
        answer joins ``timed``. Raises OSError (a range unreadable) or SegmentEnded."""
        while slots and slots[0].ready and self.backlog <= OUT_BACKLOG_BYTES:
            done = slots.popleft()
            if done.chunks is not NO_RESPONSE:
                for chunk in done.chunks:  # type: ignore[attr-defined]  # not NO_RESPONSE: a list of chunks
                    if not isinstance(chunk, BYTES) and chunk.length <= COPY_RANGE_BYTES:
                        data = os.pread(chunk.fd, chunk.length, chunk.position)
                        if len(data) != chunk.length:
                            raise SegmentEnded
                        chunk = data
                    self.put(chunk)
            if done.received:
                done.queued = time.monotonic()
                done.last_chunk = self.entered
                timed.append(done)

    def send(self, sock: socket.socket, fd: int) -> bool:
        """Write to a plaintext socket (``fd`` its descriptor, for sendfile); True once the queue is empty, False
        when the socket takes no more. Raises what the socket raises (BlockingIOError: full) and SegmentEnded."""
        chunks = self.chunks
        while chunks:
            chunk = chunks[0]
            if isinstance(chunk, BYTES):
                if len(chunks) > 1 and isinstance(chunks[1], BYTES):  # several: one sendmsg
                    bufs = [memoryview(chunk)[self.pos:] if self.pos else chunk]
                    for more in itertools.islice(chunks, 1, 64):
                        if not isinstance(more, BYTES):
                            break
                        bufs.append(more)
                    pos = self.pos + sock.sendmsg(bufs)
                    for _ in range(len(bufs)):
                        if pos < len(chunks[0]):
                            break
                        pos -= len(self.pop())
                    self.pos = pos
                    continue
                n = sock.send(memoryview(chunk)[self.pos:] if self.pos else chunk)
                self.pos += n
                done = self.pos >= len(chunk)
            else:  # a segment file range
                left = chunk.length - self.pos
                n = send_range(fd, chunk.fd, chunk.position + self.pos, left)
                self.pos += n
                done = self.pos >= chunk.length
                if n == 0 and not done:
                    self._stalls += 1
                    if self._stalls > 2:  # writable twice yet nothing sent: the file is shorter
                        raise SegmentEnded
                    return False
                self._stalls = 0
            if done:
                self.pop()
                self.pos = 0
            else:
                return False
        return True
