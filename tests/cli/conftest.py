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
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

# the one broker-process harness; the CLI tests import free_port from here
from bench.harness.broker_process import (
    HOST,
    REPO,
    free_port,
    launch,
    python_serve,
    serve_argv,
    terminate,
    wait_serving,
)

START_TIMEOUT = 30.0
CLI_TIMEOUT = 60.0


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
    cmd = serve_argv(python_serve(), {"listeners": f"PLAINTEXT://{HOST}:{port}", "log.dirs": str(log_dir),
                                      "group.initial.rebalance.delay.ms": "0"})
    proc = launch(cmd, output, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    broker = Broker(HOST, port, log_dir, output, proc)
    outcome = wait_serving(proc, lambda: _answers(HOST, port), START_TIMEOUT, 0.1)
    if outcome == "serving":
        return broker
    if outcome == "exited":
        raise RuntimeError(f"the broker exited with {proc.returncode}:\n{broker.output_tail()}")
    _stop(broker)
    raise RuntimeError(f"the broker did not answer on {broker.bootstrap} within {START_TIMEOUT:g} s:\n"
                       f"{broker.output_tail()}")


def _stop(broker: Broker) -> int:
    try:
        return terminate(broker.proc, 30)
    except subprocess.TimeoutExpired:
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


def ok(result: subprocess.CompletedProcess) -> str:
    """The output of a command that succeeded, with nothing on stderr."""
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    assert result.stderr == ""
    return result.stdout


def failed(result: subprocess.CompletedProcess, code: int = 1) -> str:
    """The error line of a failed command (exit ``code``, no traceback): with code 1 (an error the tool reports)
    the only line on stderr and nothing on stdout; else the last line (argparse's error after the usage)."""
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    if code == 1:
        assert result.stdout == ""
        assert result.stderr.endswith("\n") and result.stderr.count("\n") == 1, result.stderr
    return result.stderr.rstrip("\n").splitlines()[-1]


_names = itertools.count()


@pytest.fixture
def unique(request: pytest.FixtureRequest):
    """unique("t") -> "t-<test name>-<n>": names no other test on the shared broker uses."""
    stem = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60]

    def make(prefix: str) -> str:
        return f"{prefix}-{stem}-{next(_names)}"
    return make
