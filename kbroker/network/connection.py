"""One client connection: frames in (``framing``), one request at a time, responses out in request order
(``responses``), over plaintext or TLS (``tls_transport``). One module: reading, the one-request rule and writing
all turn on the same muting state (a request in progress, an answer being written, a quota, a close), which
framing, responses and tls_transport leave out.

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

The connection owns the socket and its place in the loop (reader, writer, timers); the transport is the
plaintext socket or a TlsTransport it delegates to, and both paths share one writer and its tail.
"""
from __future__ import annotations

import asyncio
import collections
import functools
import logging
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any, Protocol, cast

from kbroker.metrics import FETCH_CONSUMER, FETCH_FOLLOWER, BrokerMetrics
from kbroker.protocol import ProtocolError, decode_request, encode_api_versions_unsupported, encode_response
from kbroker.protocol.header import RequestHeader
from kbroker.protocol.outcome import CLOSE, NO_RESPONSE, Deferred, Reply
from kbroker.protocol.schema import Struct
from kbroker.security.principal import Session

from .framing import Frame, FrameReader
from .responses import OUT_BACKLOG_BYTES, OutputQueue, ResponseSlot, SegmentEnded
from .tls_transport import TlsTransport

log = logging.getLogger(__name__)

MAX_IN_FLIGHT = 100  # frames read ahead of the one being processed: reading pauses at this many ...
READ_AHEAD_BYTES = 4 * 1024 * 1024  # ... or above this many bytes of them, and resumes below half of either
_DISCARD = bytearray(64 * 1024)              # input read away from a closing connection
_DISCARD_VIEW = memoryview(_DISCARD)
LINGER_S = 1.0   # how long a failed connection waits for the client to hang up first
_TLS_RECORD = b"\x16\x03"          # a TLS handshake record's first bytes


