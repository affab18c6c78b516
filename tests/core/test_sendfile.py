"""kbroker._core.sendfile over real sockets: an AF_UNIX socketpair and a TCP pair on 127.0.0.1.

Every test runs for both send_range (sendfile(2)) and copy_range (pread + send), which share
one contract. The blocking full-transfer tests also prove the GIL is released: the peer is
drained by a Python thread, which could not run while a blocked sender held the GIL.
"""
from __future__ import annotations

import errno
import os
import random
import select
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from kbroker._core.sendfile import copy_range, send_range

DATA_LEN = 8 << 20  # 8 MiB: far more than any socket buffer configured below
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def data():
    return random.Random(1234).randbytes(DATA_LEN)


@pytest.fixture
def file_fd(tmp_path, data):
    path = tmp_path / "segment.log"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    yield fd
    os.close(fd)


def _tcp_pair():
    with socket.create_server(("127.0.0.1", 0)) as srv:
        # fixed buffer sizes turn off autotuning, so "full" comes after a few hundred KiB
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
        a = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 << 10)
        a.connect(srv.getsockname())
        b, _ = srv.accept()
    return a, b


@pytest.fixture(params=["unix", "tcp"])
def pair(request):
    """(sender, receiver), both blocking."""
    a, b = socket.socketpair() if request.param == "unix" else _tcp_pair()
    yield request.param, a, b
    a.close()
    b.close()


def _send(sock, fd, offset, count):
    return send_range(sock.fileno(), fd, offset, count)


_COPY_BUF = bytearray(64 << 10)
_ODD_BUF = bytearray(4099)


def _copy(sock, fd, offset, count, _buf=_COPY_BUF):
    return copy_range(sock.fileno(), fd, offset, count, _buf)


def _copy_odd(sock, fd, offset, count, _buf=_ODD_BUF):
    return copy_range(sock.fileno(), fd, offset, count, _buf)


TRANSFERS = {"send_range": _send, "copy_range": _copy, "copy_range_odd_buffer": _copy_odd}


@pytest.fixture(params=list(TRANSFERS))
def transfer(request):
    return TRANSFERS[request.param]


def _reader(sock, n, out):
    """Thread body: read exactly n bytes (or until EOF) into out."""
    while len(out) < n:
        chunk = sock.recv(min(1 << 20, n - len(out)))
        if not chunk:
            break
        out += chunk


