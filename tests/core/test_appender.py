"""kbroker._core.appender against real files, once per backend (io_uring, pwritev)."""
from __future__ import annotations

import errno
import hashlib
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from kbroker._core import appender as A

IOV_MAX = os.sysconf("SC_IOV_MAX")
URING = A.io_uring_available()
needs_uring = pytest.mark.skipif(not URING, reason="io_uring cannot be set up on this kernel/sandbox")


@pytest.fixture(params=[
    pytest.param("io_uring", marks=needs_uring),
    "pwritev",
])
def backend(request) -> str:
    return request.param


@pytest.fixture
def app(backend):
    with A.open_appender(backend) as a:
        assert a.backend == backend
        yield a


@pytest.fixture
def opener(tmp_path):
    """open(name) -> fd of a fresh file in tmp_path; closes everything at teardown."""
    fds = []

    def _open(name="seg.log", base: Path = tmp_path) -> int:
        fd = os.open(base / name, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        fds.append(fd)
        return fd

    yield _open
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def content(fd: int) -> bytes:
    return os.pread(fd, os.fstat(fd).st_size + 1, 0)


def closed_fd() -> int:
    r, w = os.pipe()
    os.close(r)
    os.close(w)
    return r


# -- round trips ---------------------------------------------------------------------------

def test_write_at_positions(app, opener):
    fd = opener()
    assert app.write(fd, 0, b"hello") == 5
    assert app.write(fd, 5, bytearray(b" world")) == 6
    assert app.write(fd, 20, memoryview(b"xyz")) == 3  # past EOF: a hole
    assert app.write(fd, 1, b"E") == 1  # overwrite in place
    assert content(fd) == b"hEllo world" + b"\0" * 9 + b"xyz"
    assert app.write(fd, 23, b"") == 0
    assert os.fstat(fd).st_size == 23


def test_writev_back_to_back(app, opener):
    fd = opener()
    app.write(fd, 0, b"#" * 4)
    bufs = [b"ab", bytearray(b"cd"), memoryview(b"--ef--")[2:4], b"", memoryview(bytearray(b"gh"))]
    assert app.writev(fd, 4, bufs) == 8
    assert app.writev(fd, 12, ()) == 0
    assert content(fd) == b"####abcdefgh"


def test_buffer_views_released(app, opener):
    """Views are held only during the call: a bytearray can be resized right after, also
    after a failed call."""
    fd = opener()
    ba = bytearray(b"x" * 100)
    app.write(fd, 0, ba)
    ba.extend(b"y")
    app.inject_error(errno.EIO)
    with pytest.raises(OSError):
        app.writev(fd, 0, [ba, ba])
    ba.extend(b"z")
    with pytest.raises(OSError):
        app.submit([(closed_fd(), 0, [ba])])
    ba.extend(b"w")


def test_rejects_bad_arguments(app, opener):
    fd = opener()
    with pytest.raises(ValueError):
        app.write(fd, -1, b"x")
    with pytest.raises(TypeError):
        app.write(fd, 0, "text")
    with pytest.raises(TypeError):
        app.writev(fd, 0, [b"ok", 42])
    with pytest.raises(TypeError):
        app.writev(fd, 0, b"a single buffer, not a sequence")
    with pytest.raises(TypeError):
        app.submit([(fd, 0, b"a single buffer")])
    with pytest.raises(BufferError):  # not contiguous
        app.write(fd, 0, memoryview(b"abcdef")[::2])
    assert app.write(fd, 0, b"still fine") == 10
    assert content(fd) == b"still fine"


# -- submit --------------------------------------------------------------------------------

def test_submit_many_fds_with_sync(app, opener):
    fds = [opener(f"p{i}.log") for i in range(12)]
    writes, expect = [], {}
    for r in range(3):
        for i, fd in enumerate(fds):
            data = f"{i}:{r};".encode() * (i + 1)
            pos = len(expect.get(fd, b""))
            writes.append((fd, pos, [data[:3], data[3:]]))
            expect[fd] = expect.get(fd, b"") + data
    total = app.submit(writes, sync_fds=fds[::2] + [fds[0]])  # duplicate sync fd is fine
    assert total == sum(len(v) for v in expect.values())
    for fd in fds:
        assert content(fd) == expect[fd]


def test_submit_sync_only_and_empty(app, opener):
    fd = opener()
    app.write(fd, 0, b"data")
    assert app.submit([], sync_fds=[fd]) == 0
    assert app.submit([]) == 0
    assert app.submit([(fd, 4, [])]) == 0
    app.sync(fd)
    assert content(fd) == b"data"


@pytest.mark.parametrize("depth", [1, 2, 8])
def test_submit_more_writes_than_queue_depth(backend, opener, depth):
    """io_uring goes in rounds when the ring is smaller than the batch; the syncs come last."""
    fds = [opener(f"p{i}.log") for i in range(7)]
    writes, expect = [], {fd: b"" for fd in fds}
    for r in range(5):
        for fd in fds:
            data = os.urandom(100 + r)
            writes.append((fd, len(expect[fd]), [data]))
            expect[fd] += data
    with A.open_appender(backend, queue_depth=depth) as a:
        assert a.submit(writes, sync_fds=fds) == sum(map(len, expect.values()))
        assert a.submit([(fds[0], len(expect[fds[0]]), [b"tail"])], sync_fds=fds) == 4
    expect[fds[0]] += b"tail"
    for fd in fds:
        assert content(fd) == expect[fd]


def test_submit_accepts_any_sequences(app, opener):
    fd = opener()
    assert app.submit(((fd, 0, (b"a", b"b")), [fd, 2, [memoryview(b"c")]]), sync_fds=(fd,)) == 3
    assert content(fd) == b"abc"


# -- large and many ------------------------------------------------------------------------

def test_large_write_64mib(app, opener):
    fd = opener()
    block = os.urandom(1 << 20)
    big = block * 64
    assert app.write(fd, 0, big) == len(big)
    assert app.writev(fd, len(big), [big[: 1 << 25], memoryview(big)[1 << 25:]]) == len(big)
    assert os.fstat(fd).st_size == 2 * len(big)
    digest = hashlib.sha256(big).digest()
    with open(fd, "rb", closefd=False) as f:
        assert hashlib.sha256(f.read(len(big))).digest() == digest
        assert hashlib.sha256(f.read(len(big))).digest() == digest


def test_more_than_iov_max_buffers(app, opener):
    fd = opener()
    n = 3 * IOV_MAX + 17
    bufs = [bytes([i % 251]) * (1 + i % 5) for i in range(n)]
    expect = b"".join(bufs)
    assert app.writev(fd, 0, bufs) == len(expect)
    assert content(fd) == expect
    fd2 = opener("b.log")
    total = app.submit([(fd2, 0, bufs), (fd, len(expect), bufs)], sync_fds=[fd, fd2])
    assert total == 2 * len(expect)
    assert content(fd) == expect * 2
    assert content(fd2) == expect


def test_concurrent_threads_share_one_appender(app, tmp_path):
    errors = []

    def worker(k):
        try:
            fd = os.open(tmp_path / f"t{k}.log", os.O_RDWR | os.O_CREAT, 0o644)
            try:
                for i in range(200):
                    app.write(fd, i * 8, f"{k:03d}{i:05d}".encode())
            finally:
                os.close(fd)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for k in range(4):
        assert (tmp_path / f"t{k}.log").read_bytes() == b"".join(f"{k:03d}{i:05d}".encode() for i in range(200))


# -- errors --------------------------------------------------------------------------------

@pytest.mark.parametrize("err, exc_type", [
    (errno.ENOSPC, OSError),
    (errno.EIO, OSError),
    (errno.EPIPE, BrokenPipeError),
])
def test_inject_error_write(app, opener, err, exc_type):
    fd = opener()
    app.write(fd, 0, b"0123")
    app.inject_error(err, after_writes=2)
    app.write(fd, 4, b"4567")
    app.writev(fd, 8, [b"89", b"ab"])
    with pytest.raises(OSError) as info:
        app.write(fd, 12, b"LOST")
    assert type(info.value) is exc_type
    assert info.value.errno == err
    assert content(fd) == b"0123456789ab"  # nothing of the failed write
    app.write(fd, 12, b"cd")  # one-shot: the next write goes through
    assert content(fd) == b"0123456789abcd"


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EIO])
def test_inject_error_writev_and_submit(app, opener, err):
    fd, fd2 = opener("a.log"), opener("b.log")
    app.inject_error(err)
    with pytest.raises(OSError) as info:
        app.writev(fd, 0, [b"x" * 10] * (IOV_MAX + 5))
    assert info.value.errno == err
    assert os.fstat(fd).st_size == 0

    app.inject_error(err, after_writes=1)
    with pytest.raises(OSError) as info:
        app.submit([(fd, 0, [b"first"]), (fd2, 0, [b"second"]), (fd, 5, [b"third"])], sync_fds=[fd, fd2])
    assert info.value.errno == err
    assert os.fstat(fd2).st_size == 0  # the failing entry left nothing
    assert content(fd) in (b"first", b"firstthird")  # the others may or may not have landed
    assert app.submit([(fd2, 0, [b"ok"])], sync_fds=[fd2]) == 2


