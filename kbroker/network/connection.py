"""One client connection: frames in, responses out in request order, zero-copy both ways.

Reading: ``recv_into`` a scratch buffer; small frames are copied out of it (one memcpy of a
few bytes beats a syscall per frame), a frame bigger than what the scratch holds gets its own
bytearray and the socket reads straight into it, so Produce payloads land where the log will
validate them in place. ``socket.request.max.bytes`` is checked on the 4-byte size, before any
allocation. The frame's buffer grows (doubling) as its bytes arrive: a peer that claims 100 MB and
sends 64 KiB costs 256 KiB, not 100 MB. A plaintext connection reads into one scratch shared by the
loop and owns a scratch (from a small pool) only while it holds part of a frame, so thousands of
idle connections cost a few KiB each, not 64 KiB.

One request at a time, as Kafka: its SocketServer Processor mutes a channel when a request arrives and unmutes
it when that request's response has been sent (apache/kafka
core/src/main/scala/kafka/network/SocketServer.scala, processCompletedReceives / processCompletedSends; at once
for a request without a response, acks=0). Clients rely on it: an OffsetFetch after an OffsetCommit on the same
connection sees the commit even while the commit waits for the ISR, a Fetch after an acks=all Produce sees its
records. So a frame is decoded and handled only once the previous request's response is written (every byte
handed to the socket), the connection is not muted by a quota (KIP-219) and not closing after a failed
authentication. Frames that arrive meanwhile are read ahead and wait, whole, in arrival order (at most
MAX_IN_FLIGHT of them and READ_AHEAD_BYTES, then reading pauses): a pipelining client (the Java client keeps 5
requests in flight, librdkafka more) finds its next request already read when the previous answer leaves.
Measured with ``python -m bench --rounds 4`` against the commit before
(bench/results/one-request-at-a-time-*.jsonl): produce and consume throughput, 1 and 3 brokers, unchanged within
this shared machine's noise; going on to the next request once the handler has answered rather than once the
answer is written measured the same, so Kafka's choice stands. What it costs: an acks=all request now waits for
the replication of the one before it, so one connection completes at most one acks=all request per replication
round trip (about 1.2 ms on 3 local brokers): librdkafka with linger.ms=0 at 1000 messages/s to RF 3 queues (p50
1.9 ms before, hundreds of ms after), at 500/s the p50 is unchanged (1.0 ms, p99 5.0 -> 7.4 ms); batching
(linger.ms 5, librdkafka's default) avoids it. Kafka pays the same, with a shorter round trip.

Writing: each request takes a slot in a FIFO; its response fills the slot when its handler finishes,
and slots leave the FIFO strictly in order (the SASL authenticator may answer twice for one frame).
Bytes go out with ``send`` (runs of them with one ``sendmsg``), large segment ranges (Fetch) with the
Cython ``sendfile``, small ones are read into the response (COPY_RANGE_BYTES); on EAGAIN the
connection waits for writability. Back-pressure: more than OUT_BACKLOG_BYTES of responses the peer has
not taken pause reading (as Kafka mutes a channel with a send pending), so a client that pipelines
Fetches and never reads holds a few MB, not a copy of every response.

TLS (SSL and SASL_SSL listeners): an ``ssl.SSLObject`` between two memory BIOs, on the same raw
non-blocking socket. Measured against a non-blocking ``SSLSocket`` on this loop (1 KiB records in,
256 KiB writes out, 100 MB each): receiving 797 vs 553 MB/s (the BIO takes 64 KiB per recv, an
SSLSocket reads record by record, two syscalls each), sending 654 vs 762 MB/s; produce is what TLS
must not slow, so BIOs. Ciphertext leaves with ``send``; segment ranges cannot go by sendfile, so
they are read with ``preadv`` into one reused buffer (TLS_FILE_CHUNK at a time) and encrypted, one
chunk per writable event so a large fetch never holds the loop. Receiving 200 MiB of Produce frames
in the 2.7 KiB records librdkafka writes costs the loop 0.41 s of CPU over TLS against 0.11 s in
plaintext; OpenSSL's decryption of those records alone is 0.29 s (one SSL_read per record, 3.7 us
each with AES-256-GCM), so the rest is near that floor. A handshake that does not finish
within the server's handshake bound is closed; a failed one is logged with the peer.
"""
from __future__ import annotations

import asyncio
import collections
import functools
import itertools
import logging
import os
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any, Protocol, cast

from kbroker._core.sendfile import send_range
from kbroker.metrics import FETCH_CONSUMER, FETCH_FOLLOWER, BrokerMetrics
from kbroker.protocol import ProtocolError, decode_request, encode_api_versions_unsupported, encode_response
from kbroker.protocol.outcome import CLOSE, NO_RESPONSE
from kbroker.security.principal import Session

log = logging.getLogger(__name__)