def _drain(sock, out):
    """Read whatever is available now without blocking."""
    while True:
        try:
            chunk = sock.recv(1 << 20, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return
        if not chunk:
            return
        out += chunk


# ------------------------------------------------------------------ full transfers


@pytest.mark.parametrize("offset,count", [(0, DATA_LEN), (4093, 5 << 20), (1, 3)])
def test_full_transfer_blocking(pair, transfer, file_fd, data, offset, count):
    _, a, b = pair
    os.lseek(file_fd, 777, os.SEEK_SET)
    got = bytearray()
    t = threading.Thread(target=_reader, args=(b, count, got))
    t.start()
    try:
        n = transfer(a, file_fd, offset, count)
    finally:
        a.shutdown(socket.SHUT_WR)  # a short transfer must fail the test, not hang the reader
        t.join()
    assert n == count
    assert got == data[offset:offset + count]
    assert os.lseek(file_fd, 0, os.SEEK_CUR) == 777  # the file position is not moved


def test_count_past_eof_sends_the_rest(pair, transfer, file_fd, data):
    _, a, b = pair
    got = bytearray()
    t = threading.Thread(target=_reader, args=(b, 1000, got))
    t.start()
    try:
        assert transfer(a, file_fd, DATA_LEN - 1000, 10**9) == 1000
    finally:
        a.shutdown(socket.SHUT_WR)
        t.join()
    assert got == data[-1000:]


@pytest.mark.parametrize("offset", [DATA_LEN, DATA_LEN + 1, 2**40])
def test_offset_at_or_beyond_eof(pair, transfer, file_fd, offset):
    _, a, _ = pair
    assert transfer(a, file_fd, offset, 4096) == 0


def test_zero_count(pair, transfer, file_fd):
    _, a, _ = pair
    assert transfer(a, file_fd, 0, 0) == 0


# ------------------------------------------------------------------ non-blocking sockets


def test_nonblocking_partial_then_eagain_then_resume(pair, transfer, file_fd, data):
    kind, a, b = pair
    a.setblocking(False)
    offset, count = 12345, 6 << 20
    first = transfer(a, file_fd, offset, count)
    assert 0 < first < count  # socket buffers filled up
    sent = first
    if kind == "unix":
        assert transfer(a, file_fd, offset + sent, count - sent) == 0  # still full: EAGAIN
    else:
        # TCP may free a little send buffer as late ACKs come in; it still ends at 0 quickly.
        for _ in range(1000):
            n = transfer(a, file_fd, offset + sent, count - sent)
            assert n >= 0
            sent += n
            if n == 0:
                break
        else:
            pytest.fail("a non-blocking socket whose peer does not read never reported EAGAIN")
    got = bytearray()
    for _ in range(100_000):  # guard against a livelock only; the loop ends far sooner
        if sent == count:
            break
        _drain(b, got)
        select.select([], [a], [], 10)  # wait for room (a safety timeout, not a measurement)
        n = transfer(a, file_fd, offset + sent, count - sent)
        assert 0 <= n <= count - sent
        sent += n
    assert sent == count
    b.setblocking(True)
    _reader(b, count, got)
    assert len(got) == count
    assert got == data[offset:offset + count]


# ------------------------------------------------------------------ signals (EINTR)


class _Alarm(Exception):
    pass


def _with_itimer(handler, interval, fn):
    """Run fn() while SIGALRM fires every ``interval`` s (Python's handlers interrupt syscalls)."""
    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, interval, interval)
    try:
        return fn()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0, 0)
        signal.signal(signal.SIGALRM, old)


def test_signals_during_blocking_transfer(transfer, file_fd, data):
    """A slow reader keeps the sender blocked while SIGALRM keeps interrupting it: EINTR after
    partial progress is retried, so the whole range still arrives, in order."""
    a, b = socket.socketpair()
    count = 1 << 20
    got = bytearray()

    def slow_reader():
        # Pauses longer than the timer period, so the sender is also interrupted after partial
        # progress with nothing new sent (EINTR, not a short count): that must be retried.
        while len(got) < count:
            chunk = b.recv(64 << 10)
            if not chunk:
                break
            got.extend(chunk)
            time.sleep(0.005)

    t = threading.Thread(target=slow_reader)
    t.start()
    try:
        n = _with_itimer(lambda *_: None, 0.001, lambda: transfer(a, file_fd, 100, count))
    finally:
        a.shutdown(socket.SHUT_WR)  # a short transfer must fail the test, not hang the reader
        t.join()
        a.close()
        b.close()
    assert n == count
    assert got == data[100:100 + count]


def test_signal_handler_exception_propagates(transfer, file_fd):
    """Interrupted before sending anything, the call runs Python's handlers; their exception
    (think KeyboardInterrupt) comes out instead of the call blocking on."""
    a, b = socket.socketpair()
    try:
        a.setblocking(False)
        while True:  # fill the socket so the next blocking call cannot make progress
            try:
                a.send(b"\0" * 65536)
            except BlockingIOError:
                break
        a.setblocking(True)

        def raise_alarm(*_):
            raise _Alarm

        with pytest.raises(_Alarm):
            _with_itimer(raise_alarm, 0.05, lambda: transfer(a, file_fd, 0, 1 << 20))
    finally:
        a.close()
        b.close()


# ------------------------------------------------------------------ errors


