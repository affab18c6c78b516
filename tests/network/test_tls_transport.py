"""The TLS transport on its own, without a Connection: over a loopback TCP socket it completes the server side of
a handshake, decrypts a client's frames (a big one in the small records librdkafka writes, small ones several to a
record) whole into a FrameReader, and encrypts an output queue of bytes and segment file ranges byte-exact,
one TLS_FILE_CHUNK of segment bytes per call so a large fetch never holds the loop."""
from __future__ import annotations

import os
import socket
import ssl
from pathlib import Path

import pytest

from kbroker.log.segment import FileSlice
from kbroker.network.framing import FrameReader
from kbroker.network.responses import OutputQueue
from kbroker.network.tls_transport import TLS_FILE_CHUNK, TlsTransport
from tests.network.loopback import accepted_pair
from tests.security.pki import make_pki


class Client:
    """A TLS client over memory BIOs whose ciphertext goes through the client end of the socket pair."""

    def __init__(self, sock: socket.socket, ca: Path) -> None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.load_verify_locations(str(ca))
        self.sock = sock
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = context.wrap_bio(self.incoming, self.outgoing, server_hostname="localhost")

    def flush(self) -> None:
        data = self.outgoing.read()
        if data:
            self.sock.sendall(data)

    def take(self, timeout: float = 0.2) -> None:
        """Ciphertext the server sent, into the client's session (what arrives within the timeout)."""
        self.sock.settimeout(timeout)
        try:
            while True:
                data = self.sock.recv(1 << 20)
                if not data:
                    return
                self.incoming.write(data)
        except TimeoutError:
            pass


def settle(server_sock: socket.socket, transport: TlsTransport) -> int:
    """Everything the client sent, into the server's session (the socket is non-blocking)."""
    got = 0
    while True:
        try:
            n = transport.receive(server_sock)
        except BlockingIOError:
            return got
        assert n, "the client closed"
        got += n


@pytest.fixture
def session(tmp_path: Path):
    pki = make_pki(tmp_path / "pki")
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(str(pki.broker))
    server_sock, client_sock, _ = accepted_pair()
    transport = TlsTransport(server_ctx)
    client = Client(client_sock, pki.ca)
    for _ in range(10):  # the handshake, each side in turn
        try:
            client.tls.do_handshake()
        except ssl.SSLWantReadError:
            pass
        client.flush()
        settle(server_sock, transport)
        if transport.handshaking and transport.handshake():
            assert transport.send_cipher(server_sock)
            break
        assert transport.send_cipher(server_sock)
        client.take()
    assert not transport.handshaking
    client.take()
    client.tls.do_handshake()
    yield server_sock, transport, client
    server_sock.close()
    client_sock.close()


def test_frames_arrive_whole_whatever_the_records(session) -> None:
    server_sock, transport, client = session
    frames: list[bytes] = []
    reader = FrameReader(8 << 20, lambda f: frames.append(bytes(f)), lambda size, head: pytest.fail("refused"),
                         lambda: True, borrow=False)
    big = os.urandom(1 << 20)
    small = [os.urandom(n) for n in (0, 5, 300, 70_000)]
    stream = b"".join(len(f).to_bytes(4, "big") + f for f in [small[0], big, *small[1:]])
    for pos in range(0, len(stream), 2700):  # one TLS record per write, as librdkafka's 2.7 KiB
        client.tls.write(stream[pos:pos + 2700])
        if pos % (64 * 2700) == 0:
            client.flush()
            settle(server_sock, transport)
            assert transport.decrypt_into(reader)
    client.flush()
    for _ in range(100):
        if len(frames) == 5:
            break
        settle(server_sock, transport)
        assert transport.decrypt_into(reader)
    assert frames == [small[0], big, *small[1:]]


def test_a_queue_of_bytes_and_segment_ranges_is_encrypted_exactly(session, tmp_path: Path) -> None:
    server_sock, transport, client = session
    content = os.urandom(3 * TLS_FILE_CHUNK + 1234)
    path = tmp_path / "segment.log"
    path.write_bytes(content)
    fd = os.open(path, os.O_RDONLY)
    try:
        out = OutputQueue()
        chunks = [b"head", FileSlice(fd, 7, len(content) - 7), b"", b"tail"]
        for chunk in chunks:
            out.put(chunk)
        turns = 0
        while not transport.send(out, server_sock):
            turns += 1
            client.take(0.05)
            assert turns < 100
        assert not out and not transport.cipher_waiting()
        assert turns >= 3, "one TLS_FILE_CHUNK of segment bytes per call, then the loop's turn"
        client.take()
        plain = bytearray()
        try:
            while True:
                plain += client.tls.read(1 << 20)
        except ssl.SSLWantReadError:
            pass
        assert bytes(plain) == b"head" + content[7:] + b"tail"
    finally:
        os.close(fd)