SCRATCH_BYTES = 64 * 1024
# File ranges up to this size are read into the response, which then leaves in one sendmsg with
# the bytes around it; a sendfile of its own costs more than the copy (one more push, one more
# wakeup of the reader) until ranges get large.
COPY_RANGE_BYTES = 64 * 1024
_BYTES = (bytes, bytearray, memoryview)
MAX_IN_FLIGHT = 100  # frames read ahead of the one being processed: reading pauses at this many ...
READ_AHEAD_BYTES = 4 * 1024 * 1024  # ... or above this many bytes of them, and resumes below half of either
# responses queued but not sent: reading pauses above OUT_BACKLOG_BYTES, resumes below half of it;
# a segment range queued for sendfile holds no copy and counts FILE_RANGE_COST (its bookkeeping)
OUT_BACKLOG_BYTES = 4 * 1024 * 1024
FILE_RANGE_COST = 1024
BIG_FIRST_BYTES = 256 * 1024  # a big frame's buffer starts at this (or twice what arrived) ...
BIG_GROWTH = 8                # ... and grows by this factor when full
_SHARED_SCRATCH = bytearray(SCRATCH_BYTES)  # plaintext reads land here (the loop is one thread)
_SPARE_SCRATCH: list[bytearray] = []        # owned scratches given back, reused
SPARE_SCRATCH_KEPT = 32
_DISCARD = bytearray(SCRATCH_BYTES)          # input read away from a closing connection
_DISCARD_VIEW = memoryview(_DISCARD)
LINGER_S = 1.0   # how long a failed connection waits for the client to hang up first
# TLS: segment bytes read and encrypted per writable event, and ciphertext gathered before a send
TLS_FILE_CHUNK = 128 * 1024
TLS_FLUSH_BYTES = 256 * 1024
_TLS_RAW = bytearray(256 * 1024)    # every TLS connection's recv lands here first (the loop is one thread)
_TLS_RAW_VIEW = memoryview(_TLS_RAW)
_TLS_FILE = bytearray(TLS_FILE_CHUNK)  # segment ranges read for encryption (used and released at once)
_TLS_FILE_VIEW = memoryview(_TLS_FILE)
_TLS_RECORD = (0x16, 0x03)          # a TLS handshake record's first bytes


class ConnectionOwner(Protocol):
    """What a connection needs of the server that accepted it."""
    loop: asyncio.AbstractEventLoop
    max_request_bytes: int
    dispatch: Callable[[Any, Any, Any], Any]  # (header, body, connection) -> a handler's result
    listener_name: str
    security_protocol: str
    metrics: BrokerMetrics | None  # request timings go here (None: metrics.enabled=false)

    def forget(self, conn: Connection) -> None: ...

    # TLS listeners (getattr'd: absent means plaintext)
    #   ssl_context: ssl.SSLContext | None; handshake_timeout_s: float;
    #   on_handshake(conn) -> str | None: sets conn.session.principal, returns why to refuse the client

    # SASL listeners: each connection's authenticator (None, or absent: nothing to authenticate)
    new_authenticator: Callable[[Connection], FrameInterceptor | None] | None


class FrameInterceptor(Protocol):
    """Sees every frame before it is decoded as a request (kbroker.security's SASL authenticator).
    Returns True when it took the frame (answered it with ``reply``/``send_token``, closed the
    connection, or handed it on with ``handle_request``), False to let it go the normal way."""

    def intercept(self, conn: Connection, frame: bytearray) -> bool: ...


class _Slot:
    __slots__ = ("api_key", "version", "correlation_id", "chunks", "ready",
                 "received", "dispatched", "returned", "ready_at", "queued", "sent", "fetch_key",
                 "last_chunk")
    # monotonic instants of a timed request (metrics on), set as it goes: handed to the handler, handler
    # returned, answer ready, answer queued for the socket, answer written (kbroker.metrics.TimedRequest)
    dispatched: float
    returned: float
    ready_at: float
    queued: float
    sent: float
    last_chunk: int  # the number of chunks queued on the connection once its own were: written past it, it is sent

    def __init__(self, api_key: int, version: int, correlation_id: int) -> None:
        self.api_key = api_key
        self.version = version
        self.correlation_id = correlation_id
        self.chunks: list[Any] | object | None = None
        self.ready = False
        self.received = 0.0  # when its bytes were read; a request is timed when this is set
        self.fetch_key = 0  # Fetch: FETCH_CONSUMER or FETCH_FOLLOWER (Kafka times both ways)


def _cost(chunk: Any) -> int:
    """What a queued chunk weighs in the output backlog."""
    return len(chunk) if isinstance(chunk, _BYTES) else FILE_RANGE_COST


