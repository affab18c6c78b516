"""The one harness for a broker subprocess on loopback: a free port, the ``kbroker serve`` command line, starting
it with its output in a file, waiting until it serves (or exits), and stopping it with SIGTERM.

The benchmarks' brokers (bench/harness/broker_load.py, bench/reliability/abuse.py, bench/reliability/chaos/cluster.py)
and the tests' (tests/integration/conftest.py ``BrokerProcess``, which tests/cluster, tests/security and tests/crash
build on, and tests/cli/conftest.py) start theirs through it. bench/ is a source-tree tool that tests may import; the
shipped packages never import it (an import contract in pyproject.toml checks that)."""
from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

from kazoo_bridge.local_server import free_port

__all__ = ["HOST", "REPO", "accepts", "free_port", "launch", "python_serve", "serve_argv", "terminate",
           "wait_serving"]

HOST = "127.0.0.1"
REPO = Path(__file__).resolve().parents[2]


def python_serve() -> list[str]:
    """``kbroker serve`` of this source tree, run by this interpreter."""
    return [sys.executable, "-m", "kbroker.cli", "serve"]


def serve_argv(launcher: Sequence[str], *settings: Mapping[str, str]) -> list[str]:
    """``launcher`` (a command ending in ``serve``) with one ``--override key=value`` per setting, in order (a key
    repeated in a later mapping is passed again, and the later one wins, as in ``kbroker serve``)."""
    argv = list(launcher)
    for mapping in settings:
        for key, value in mapping.items():
            argv += ["--override", f"{key}={value}"]
    return argv


def accepts(host: str, port: int) -> bool:
    """Whether a TCP connection to ``host:port`` opens (within half a second)."""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def launch(argv: Sequence[str], output: Path, *, env: Mapping[str, str] | None, append: bool = False,
           banner: str = "", cwd: Path | None = REPO, **popen: Any) -> subprocess.Popen[bytes]:
    """Start ``argv`` with stdout and stderr into ``output`` (appended to with ``append``, after ``banner``) and
    no stdin; ``popen`` passes on (``preexec_fn``, ``start_new_session``)."""
    with open(output, "ab" if append else "wb") as out:
        if banner:
            out.write(banner.encode())
            out.flush()
        return subprocess.Popen(list(argv), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=cwd, env=env, **popen)


def wait_serving(proc: subprocess.Popen[bytes], ready: Callable[[], bool], timeout: float,
                 interval: float) -> Literal["serving", "exited", "timeout"]:
    """Polls every ``interval`` s until ``ready()`` holds; "exited" as soon as the process is gone (its return
    code is ``proc.returncode``), "timeout" once ``timeout`` s passed with neither."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return "exited"
        if ready():
            return "serving"
        time.sleep(interval)
    return "timeout"


def terminate(proc: subprocess.Popen[bytes], timeout: float) -> int:
    """SIGTERM (unless it exited already) and its exit code; a process still running ``timeout`` s later is
    killed and reaped, and ``subprocess.TimeoutExpired`` raised."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise


def neighbouring_free_ports(host: str, count: int) -> int:
    """A port p on ``host`` with p .. p + count - 1 all free (host mode's process i listens on p + i)."""
    for _ in range(200):
        sockets: list[socket.socket] = []
        try:
            first = socket.socket()
            sockets.append(first)
            first.bind((host, 0))
            port: int = first.getsockname()[1]
            for i in range(1, count):
                s = socket.socket()
                sockets.append(s)
                s.bind((host, port + i))
            return port
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    raise RuntimeError(f"no {count} neighbouring free ports on {host}")


class Stoppable(Protocol):
    def stop(self) -> object: ...
    def kill(self) -> object: ...


def stop_or_kill(parts: Iterable[Stoppable]) -> None:
    """Each part stopped cleanly, or killed when its stop fails (a harness's teardown must not stop halfway)."""
    for part in parts:
        try:
            part.stop()
        except Exception:
            part.kill()


def output_since(path: Path, offset: int) -> str:
    """What a broker wrote to its output file from ``offset`` on ("" before the file exists)."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def output_size(path: Path) -> int:
    """How much a broker has written to its output file (0 before it exists)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0
