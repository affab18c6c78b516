"""TLS for SSL and SASL_SSL listeners: an ``ssl.SSLObject`` between two memory BIOs, on the connection's raw
non-blocking socket.

Measured against a non-blocking ``SSLSocket`` on this loop (1 KiB records in, 256 KiB writes out, 100 MB each):
receiving 797 vs 553 MB/s (the BIO takes 64 KiB per recv, an SSLSocket reads record by record, two syscalls
each), sending 654 vs 762 MB/s; produce is what TLS must not slow, so BIOs. Ciphertext leaves with ``send``;
segment ranges cannot go by sendfile, so they are read with ``preadv`` into one reused buffer (TLS_FILE_CHUNK at
a time) and encrypted, one chunk per writable event so a large fetch never holds the loop. Receiving 200 MiB of
Produce frames in the 2.7 KiB records librdkafka writes costs the loop 0.41 s of CPU over TLS against 0.11 s in
plaintext; OpenSSL's decryption of those records alone is 0.29 s (one SSL_read per record, 3.7 us each with
AES-256-GCM), so the rest is near that floor (``python -m bench.experiments.tls`` measures the decryption alone).

Decryption stays on the loop, measured: OpenSSL gives one record per read (2.7 KiB from librdkafka, about 1.4 us)
and the reading thread needs the GIL back after each, so a worker thread decrypts only while the loop is idle. A
worker that took the rest of a big frame (128 KiB or more waiting) while the connection paused cost the broker 12-16 %
more CPU per 192 MiB produced over SSL (0.47 vs 0.42 s in ``python -m bench --sweeps security``, 6 rounds; 0.50 vs
0.43 s pinned to one core); it was faster only under heavy load from other processes, as much when pinned to one core
where nothing runs in parallel: the scheduler's doing, not the decryption's.
"""
from __future__ import annotations

import os
import socket
import ssl
from collections.abc import Callable
from typing import Any, cast

from .framing import FrameReader
from .responses import BYTES, OutputQueue, SegmentEnded

# segment bytes read and encrypted per writable event, and ciphertext gathered before a send
TLS_FILE_CHUNK = 128 * 1024
TLS_FLUSH_BYTES = 256 * 1024
_RAW = bytearray(256 * 1024)        # every TLS connection's recv lands here first (the loop is one thread)
_RAW_VIEW = memoryview(_RAW)
_FILE = bytearray(TLS_FILE_CHUNK)   # segment ranges read for encryption (used and released at once)
_FILE_VIEW = memoryview(_FILE)


class TlsTransport:
    """The server side of one TLS session. The connection owns the socket and says when to use it: ``receive``
    on a readable event, ``handshake`` until it is done, then ``decrypt_into`` its frames; ``send`` encrypts its
    output queue; ``cipher_waiting`` says whether encrypted bytes still wait for the socket."""

    def __init__(self, context: ssl.SSLContext) -> None:
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self.session = context.wrap_bio(self._in, self._out, server_side=True)
        # SSLObject.read is a Python wrapper around the C object's read(len, buffer): called once per
        # TLS record (tens of thousands per 100 MB), the wrapper's cost shows, so go to the C method
        self._read: Callable[[int, memoryview], int] = (
            getattr(getattr(self.session, "_sslobj", None), "read", None) or cast(Any, self.session.read))
        self.handshaking = True
        self._cipher: bytes = b""     # encrypted bytes not sent yet
        self._cipher_pos = 0

    def peer_certificate(self) -> bytes | None:
        """The client's certificate (DER), None without one."""
        return self.session.getpeercert(binary_form=True)

    # -- in ------------------------------------------------------------------------------------

    def receive(self, sock: socket.socket) -> int:
        """One ``recv`` of ciphertext into the session; the byte count (0: the peer closed). Raises what the
        socket raises."""
        n = sock.recv_into(_RAW_VIEW)
        if n:
            self._in.write(_RAW_VIEW[:n])
        return n

    def handshake(self) -> bool:
        """Advance the handshake with what was received; True once it is done. Raises ssl.SSLError (or
        ValueError) when it failed; its alert, if any, waits to be sent."""
        try:
            self.session.do_handshake()
        except ssl.SSLWantReadError:
            return False
        self.handshaking = False
        return True

    def decrypt_into(self, frames: FrameReader) -> bool:
        """Plaintext out of the session into the frames, parsed as it comes; False when the stream ended.
        Raises ssl.SSLZeroReturnError (close_notify) and ssl.SSLError."""
        return frames.fill(self._read, ssl.SSLWantReadError)

    # -- out -----------------------------------------------------------------------------------

    def cipher_waiting(self) -> bool:
        """Encrypted bytes not sent yet (what a close must wait for): handshake messages, alerts, TLS 1.3
        post-handshake messages, or encrypted answers."""
        return self._cipher_pos < len(self._cipher) or bool(self._out.pending)

    def send_cipher(self, sock: socket.socket) -> bool:
        """Send the encrypted bytes waiting; True when none are left. Raises what the socket raises."""
        while True:
            if self._cipher_pos >= len(self._cipher):
                if not self._out.pending:
                    self._cipher, self._cipher_pos = b"", 0
                    return True
                self._cipher, self._cipher_pos = self._out.read(), 0
            n = sock.send(memoryview(self._cipher)[self._cipher_pos:] if self._cipher_pos else self._cipher)
            self._cipher_pos += n
            if self._cipher_pos < len(self._cipher):
                return False

    def send(self, out: OutputQueue, sock: socket.socket) -> bool:
        """Encrypt what is queued (bytes coalesced, segment ranges a chunk at a time) and send it; True once all
        is written, False when the socket is full or a chunk of segment bytes went this turn (let others run).
        Raises what the socket raises, ssl.SSLError and SegmentEnded."""
        session = self.session
        file_bytes = 0
        while True:
            if not self.send_cipher(sock):
                return False
            if self.handshaking or not out:
                return True
            if file_bytes >= TLS_FILE_CHUNK:  # one chunk per writable event: let others run
                return False
            chunks = out.chunks
            while chunks and self._out.pending < TLS_FLUSH_BYTES:
                chunk = chunks[0]
                if isinstance(chunk, BYTES):
                    if len(chunk):
                        session.write(chunk)
                    out.pop()
                    continue
                if file_bytes >= TLS_FILE_CHUNK:
                    break
                want = min(TLS_FILE_CHUNK, chunk.length - out.pos)
                n = os.preadv(chunk.fd, [_FILE_VIEW[:want]], chunk.position + out.pos)
                if n <= 0:
                    raise SegmentEnded
                session.write(_FILE_VIEW[:n])
                file_bytes += n
                out.pos += n
                if out.pos >= chunk.length:
                    out.pop()
                    out.pos = 0