class ConnectionOwner(Protocol):
    """What a connection needs of the server that accepted it."""
    loop: asyncio.AbstractEventLoop
    max_request_bytes: int
    dispatch: Callable[[RequestHeader, Struct, Connection], Reply]  # a handler's result for a request
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

    def intercept(self, conn: Connection, frame: Frame) -> bool: ...


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
        self.metrics: BrokerMetrics | None = getattr(server, "metrics", None)
        self._sending: collections.deque[ResponseSlot] = collections.deque()  # timed answers being written
        self.last_active = time.monotonic()
        self.closed = False
        context: ssl.SSLContext | None = getattr(server, "ssl_context", None)
        self._frames = FrameReader(server.max_request_bytes, self._handle_frame, self._refuse_frame, self._taking,
                                   borrow=context is None)
        self._slots: collections.deque[ResponseSlot] = collections.deque()
        self._waiting: collections.deque[Frame] = collections.deque()  # frames read, not processed yet
        self._waiting_bytes = 0
        self._processing = False   # inside _process_waiting (its loop takes the next frame)
        self._completing = False   # writing a parked answer from within the call that completed it
        self._received_at = 0.0    # when the frame being processed was taken in (its queue time starts)
        self._out = OutputQueue()  # chunks being written
        self._refill_pending = False
        self._writing = False
        self._reading = True
        self._muted_until = 0.0          # quota throttling (KIP-219): no reading before this
        self._unmute: asyncio.TimerHandle | None = None
        self._close_when_flushed: str | None = None
        self._lingering = False
        self._reading_blocked = False    # set for good by close_after
        self._first_frame = True
        # TLS listeners: the session the connection's bytes go through (None: plaintext)
        self.tls: TlsTransport | None = TlsTransport(context) if context is not None else None
        self._handshake_timer: asyncio.TimerHandle | None = None
        if self.tls is not None:
            bound = getattr(server, "handshake_timeout_s", 10.0)
            self._handshake_timer = self.loop.call_later(bound, self._handshake_expired)
        new_authenticator = getattr(server, "new_authenticator", None)
        self.authenticator: FrameInterceptor | None = new_authenticator(self) if new_authenticator else None
        self.loop.add_reader(self.fd, self._on_readable)

    @property
    def max_frame(self) -> int:
        """socket.request.max.bytes, or less while SASL authenticates (its max receive size)."""
        return self._frames.max_frame

    @max_frame.setter
    def max_frame(self, value: int) -> None:
        self._frames.limit(value)

    def _taking(self) -> bool:
        """Whether frames are taken now: open and reading (not paused by back-pressure, a quota or a close)."""
        return not self.closed and self._reading

    # -- reading -------------------------------------------------------------------------

    def _on_readable(self) -> None:
        tls = self.tls
        try:
            n = self.sock.recv_into(self._frames.room()) if tls is None else tls.receive(self.sock)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            return self.close(f"receive failed: {exc}")
        if not n:
            if tls is not None and tls.handshaking:
                log.info("TLS handshake with %s on listener %s failed: the peer closed the connection",
                         self.describe_peer(), self.session.listener)
            return self.close("peer closed")
        self.last_active = time.monotonic()  # before handling: a request's queue time starts here
        if tls is None:
            self._frames.advance(n)
        elif not tls.handshaking or self._handshake_step():
            self._decrypt()

    def _parse_waiting(self) -> None:
        """Frames received before reading paused: parse them now (no readable event will come)."""
        if self._taking():
            self.last_active = time.monotonic()  # taken in now: a request's time starts after a throttle, as Kafka's
            self._frames.parse_buffered()

    def _refuse_frame(self, size: int, head: bytes) -> None:
        if self._first_frame and self.tls is None and head == _TLS_RECORD:
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

    def _handshake_step(self) -> bool:
        """Advance the handshake; True once it is done (and the client accepted)."""
        assert self.tls is not None
        try:
            done = self.tls.handshake()
        except (ssl.SSLError, ValueError) as exc:
            reason = getattr(exc, "reason", None) or str(exc)
            log.warning("TLS handshake with %s on listener %s failed: %s", self.describe_peer(),
                        self.session.listener, reason)
            self._flush_tls()  # the alert, if the socket takes it
            self.close(f"TLS handshake failed: {reason}")
            return False
        if not done:
            self._flush_tls()
            return False
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
        if self.tls is not None and self.tls.handshaking and not self.closed:
            log.warning("TLS handshake with %s on listener %s did not finish in time; closing",
                        self.describe_peer(), self.session.listener)
            self.close("TLS handshake timed out")

    def _decrypt(self) -> None:
        """Plaintext out of the TLS session into the frames, handled as they complete."""
        tls = self.tls
        assert tls is not None
        try:
            if not tls.decrypt_into(self._frames):
                return self.close("peer closed")
        except ssl.SSLZeroReturnError:
            return self.close("peer closed (TLS close_notify)")
        except ssl.SSLError as exc:
            log.info("TLS error on the connection from %s: %s", self.describe_peer(), exc.reason or exc)
            return self.close(f"TLS error: {exc}")
        if not self.closed and tls.cipher_waiting():  # post-handshake messages (TLS 1.3 key updates)
            self._flush_tls()

    def _decrypt_waiting(self) -> None:
        if self._taking():
            self.last_active = time.monotonic()  # (as _parse_waiting)
            self._decrypt()

    def _flush_tls(self) -> None:
        assert self.tls is not None
        try:
            if self.tls.send_cipher(self.sock):
                return
        except (BlockingIOError, InterruptedError):
            pass
        except OSError as exc:
            return self.close(f"send failed: {exc}")
        self._wait_writable()

    # -- requests ----------------------------------------------------------------------------

    def _handle_frame(self, frame: Frame) -> None:
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
                    or (self.tls is not None and self.tls.cipher_waiting()))

    def _process_waiting(self) -> None:
        """Process the frames read ahead, one after another, as each previous answer is written. Called
        wherever the connection may have become free; the outermost call runs the loop."""
        if self._processing or self._completing:
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

    def _process(self, frame: Frame) -> None:
        if self.authenticator is not None and self.authenticator.intercept(self, frame):
            return
        self.handle_request(frame)

    def handle_request(self, frame: Frame) -> None:
        """Decode a frame as a Kafka request and dispatch it; its response takes its place in order."""
        try:
            header, body = decode_request(memoryview(frame))
        except ProtocolError as exc:
            if exc.api_key == 18 and exc.reason == "unsupported_version" and exc.correlation_id is not None:
                # KIP-511: answer a too-new ApiVersions with a v0 error body listing our range.
                slot = ResponseSlot(18, 0, exc.correlation_id)
                self._slots.append(slot)
                self._fill(slot, encode_api_versions_unsupported(exc.correlation_id))
                return
            # Kafka's SocketServer closes such a connection too; saying why here is what lets an
            # operator tell a client's too-new version from a broken frame (the client sees EOF only).
            log.info("closing the connection from %s: %s (%s)", self.describe_peer(), exc, exc.reason)
            return self.close(f"undecodable request: {exc}")
        slot = ResponseSlot(header.api_key, header.api_version, header.correlation_id)
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
        if isinstance(result, Deferred) and not result.done():
            result.when_done(functools.partial(self._on_deferred, slot))
        elif isinstance(result, Deferred):  # completed at once (the purgatory's first check)
            self._on_done(slot, result)
        elif asyncio.iscoroutine(result) or isinstance(result, asyncio.Future):
            task = asyncio.ensure_future(result)
            task.add_done_callback(functools.partial(self._on_done, slot))
        else:
            self._complete(slot, result)
        if slot.received and slot.ready:  # answered at once: encoding it was local time, nothing remote (as Kafka)
            slot.returned = slot.ready_at

    def _on_deferred(self, slot: ResponseSlot, done: Deferred[Any]) -> None:
        """A parked answer completed, from within whatever completed it (another connection's request, often):
        the answer is written now, and this connection's next request waits for a turn of its own rather than
        running inside that other request."""
        self._completing = True
        try:
            self._on_done(slot, done)
        finally:
            self._completing = False
        if self._waiting and not self.closed:
            self.loop.call_soon(self._process_waiting)

    def _on_done(self, slot: ResponseSlot, task: asyncio.Future[Any]) -> None:
        if self.closed:
            return
        if task.cancelled():
            return self.close("request cancelled")
        exc = task.exception()
        if exc is not None:
            log.error("handler for api %d v%d failed", slot.api_key, slot.version, exc_info=exc)
            return self.close("handler error")
        self._complete(slot, task.result())

    def _complete(self, slot: ResponseSlot, result: Any) -> None:
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

    def _fill(self, slot: ResponseSlot, chunks: Any) -> None:
        slot.chunks = chunks
        slot.ready = True
        if slot.received:
            slot.ready_at = time.monotonic()
        self._take_ready()
        if self.closed:
            return
        if not self._writing:
            self._write()
        if self._out.backlog > OUT_BACKLOG_BYTES:
            self._pause_reading()  # the peer is not taking its responses: read no more requests
        else:
            self._maybe_resume()
        if self._waiting:
            self._process_waiting()

    def _take_ready(self) -> None:
        """Move the answers next in order into the output queue (as far as its backlog bound allows)."""
        try:
            self._out.take_ready(self._slots, self._sending)
        except SegmentEnded:
            self.close("segment file ended before the promised range")
        except OSError as exc:
            self.close(f"reading a segment range failed: {exc}")

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
        if self._sending and self._sending[0].last_chunk <= self._out.left:
            self._timed_answers_sent()
        if (self._slots and self._slots[0].ready and not self._refill_pending
                and self._out.backlog <= OUT_BACKLOG_BYTES // 2):
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
        sending, sent = self._sending, self._out.left
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
        slot = ResponseSlot(api_key, version, correlation_id)
        self._slots.append(slot)
        self._complete(slot, body)

    def send_token(self, token: bytes) -> None:
        """A raw SASL token (SaslHandshake v0 framing): 4-byte size and the bytes, no header."""
        slot = ResponseSlot(-1, 0, 0)
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
            if not self._out and not self._slots and (self.tls is None or not self.tls.cipher_waiting()):
                self._linger_then_close(why)
        self.loop.call_later(seconds, fire)

    def mute(self, seconds: float) -> None:
        """Stop reading requests for a while (a quota's throttle time, sent with the response)."""
        if seconds <= 0 or self.closed:
            return
        if self._slots:  # the request being answered (one at a time): its ThrottleTimeMs, the larger if two quotas
            last = self._slots[-1]  # a record of the connection's own (network.responses.ResponseSlot)
            last.throttle_ms = max(last.throttle_ms, seconds * 1000.0)
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
                and self._waiting_bytes <= READ_AHEAD_BYTES // 2 and self._out.backlog <= OUT_BACKLOG_BYTES // 2):
            self._resume_reading()

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
                if not self.tls.handshaking:
                    # plaintext may wait in the BIO, which no readable event announces
                    self.loop.call_soon(self._decrypt_waiting)
            elif self._frames.buffered:
                self.loop.call_soon(self._parse_waiting)  # whole frames may wait in the scratch

    def _write(self) -> None:
        """Write what is queued, through the TLS session or straight to the socket, as far as the socket takes it;
        then what the written answers let go (the next answers in, reading, the next request, a close)."""
        if self._writing:  # writable again: the peer took bytes, which is activity (not idle)
            self.last_active = time.monotonic()
        tls = self.tls
        try:
            flushed = self._out.send(self.sock, self.fd) if tls is None else tls.send(self._out, self.sock)
        except (BlockingIOError, InterruptedError):
            flushed = False
        except SegmentEnded:
            return self.close("segment file ended before the promised range")
        except ssl.SSLError as exc:
            return self.close(f"TLS error: {exc}")
        except OSError as exc:
            return self.close(f"send failed: {exc}")
        finally:
            self._after_write()
        if self.closed:
            return
        if not flushed:
            return self._wait_writable()
        if self._writing:
            self.loop.remove_writer(self.fd)
            self._writing = False
        self.last_active = time.monotonic()
        if self._close_when_flushed is not None and not self._slots and not self._out:
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
        if self._handshake_timer is not None:
            self._handshake_timer.cancel()
        if self._reading:
            self.loop.remove_reader(self.fd)
        if self._writing:
            self.loop.remove_writer(self.fd)
        self._out.clear()
        self._frames.close()
        self._slots.clear()
        self._waiting.clear()
        self._waiting_bytes = 0
        try:
            self.sock.close()
        except OSError:
            pass
        self.server.forget(self)