class Connection:
    def __init__(self, server: ConnectionOwner, sock: socket.socket, peer: tuple[Any, ...]) -> None:
        self.server = server
        self.loop = server.loop
        self.sock = sock
        self.fd = sock.fileno()
        self.peer = peer
        self.client_host = f"/{peer[0]}" if peer else ""  # Kafka shows InetAddress.toString(): "/1.2.3.4"
        # who is on this connection: ANONYMOUS until TLS or SASL says otherwise
        self.session = Session(client_address=peer[0] if peer else "",
                               listener=getattr(server, "listener_name", "PLAINTEXT"),
                               security_protocol=getattr(server, "security_protocol", "PLAINTEXT"))
        self.max_frame = server.max_request_bytes
        self.metrics: BrokerMetrics | None = getattr(server, "metrics", None)
        self._sending: collections.deque[_Slot] = collections.deque()  # timed answers being written
        self._chunks_queued = self._chunks_sent = 0  # how many chunks ever entered and left _out
        self.last_active = time.monotonic()
        self.closed = False
        context: ssl.SSLContext | None = getattr(server, "ssl_context", None)
        # TLS decrypts into a scratch of its own; plaintext borrows the shared one while idle
        self._scratch = bytearray(SCRATCH_BYTES) if context is not None else _SHARED_SCRATCH
        self._scratch_view = memoryview(self._scratch)
        self._start = 0   # first unparsed byte in scratch
        self._end = 0     # end of received bytes in scratch
        self._big: bytearray | None = None  # a frame being received directly (grows as it arrives)
        self._big_view: memoryview | None = None
        self._big_got = 0
        self._big_size = 0  # the frame's size
        self._slots: collections.deque[_Slot] = collections.deque()
        self._waiting: collections.deque[bytearray] = collections.deque()  # frames read, not processed yet
        self._waiting_bytes = 0
        self._processing = False   # inside _process_waiting (its loop takes the next frame)
        self._received_at = 0.0    # when the frame being processed was taken in (its queue time starts)
        self._out: collections.deque[Any] = collections.deque()  # chunks being written
        self._out_pos = 0
        self._out_bytes = 0  # the backlog OUT_BACKLOG_BYTES bounds
        self._refill_pending = False
        self._writing = False
        self._reading = True
        self._file_stalls = 0
        self._muted_until = 0.0          # quota throttling (KIP-219): no reading before this
        self._unmute: asyncio.TimerHandle | None = None
        self._close_when_flushed: str | None = None
        self._lingering = False
        self._reading_blocked = False    # set for good by close_after
        new_authenticator = getattr(server, "new_authenticator", None)
        self.authenticator: FrameInterceptor | None = new_authenticator(self) if new_authenticator else None
        self._first_frame = True
        self.tls: ssl.SSLObject | None = None
        if context is None:
            self.loop.add_reader(self.fd, self._on_readable)
            return
        self._tls_in = ssl.MemoryBIO()
        self._tls_out = ssl.MemoryBIO()
        self.tls = context.wrap_bio(self._tls_in, self._tls_out, server_side=True)
        # SSLObject.read is a Python wrapper around the C object's read(len, buffer): called once per
        # TLS record (tens of thousands per 100 MB), the wrapper's cost shows, so go to the C method
        self._tls_read: Callable[[int, memoryview], int] = (
            getattr(getattr(self.tls, "_sslobj", None), "read", None) or cast(Any, self.tls.read))
        self._cipher: bytes = b""     # encrypted bytes not sent yet
        self._cipher_pos = 0
        self._handshaking = True
        # the TLS paths in place of the plaintext ones (the loop and _fill call these names)
        self._on_readable = self._on_readable_tls  # type: ignore[method-assign]
        self._write = self._write_tls  # type: ignore[method-assign]
        bound = getattr(server, "handshake_timeout_s", 10.0)
        self._handshake_timer: asyncio.TimerHandle | None = self.loop.call_later(bound, self._handshake_expired)
        self.loop.add_reader(self.fd, self._on_readable)

    # -- reading -------------------------------------------------------------------------

    def _on_readable(self) -> None:
        try:
            if self._big is not None:
                n = self.sock.recv_into(self._big_room())
                if not n:
                    return self.close("peer closed")
                self._big_got += n
                self.last_active = time.monotonic()  # before handling: a request's queue time starts here
                if self._big_got == self._big_size:
                    frame, self._big, self._big_view = self._big, None, None
                    self._handle_frame(frame)
                return
            if self._start == self._end:
                self._start = self._end = 0
            elif self._end == len(self._scratch):  # compact the partial frame to the front
                left = self._end - self._start
                self._scratch[:left] = self._scratch[self._start:self._end]
                self._start, self._end = 0, left
            n = self.sock.recv_into(self._scratch_view[self._end:])
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            return self.close(f"receive failed: {exc}")
        if not n:
            return self.close("peer closed")
        self.last_active = time.monotonic()
        self._end += n
        self._parse_scratch()
        self._settle_scratch()

    def _big_room(self) -> memoryview:
        """Where the rest of the big frame goes. A full buffer is replaced by one BIG_GROWTH times
        larger (at most the frame's size), so memory follows the bytes received, not the size the
        peer claimed. A fresh buffer and one copy: measured on 1 MiB Produce frames, doubling in
        place (bytearray.extend) cost the broker 2.3x the CPU of allocating the whole frame at once;
        one 8x step from 256 KiB costs the same as the single allocation."""
        big = self._big
        assert big is not None and self._big_view is not None  # set together with _big
        got = self._big_got
        if got == len(big):
            grown = bytearray(min(self._big_size, BIG_GROWTH * len(big)))
            grown[:got] = self._big_view
            self._big_view.release()
            self._big, self._big_view = grown, memoryview(grown)
        return self._big_view[got:]

    def _settle_scratch(self) -> None:
        """Plaintext: give an emptied owned scratch back; move a partial frame out of the shared one."""
        if self.tls is not None or self.closed:
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

    def _parse_waiting(self) -> None:
        """Frames received before reading paused: parse them now (no readable event will come)."""
        if not self.closed and self._reading and self._big is None and self._start != self._end:
            self._parse_scratch()
            self._settle_scratch()

    def _parse_scratch(self) -> None:
        scratch = self._scratch
        while not self.closed and self._reading and self._end - self._start >= 4:
            start = self._start
            size = int.from_bytes(scratch[start:start + 4], "big", signed=True)
            if size < 0 or size > self.max_frame:
                return self._refuse_frame(size)
            have = self._end - start - 4
            if have >= size:
                frame = scratch[start + 4:start + 4 + size]  # a small copy, owned by the request
                self._start = start + 4 + size
                self._handle_frame(frame)
            elif size > len(scratch) - 4:
                # big frame: the socket fills it directly, its buffer growing with what arrives
                frame = bytearray(min(size, max(BIG_FIRST_BYTES, 2 * have)))
                frame[:have] = scratch[start + 4:self._end]
                self._start = self._end = 0
                self._big, self._big_view, self._big_got, self._big_size = frame, memoryview(frame), have, size
                return
            else:
                return

    def _refuse_frame(self, size: int) -> None:
        if self._first_frame and self.tls is None and self._end - self._start >= 2 and \
                tuple(self._scratch[self._start:self._start + 2]) == _TLS_RECORD:
            log.warning("a TLS handshake from %s reached the %s listener %s, which is not TLS; closing (is the "
                        "client's security.protocol right?)", self.describe_peer(), self.session.security_protocol,
                        self.session.listener)
            return self.close("TLS spoken to a plaintext listener")
        log.info("closing the connection from %s: a frame of %d bytes is refused (socket.request.max.bytes=%d)",
                 self.describe_peer(), size, self.max_frame)
        return self.close(f"frame of {size} bytes refused (socket.request.max.bytes={self.max_frame})")

    def describe_peer(self) -> str:
        """``/127.0.0.1:53210`` (Kafka's way) for log lines."""
        if not self.peer:
            return "an unknown peer"
        return f"/{self.peer[0]}:{self.peer[1]}" if len(self.peer) > 1 else f"/{self.peer[0]}"

    # -- TLS -------------------------------------------------------------------------------

    def _on_readable_tls(self) -> None:
        try:
            n = self.sock.recv_into(_TLS_RAW_VIEW)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            return self.close(f"receive failed: {exc}")
        if not n:
            if self._handshaking:
                log.info("TLS handshake with %s on listener %s failed: the peer closed the connection",
                         self.describe_peer(), self.session.listener)
            return self.close("peer closed")
        self.last_active = time.monotonic()
        self._tls_in.write(_TLS_RAW_VIEW[:n])
        if self._handshaking and not self._handshake_step():
            return
        self._decrypt()

    def _handshake_step(self) -> bool:
        """Advance the handshake; True once it is done (and the client accepted)."""
        assert self.tls is not None
        try:
            self.tls.do_handshake()
        except ssl.SSLWantReadError:
            self._flush_tls()
            return False
        except (ssl.SSLError, ValueError) as exc:
            reason = getattr(exc, "reason", None) or str(exc)
            log.warning("TLS handshake with %s on listener %s failed: %s", self.describe_peer(),
                        self.session.listener, reason)
            self._flush_tls()  # the alert, if the socket takes it
            self.close(f"TLS handshake failed: {reason}")
            return False
        self._handshaking = False
        if self._handshake_timer is not None:
            self._handshake_timer.cancel()
            self._handshake_timer = None
        on_handshake = getattr(self.server, "on_handshake", None)
        refused = on_handshake(self) if on_handshake is not None else None
        if refused:
            log.warning("TLS client %s on listener %s refused: %s", self.describe_peer(), self.session.listener,
                        refused)
            self.close(refused)
            return False
        self._flush_tls()
        return True

    def _handshake_expired(self) -> None:
        self._handshake_timer = None
        if self._handshaking and not self.closed:
            log.warning("TLS handshake with %s on listener %s did not finish in time; closing",
                        self.describe_peer(), self.session.listener)
            self.close("TLS handshake timed out")

    def _decrypt(self) -> None:
        """Plaintext out of the BIO into the frame buffers, parsed as it comes."""
        tls = self.tls
        assert tls is not None
        while not self.closed and self._reading:
            big = self._big
            try:
                if big is not None:
                    # a large frame (Produce): fill it record by record in a tight loop, one record
                    # per read being all OpenSSL gives (clients often write records of a few KiB)
                    read = self._tls_read
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
                            n = read(len(big) - got, view[got:])
                            if not n:
                                return self.close("peer closed")
                            got += n
                    except ssl.SSLWantReadError:
                        self._big_got = got
                        break
                    whole = self._big
                    assert whole is not None
                    self._big, self._big_view, self._big_got = None, None, 0
                    self._handle_frame(whole)
                    continue
                if self._start == self._end:
                    self._start = self._end = 0
                elif self._end == len(self._scratch):
                    left = self._end - self._start
                    self._scratch[:left] = self._scratch[self._start:self._end]
                    self._start, self._end = 0, left
                # small frames: fill the scratch with as many records as wait, then parse them
                end, cap, view = self._end, len(self._scratch), self._scratch_view
                read = self._tls_read
                waiting = False
                try:
                    while end < cap:
                        n = read(cap - end, view[end:])
                        if not n:
                            return self.close("peer closed")
                        end += n
                except ssl.SSLWantReadError:
                    waiting = True
                self._end = end
                self._parse_scratch()
                if waiting:
                    break
            except ssl.SSLZeroReturnError:
                return self.close("peer closed (TLS close_notify)")
            except ssl.SSLError as exc:
                log.info("TLS error on the connection from %s: %s", self.describe_peer(), exc.reason or exc)
                return self.close(f"TLS error: {exc}")
        if self._tls_out.pending:  # post-handshake messages (TLS 1.3 key updates)
            self._flush_tls()

    def _decrypt_waiting(self) -> None:
        if not self.closed and self._reading:
            self._decrypt()

    def _cipher_waiting(self) -> bool:
        """TLS: encrypted bytes not sent yet (what a close must wait for)."""
        return self._cipher_pos < len(self._cipher) or bool(self._tls_out.pending)

    def _send_cipher(self) -> bool:
        """Send encrypted bytes waiting; True when none are left."""
        while True:
            if self._cipher_pos >= len(self._cipher):
                if not self._tls_out.pending:
                    self._cipher, self._cipher_pos = b"", 0
                    return True
                self._cipher, self._cipher_pos = self._tls_out.read(), 0
            n = self.sock.send(memoryview(self._cipher)[self._cipher_pos:] if self._cipher_pos else self._cipher)
            self._cipher_pos += n
            if self._cipher_pos < len(self._cipher):
                return False

    def _flush_tls(self) -> None:
        try:
            if self._send_cipher():
                return
        except (BlockingIOError, InterruptedError):
            pass
        except OSError as exc:
            return self.close(f"send failed: {exc}")
        self._wait_writable()

    def _write_tls(self) -> None:
        """Encrypt what is queued (bytes coalesced, segment ranges a chunk at a time) and send it."""
        if self._writing:  # writable again: the peer took bytes, which is activity (not idle)
            self.last_active = time.monotonic()
        tls = self.tls
        assert tls is not None
        out = self._out
        file_bytes = 0
        try:
            while True:
                if not self._send_cipher():
                    return self._wait_writable()
                if self._handshaking or not out:
                    break
                if file_bytes >= TLS_FILE_CHUNK:  # one chunk per writable event: let others run
                    return self._wait_writable()
                while out and self._tls_out.pending < TLS_FLUSH_BYTES:
                    chunk = out[0]
                    if isinstance(chunk, _BYTES):
                        if len(chunk):
                            tls.write(chunk)
                        self._pop_out()
                        continue
                    if file_bytes >= TLS_FILE_CHUNK:
                        break
                    want = min(TLS_FILE_CHUNK, chunk.length - self._out_pos)
                    n = os.preadv(chunk.fd, [_TLS_FILE_VIEW[:want]], chunk.position + self._out_pos)
                    if n <= 0:
                        return self.close("segment file ended before the promised range")
                    tls.write(_TLS_FILE_VIEW[:n])
                    file_bytes += n
                    self._out_pos += n
                    if self._out_pos >= chunk.length:
                        self._pop_out()
                        self._out_pos = 0
        except (BlockingIOError, InterruptedError):
            return self._wait_writable()
        except ssl.SSLError as exc:
            return self.close(f"TLS error: {exc}")
        except OSError as exc:
            return self.close(f"send failed: {exc}")
        finally:
            self._after_write()
        if self._writing:
            self.loop.remove_writer(self.fd)
            self._writing = False
        self.last_active = time.monotonic()
        if self._close_when_flushed is not None and not self._slots and not out:
            self._linger_then_close(self._close_when_flushed)
        elif self._waiting:
            self._process_waiting()  # the answer is written: the next request's turn

    # -- requests ----------------------------------------------------------------------------

    def _handle_frame(self, frame: bytearray) -> None:
        """A whole frame was read: process it now if the connection is free, else it waits its turn."""
        self._first_frame = False
        if not self._waiting and not self._processing and not self._busy():
            self._received_at = self.last_active  # when its bytes were read
            return self._process(frame)
        self._waiting.append(frame)
        self._waiting_bytes += len(frame)
        if len(self._waiting) >= MAX_IN_FLIGHT or self._waiting_bytes > READ_AHEAD_BYTES:
            self._pause_reading()

    def _busy(self) -> bool:
        """Whether the next request must wait: an earlier one is unanswered or its answer not written yet,
        a quota mutes the connection, or it is closing (Kafka's channel stays muted for each of these)."""
        return bool(self._slots or self._out or self.closed or self._unmute is not None or self._reading_blocked
                    or (self.tls is not None and self._cipher_waiting()))

    def _process_waiting(self) -> None:
        """Process the frames read ahead, one after another, as each previous answer is written. Called
        wherever the connection may have become free; the outermost call runs the loop."""
        if self._processing:
            return
        self._processing = True
        try:
            while self._waiting and not self._busy():
                frame = self._waiting.popleft()
                self._waiting_bytes -= len(frame)
                # Kafka reads nothing from a muted channel, so its request time starts only now
                self._received_at = time.monotonic()
                self._process(frame)
                if not self._reading:
                    self._maybe_resume()
        finally:
            self._processing = False

    def _process(self, frame: bytearray) -> None:
        if self.authenticator is not None and self.authenticator.intercept(self, frame):
            return
        self.handle_request(frame)

    def handle_request(self, frame: bytearray) -> None:
        """Decode a frame as a Kafka request and dispatch it; its response takes its place in order."""
        try:
            header, body = decode_request(memoryview(frame))
        except ProtocolError as exc:
            if exc.api_key == 18 and exc.reason == "unsupported_version" and exc.correlation_id is not None:
                # KIP-511: answer a too-new ApiVersions with a v0 error body listing our range.
                slot = _Slot(18, 0, exc.correlation_id)
                self._slots.append(slot)
                self._fill(slot, encode_api_versions_unsupported(exc.correlation_id))
                return
            # Kafka's SocketServer closes such a connection too; saying why here is what lets an
            # operator tell a client's too-new version from a broken frame (the client sees EOF only).
            log.info("closing the connection from %s: %s (%s)", self.describe_peer(), exc, exc.reason)
            return self.close(f"undecodable request: {exc}")
        slot = _Slot(header.api_key, header.api_version, header.correlation_id)
        self._slots.append(slot)
        if self.metrics is not None:
            slot.received = self._received_at
            if header.api_key == 1:
                slot.fetch_key = FETCH_FOLLOWER if cast(Any, body).replica_id >= 0 else FETCH_CONSUMER
            slot.dispatched = time.monotonic()
        try:
            result = self.server.dispatch(header, body, self)
        except Exception:
            log.exception("handler for api %d v%d failed", header.api_key, header.api_version)
            return self.close("handler error")
        if slot.received:
            slot.returned = time.monotonic()  # local time ends; a parked answer's remote time begins
        if asyncio.iscoroutine(result) or isinstance(result, asyncio.Future):
            task = asyncio.ensure_future(result)
            task.add_done_callback(functools.partial(self._on_done, slot))
        else:
            self._complete(slot, result)

    def _on_done(self, slot: _Slot, task: asyncio.Future[Any]) -> None:
        if self.closed:
            return
        if task.cancelled():
            return self.close("request cancelled")
        exc = task.exception()
        if exc is not None:
            log.error("handler for api %d v%d failed", slot.api_key, slot.version, exc_info=exc)
            return self.close("handler error")
        self._complete(slot, task.result())

    def _complete(self, slot: _Slot, result: Any) -> None:
        if result is CLOSE:
            return self.close("closed by handler")
        if result is NO_RESPONSE:
            self._fill(slot, NO_RESPONSE)
            return
        try:
            chunks = encode_response(slot.api_key, slot.version, slot.correlation_id, result)
        except Exception:
            log.exception("could not encode the response to api %d v%d", slot.api_key, slot.version)
            return self.close("response encoding failed")
        self._fill(slot, chunks)

    # -- writing -------------------------------------------------------------------------

    def _fill(self, slot: _Slot, chunks: Any) -> None:
        slot.chunks = chunks
        slot.ready = True
        if slot.received:
            slot.ready_at = time.monotonic()
        self._take_ready()
        if self.closed:
            return
        if not self._writing:
            self._write()
        if self._out_bytes > OUT_BACKLOG_BYTES:
            self._pause_reading()  # the peer is not taking its responses: read no more requests
        else:
            self._maybe_resume()
        if self._waiting:
            self._process_waiting()

    def _take_ready(self) -> None:
        """Queue the responses that are next in order, small segment ranges read in, while the backlog
        has room: responses waiting behind a long poll would otherwise all be read in at once when it
        ends (100 Fetches of 3 MB each held 300 MB); the rest are taken as the backlog drains."""
        while self._slots and self._slots[0].ready and self._out_bytes <= OUT_BACKLOG_BYTES:
            done = self._slots.popleft()
            if done.chunks is not NO_RESPONSE:
                for chunk in done.chunks:  # type: ignore[attr-defined]  # not NO_RESPONSE: a list of chunks
                    if not isinstance(chunk, _BYTES) and chunk.length <= COPY_RANGE_BYTES:
                        try:
                            data = os.pread(chunk.fd, chunk.length, chunk.position)
                        except OSError as exc:
                            return self.close(f"reading a segment range failed: {exc}")
                        if len(data) != chunk.length:
                            return self.close("segment file ended before the promised range")
                        chunk = data
                    self._out.append(chunk)
                    self._out_bytes += _cost(chunk)
                    self._chunks_queued += 1
            if done.received:
                done.queued = time.monotonic()
                done.last_chunk = self._chunks_queued
                self._sending.append(done)

    def _refill(self) -> None:
        self._refill_pending = False
        if self.closed or not self._slots or not self._slots[0].ready:
            return
        self._take_ready()
        if not self.closed and not self._writing:
            self._write()

    def _after_write(self) -> None:
        """What left the backlog may let held responses in, and reading resume."""
        if self.closed:
            return
        if self._sending and self._sending[0].last_chunk <= self._chunks_sent:
            self._timed_answers_sent()
        if (self._slots and self._slots[0].ready and not self._refill_pending
                and self._out_bytes <= OUT_BACKLOG_BYTES // 2):
            self._refill_pending = True
            self.loop.call_soon(self._refill)  # not from inside _write
        if not self._reading:
            self._maybe_resume()

    def _timed_answers_sent(self) -> None:
        """The answers whose every chunk is written: each timed request goes to the request metrics (which
        keep the slot itself among the last ones of its type, its response let go)."""
        metrics = self.metrics
        assert metrics is not None  # answers are timed only with metrics on
        now = time.monotonic()
        sending, sent = self._sending, self._chunks_sent
        while sending and sending[0].last_chunk <= sent:
            slot = sending.popleft()
            slot.sent = now
            slot.chunks = None
            metrics.request(slot.api_key, slot.version, slot)
            if slot.fetch_key:
                metrics.request(slot.fetch_key, slot.version, slot)

    # -- what the SASL authenticator and quotas use --------------------------------------------

    def reply(self, api_key: int, version: int, correlation_id: int, body: Any) -> None:
        """Answer a request the authenticator took, in order with everything before it."""
        slot = _Slot(api_key, version, correlation_id)
        self._slots.append(slot)
        self._complete(slot, body)

    def send_token(self, token: bytes) -> None:
        """A raw SASL token (SaslHandshake v0 framing): 4-byte size and the bytes, no header."""
        slot = _Slot(-1, 0, 0)
        self._slots.append(slot)
        self._fill(slot, [len(token).to_bytes(4, "big") + token])

    def close_after(self, seconds: float, why: str, api_key: int | None = None, version: int = 0,
                    correlation_id: int = 0, body: Any = None) -> None:
        """Kafka's delayed close after a failed authentication: read nothing more, wait, then send
        the prepared failure response (if any) and close once it is written."""
        self._pause_reading()
        self._reading_blocked = True

        def fire() -> None:
            if self.closed:
                return
            self._close_when_flushed = why
            if api_key is not None:
                self.reply(api_key, version, correlation_id, body)
            if not self._out and not self._slots and (self.tls is None or not self._cipher_waiting()):
                self._linger_then_close(why)
        self.loop.call_later(seconds, fire)

    def mute(self, seconds: float) -> None:
        """Stop reading requests for a while (a quota's throttle time, sent with the response)."""
        if seconds <= 0 or self.closed:
            return
        self._muted_until = max(self._muted_until, time.monotonic() + seconds)
        self._pause_reading()
        if self._unmute is not None:
            self._unmute.cancel()
        self._unmute = self.loop.call_at(self.loop.time() + (self._muted_until - time.monotonic()), self._on_unmute)

    def _on_unmute(self) -> None:
        self._unmute = None
        self._muted_until = 0.0
        self._maybe_resume()
        if self._waiting:
            self._process_waiting()

    def _maybe_resume(self) -> None:
        """Read again once the back-pressure bounds have room (half of each)."""
        if (not self._reading and len(self._waiting) < MAX_IN_FLIGHT // 2
                and self._waiting_bytes <= READ_AHEAD_BYTES // 2 and self._out_bytes <= OUT_BACKLOG_BYTES // 2):
            self._resume_reading()

    def _pop_out(self) -> Any:
        chunk = self._out.popleft()
        self._chunks_sent += 1
        self._out_bytes -= _cost(chunk)
        return chunk

    def _pause_reading(self) -> None:
        if self._reading and not self.closed:
            self.loop.remove_reader(self.fd)
            self._reading = False

    def _resume_reading(self) -> None:
        if (not self._reading and not self.closed and not self._reading_blocked
                and time.monotonic() >= self._muted_until):
            self.loop.add_reader(self.fd, self._on_readable)
            self._reading = True
            if self.tls is not None:
                if not self._handshaking:
                    # plaintext may wait in the BIO, which no readable event announces
                    self.loop.call_soon(self._decrypt_waiting)
            elif self._start != self._end:
                self.loop.call_soon(self._parse_waiting)  # whole frames may wait in the scratch

    def _write(self) -> None:
        if self._writing:  # writable again: the peer took bytes, which is activity (not idle)
            self.last_active = time.monotonic()
        out = self._out
        try:
            while out:
                chunk = out[0]
                if isinstance(chunk, _BYTES):
                    if len(out) > 1 and isinstance(out[1], _BYTES):  # several: one sendmsg
                        bufs = [memoryview(chunk)[self._out_pos:] if self._out_pos else chunk]
                        for more in itertools.islice(out, 1, 64):
                            if not isinstance(more, _BYTES):
                                break
                            bufs.append(more)
                        pos = self._out_pos + self.sock.sendmsg(bufs)
                        for _ in range(len(bufs)):
                            if pos < len(out[0]):
                                break
                            pos -= len(self._pop_out())
                        self._out_pos = pos
                        continue
                    n = self.sock.send(memoryview(chunk)[self._out_pos:] if self._out_pos else chunk)
                    self._out_pos += n
                    done = self._out_pos >= len(chunk)
                else:  # a segment file range
                    left = chunk.length - self._out_pos
                    n = send_range(self.fd, chunk.fd, chunk.position + self._out_pos, left)
                    self._out_pos += n
                    done = self._out_pos >= chunk.length
                    if n == 0 and not done:
                        self._file_stalls += 1
                        if self._file_stalls > 2:  # writable twice yet nothing sent: the file is shorter
                            return self.close("segment file ended before the promised range")
                        return self._wait_writable()
                    self._file_stalls = 0
                if done:
                    self._pop_out()
                    self._out_pos = 0
                else:
                    return self._wait_writable()
        except (BlockingIOError, InterruptedError):
            return self._wait_writable()
        except OSError as exc:
            return self.close(f"send failed: {exc}")
        finally:
            self._after_write()
        if self._writing:
            self.loop.remove_writer(self.fd)
            self._writing = False
        self.last_active = time.monotonic()
        if self._close_when_flushed is not None and not self._slots:
            self._linger_then_close(self._close_when_flushed)
        elif self._waiting:
            self._process_waiting()  # the answer is written: the next request's turn

    def _discard_input(self) -> bool:
        """Read away what the peer sent and we will never answer: closing with unread bytes makes the
        kernel send a reset, which can destroy the failure response before the client reads it.
        True once the peer has closed its side."""
        try:
            while self.sock.recv_into(_DISCARD_VIEW):
                pass
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            pass
        return True

    def _linger_then_close(self, why: str) -> None:
        """The failure response is written: wait (at most LINGER_S) for the client to close first.
        Clients read it then hang up; closing at once lands our FIN in the same read as the response,
        and some (kafka-python 3) drop the response when a read also sees the end of the stream."""
        if self.closed or self._lingering:
            return
        self._lingering = True
        if self._discard_input():
            return self.close(why)

        def readable() -> None:
            if self._discard_input():
                self.close(why)
        if self._reading:
            self.loop.remove_reader(self.fd)
        self.loop.add_reader(self.fd, readable)
        self._reading = True   # so close() removes this reader
        self.loop.call_later(LINGER_S, self.close, why)

    def _wait_writable(self) -> None:
        if not self._writing:
            self.loop.add_writer(self.fd, self._write)
            self._writing = True

    # -- lifecycle -------------------------------------------------------------------------

    def close(self, why: str = "") -> None:
        if self.closed:
            return
        self.closed = True
        log.debug("closing connection from %s: %s", self.peer, why)
        if self._unmute is not None:
            self._unmute.cancel()
        if self.tls is not None and self._handshake_timer is not None:
            self._handshake_timer.cancel()
        if self._reading:
            self.loop.remove_reader(self.fd)
        if self._writing:
            self.loop.remove_writer(self.fd)
        self._out.clear()
        self._out_bytes = 0
        self._slots.clear()
        self._waiting.clear()
        self._waiting_bytes = 0
        try:
            self.sock.close()
        except OSError:
            pass
        self.server.forget(self)