def test_inject_error_clear_and_validation(app, opener):
    fd = opener()
    app.inject_error(errno.EIO, after_writes=0)
    app.inject_error(0)
    assert app.write(fd, 0, b"fine") == 4
    app.inject_error(errno.EIO)
    assert app.write(fd, 4, b"") == 0  # empty writes do not consume the hook
    with pytest.raises(OSError):
        app.write(fd, 4, b"x")
    with pytest.raises(ValueError):
        app.inject_error(-1)
    with pytest.raises(ValueError):
        app.inject_error(errno.EIO, after_writes=-1)


def test_bad_fd_is_ebadf_and_appender_stays_usable(app, opener):
    fd = opener()
    bad = closed_fd()
    with pytest.raises(OSError) as info:
        app.write(bad, 0, b"x")
    assert info.value.errno == errno.EBADF
    with pytest.raises(OSError) as info:
        app.submit([(fd, 0, [b"good"]), (bad, 0, [b"bad"])], sync_fds=[fd, bad])
    assert info.value.errno == errno.EBADF
    with pytest.raises(OSError) as info:
        app.submit([], sync_fds=[bad])
    assert info.value.errno == errno.EBADF
    with pytest.raises(OSError) as info:
        app.sync(bad)
    assert info.value.errno == errno.EBADF
    with pytest.raises(OSError) as info:
        app.write(-1, 0, b"x")
    assert info.value.errno == errno.EBADF
    assert app.write(fd, 0, b"after") == 5
    assert app.submit([(fd, 5, [b"!"])], sync_fds=[fd]) == 1
    assert content(fd) == b"after!"