def test_peer_closed_raises(pair, transfer, file_fd):
    kind, a, b = pair
    if kind == "tcp":
        # RST instead of FIN, so the sender's next write fails rather than being absorbed
        b.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    b.close()
    for _ in range(100):  # TCP: a write may still be accepted before the reset is seen
        try:
            n = transfer(a, file_fd, 0, 1 << 20)
        except (BrokenPipeError, ConnectionResetError):
            break
        assert n >= 0
        select.select([], [], [], 0.01)
    else:
        pytest.fail("writing to a closed peer never failed")
    # and it keeps failing (an OSError subclass with its errno)
    with pytest.raises(OSError) as exc:
        transfer(a, file_fd, 0, 1 << 20)
    assert isinstance(exc.value, (BrokenPipeError, ConnectionResetError))
    assert exc.value.errno in (errno.EPIPE, errno.ECONNRESET)


def test_peer_closes_midway_partial_then_error(transfer, file_fd, data):
    # The peer reads 1 MiB and goes away while the (blocking) sender is stuck in the kernel:
    # the call returns what was sent, the next one raises.
    a, b = socket.socketpair()
    try:
        got = bytearray()

        def read_then_close():
            _reader(b, 1 << 20, got)
            b.close()

        t = threading.Thread(target=read_then_close)
        t.start()
        n = transfer(a, file_fd, 0, DATA_LEN)
        t.join()
        assert (1 << 20) <= n < DATA_LEN
        assert got == data[:1 << 20]
        with pytest.raises((BrokenPipeError, ConnectionResetError)):
            transfer(a, file_fd, n, DATA_LEN - n)
    finally:
        a.close()
        b.close()


BY_FD = {
    "send_range": send_range,
    "copy_range": lambda s, f, o, c: copy_range(s, f, o, c, bytearray(100)),
}


@pytest.mark.parametrize("name", list(BY_FD))
def test_bad_file_descriptors(name, file_fd):
    fn = BY_FD[name]
    a, b = socket.socketpair()
    try:
        r, w = os.pipe()
        os.close(r)
        os.close(w)  # two descriptor numbers that are now closed
        with pytest.raises(OSError) as exc:
            fn(a.fileno(), r, 0, 10)
        assert exc.value.errno == errno.EBADF
        with pytest.raises(OSError) as exc:
            fn(w, file_fd, 0, 10)
        assert exc.value.errno == errno.EBADF
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("name", list(BY_FD))
def test_negative_arguments(name, file_fd):
    fn = BY_FD[name]
    with pytest.raises(ValueError):
        fn(1, file_fd, -1, 10)
    with pytest.raises(ValueError):
        fn(1, file_fd, 0, -1)


def test_copy_range_buffer_checks(file_fd):
    a, b = socket.socketpair()
    try:
        with pytest.raises(ValueError):
            copy_range(a.fileno(), file_fd, 0, 10, bytearray())
        with pytest.raises((TypeError, BufferError)):
            copy_range(a.fileno(), file_fd, 0, 10, b"read-only")
        # any writable buffer works, e.g. a view into a larger bytearray
        backing = bytearray(64)
        assert copy_range(a.fileno(), file_fd, 0, 10, memoryview(backing)[8:16]) == 10
        assert len(b.recv(100)) == 10
    finally:
        a.close()
        b.close()


def test_copy_range_without_sigpipe_ignored(tmp_path):
    """send(2) carries MSG_NOSIGNAL: even with SIGPIPE at its default (terminate), a closed peer
    is an exception. (sendfile(2) has no such flag; it relies on CPython ignoring SIGPIPE.)"""
    path = tmp_path / "f"
    path.write_bytes(b"x" * 100_000)
    code = textwrap.dedent(f"""
        import os, signal, socket
        from kbroker._core.sendfile import copy_range
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        a, b = socket.socketpair()
        b.close()
        fd = os.open({str(path)!r}, os.O_RDONLY)
        try:
            copy_range(a.fileno(), fd, 0, 100_000, bytearray(4096))
        except BrokenPipeError:
            print("BrokenPipeError")
    """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "BrokenPipeError"
