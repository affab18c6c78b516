"""One real broker process for the CLI tests, and a helper that runs the CLI as a subprocess.

``broker`` (session-wide) starts ``kbroker serve`` on a free 127.0.0.1 port with its log dir
under pytest's tmp dir and waits until it answers ApiVersions; teardown stops it with SIGTERM and
checks that it exited cleanly. Tests share it, so each one uses topic and group names of its own
(``unique``). ``kbroker(*args)`` runs ``python -m kbroker.cli *args`` and returns the
CompletedProcess (text stdout/stderr, returncode).
"""
from __future__ import annotations

import itertools
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

HOST = "127.0.0.1"
REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT = 30.0
CLI_TIMEOUT = 60.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


@dataclass
class Broker:
    host: str
    port: int
    log_dir: Path
    output: Path
    proc: subprocess.Popen

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def output_tail(self, lines: int = 40) -> str:
        text = self.output.read_text(errors="replace") if self.output.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


def _answers(host: str, port: int) -> bool:
    from kbroker.tools.client import ClientError, Connection
    try:
        Connection(host, port, timeout=2.0).close()
        return True
    except ClientError:
        return False


def _start(base: Path) -> Broker:
    port = free_port()
    log_dir = base / "data"
    output = base / "broker.out"
    cmd = [sys.executable, "-m", "kbroker.cli", "serve",
           "--override", f"listeners=PLAINTEXT://{HOST}:{port}",
           "--override", f"log.dirs={log_dir}",
           "--override", "group.initial.rebalance.delay.ms=0"]
    with open(output, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO,
                                env=dict(os.environ, PYTHONUNBUFFERED="1"))
    broker = Broker(HOST, port, log_dir, output, proc)
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the broker exited with {proc.returncode}:\n{broker.output_tail()}")
        if _answers(HOST, port):
            return broker
        time.sleep(0.1)
    _stop(broker)
    raise RuntimeError(f"the broker did not answer on {broker.bootstrap} within {START_TIMEOUT:g} s:\n"
                       f"{broker.output_tail()}")


def _stop(broker: Broker) -> int:
    if broker.proc.poll() is None:
        broker.proc.send_signal(signal.SIGTERM)
        try:
            broker.proc.wait(30)
        except subprocess.TimeoutExpired:
            broker.proc.kill()
            broker.proc.wait()
    return broker.proc.returncode


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory):
    failure = None
    for _ in range(3):  # the free port may be taken between picking and binding it
        try:
            b = _start(tmp_path_factory.mktemp("cli-broker"))
            break
        except RuntimeError as exc:
            failure = exc
    else:
        pytest.fail(f"cannot start a broker: {failure}")
    yield b
    code = _stop(b)
    assert code == 0, f"the broker exited with {code} after SIGTERM:\n{b.output_tail()}"


def run_cli(*args: str, timeout: float = CLI_TIMEOUT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kbroker.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.fixture
def kbroker():
    return run_cli


_names = itertools.count()


@pytest.fixture
def unique(request: pytest.FixtureRequest):
    """unique("t") -> "t-<test name>-<n>": names no other test on the shared broker uses."""
    stem = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60]

    def make(prefix: str) -> str:
        return f"{prefix}-{stem}-{next(_names)}"
    return make