def test_read_only_fd_is_ebadf(app, tmp_path):
    path = tmp_path / "ro.log"
    path.write_bytes(b"")
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(OSError) as info:
            app.write(fd, 0, b"x")
        assert info.value.errno == errno.EBADF
    finally:
        os.close(fd)


@pytest.fixture
def tiny_tmpfs(tmp_path):
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    try:
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)],
                              capture_output=True, text=True)
    except FileNotFoundError:
        pytest.skip("no mount(8) binary to create a tiny tmpfs")
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a 256k tmpfs (needs root / CAP_SYS_ADMIN, EPERM here): {proc.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


@pytest.mark.root
def test_real_enospc_on_tiny_tmpfs(backend, tiny_tmpfs):
    fd = os.open(tiny_tmpfs / "seg.log", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        with A.open_appender(backend) as a:
            assert a.write(fd, 0, b"x" * 4096) == 4096
            # One write larger than the filesystem: the kernel writes part of it (a short
            # write), the appender resumes the rest, and that gets ENOSPC.
            with pytest.raises(OSError) as info:
                a.write(fd, 4096, os.urandom(1 << 20))
            assert info.value.errno == errno.ENOSPC
            assert type(info.value) is OSError
            with pytest.raises(OSError) as info:
                a.submit([(fd, (1 << 20) + i * 65536, [b"y" * 65536]) for i in range(8)], sync_fds=[fd])
            assert info.value.errno == errno.ENOSPC
            os.ftruncate(fd, 4096)  # the caller's recovery: cut the garbage, go on
            assert a.write(fd, 4096, b"ok") == 2
            a.sync(fd)
            assert os.pread(fd, 8, 4092) == b"xxxxok"
    finally:
        os.close(fd)


def test_short_write_is_resumed_until_the_real_error(backend, tmp_path):
    """RLIMIT_FSIZE makes the kernel write a prefix and then fail with EFBIG: the appender
    must resume after the short write (so the prefix is exactly the limit) and surface EFBIG.
    Runs in a child so the limit does not leak into pytest."""
    if backend == "io_uring" and not URING:
        pytest.skip("io_uring cannot be set up on this kernel/sandbox")
    script = textwrap.dedent(f"""
        import errno, os, resource, signal
        from kbroker._core import appender as A
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))
        fd = os.open({str(tmp_path / "limited.log")!r}, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        with A.open_appender({backend!r}) as a:
            try:
                a.writev(fd, 0, [b"a" * 60_000, b"b" * 60_000])
            except OSError as e:
                assert e.errno == errno.EFBIG, e
            else:
                raise AssertionError("no EFBIG")
            assert os.fstat(fd).st_size == 100_000, os.fstat(fd).st_size
            assert os.pread(fd, 100_000, 0) == b"a" * 60_000 + b"b" * 40_000
            assert a.write(fd, 0, b"c" * 10) == 10
        print("ok")
    """)
    root = Path(A.__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_signals_during_writes_are_retried(app, opener, tmp_path):
    """A signal landing while the kernel writes (io_uring_enter returns -EINTR) is retried,
    also when the thread's errno holds a stale value from an earlier failed call."""
    import signal

    fd = opener()
    hits = []
    old = signal.signal(signal.SIGALRM, lambda *_: hits.append(1))
    signal.setitimer(signal.ITIMER_REAL, 0.0005, 0.0005)
    try:
        block = os.urandom(64 << 10)
        for i in range(1500):
            try:
                os.stat(tmp_path / "missing")  # leaves errno = ENOENT in this thread
            except FileNotFoundError:
                pass
            if i % 3:
                app.write(fd, i * len(block), block)
            else:
                app.submit([(fd, i * len(block), [block[:100], block[100:]])], sync_fds=[fd] if i % 100 == 0 else ())
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0, 0)
        signal.signal(signal.SIGALRM, old)
    assert os.fstat(fd).st_size == 1500 * len(block)
    assert os.pread(fd, len(block), 777 * len(block)) == block
    assert hits  # the timer did fire while we were writing


# -- lifecycle and selection ---------------------------------------------------------------

def test_closed_appender_raises_value_error(backend, opener):
    fd = opener()
    a = A.open_appender(backend)
    with a as entered:
        assert entered is a
        a.write(fd, 0, b"x")
    assert a.closed
    a.close()  # idempotent
    for call in (lambda: a.write(fd, 0, b"x"), lambda: a.writev(fd, 0, [b"x"]),
                 lambda: a.submit([(fd, 0, [b"x"])]), lambda: a.submit([], sync_fds=[fd]),
                 lambda: a.sync(fd), lambda: a.__enter__()):
        with pytest.raises(ValueError):
            call()
    assert content(fd) == b"x"


def test_no_fd_leak(backend, opener):
    """Rings are torn down by close() and by garbage collection alike."""
    fd = opener()
    before = len(os.listdir("/proc/self/fd"))
    for i in range(200):
        a = A.open_appender(backend, queue_depth=8)
        a.write(fd, i, b"x")
        if i % 2:
            a.close()
        del a
    assert len(os.listdir("/proc/self/fd")) == before
    assert content(fd) == b"x" * 200


def test_io_uring_available_is_cached_bool():
    assert A.io_uring_available() is A.io_uring_available()
    assert isinstance(A.io_uring_available(), bool)


def test_explicit_backends():
    with A.open_appender("pwritev") as a:
        assert isinstance(a, A.PwritevAppender) and isinstance(a, A.Appender)
    if URING:
        with A.open_appender("io_uring", queue_depth=16) as a:
            assert isinstance(a, A.UringAppender) and a.backend == "io_uring"
            assert a.queue_depth >= 16
    else:
        with pytest.raises(OSError):
            A.open_appender("io_uring")
    with pytest.raises(ValueError):
        A.open_appender("aio")
    with pytest.raises(ValueError):
        A.UringAppender(queue_depth=0)
    with pytest.raises(TypeError):
        A.Appender()


@pytest.mark.parametrize("env, expected", [
    (None, "io_uring" if URING else "pwritev"),
    ("pwritev", "pwritev"),
    ("io_uring", "io_uring" if URING else "pwritev"),
    ("bogus", "io_uring" if URING else "pwritev"),
])
def test_auto_selection_honours_env(monkeypatch, env, expected):
    if env is None:
        monkeypatch.delenv("KBROKER_APPENDER", raising=False)
    else:
        monkeypatch.setenv("KBROKER_APPENDER", env)
    with A.open_appender("auto") as a:
        assert a.backend == expected
    with A.open_appender() as a:
        assert a.backend == expected


def test_explicit_choice_ignores_env(monkeypatch):
    monkeypatch.setenv("KBROKER_APPENDER", "io_uring")
    with A.open_appender("pwritev") as a:
        assert a.backend == "pwritev"
