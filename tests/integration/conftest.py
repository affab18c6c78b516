"""Real broker processes for the integration tests.

``broker`` starts ``kbroker serve`` on a free loopback port with its log dir under the test's tmp
dir, waits until it accepts connections, and yields a ``BrokerProcess``: unpack it as
``host, port, dirs = broker`` or use ``broker.bootstrap`` and ``broker.restart()`` (SIGTERM, wait
for a clean exit, start again on the same port and dirs). Teardown stops it with SIGTERM and
asserts it exited 0; the broker's log is printed when a test or the shutdown fails.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

# the one broker-process harness (bench/harness/broker_process.py); tests import REPO and free_port from here too
from bench.harness.broker_process import (  # noqa: F401
    HOST,
    REPO,
    accepts,
    free_port,
    launch,
    python_serve,
    serve_argv,
    terminate,
    wait_serving,
)

START_TIMEOUT = 30.0
STOP_TIMEOUT = 30.0


class BrokerProcess:
    def __init__(self, base: Path, overrides: dict[str, str] | None = None) -> None:
        self.host = HOST
        self.port = free_port()
        self.dirs = base / "logs"
        self.log_path = base / "broker.log"
        self.overrides = dict(overrides or {})
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    # ``host, port, dirs = broker``
    def __iter__(self):
        return iter((self.host, self.port, self.dirs))

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def command(self) -> list[str]:
        settings = {
            "listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "log.dirs": str(self.dirs),
            "group.initial.rebalance.delay.ms": "0",
            **self.overrides,
        }
        return serve_argv(python_serve(), settings)

    def start(self) -> None:
        assert self.proc is None, "already running"
        self.starts += 1
        self._log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        command = self.command()
        self.proc = launch(command, self.log_path, env=dict(os.environ, PYTHONUNBUFFERED="1"), append=True,
                           banner=f"===== start #{self.starts}: {' '.join(command)}\n")

        def serving() -> bool:
            return b"serving on" in self.log_path.read_bytes()[self._log_start:] and accepts(self.host, self.port)
        outcome = wait_serving(self.proc, serving, START_TIMEOUT, 0.05)
        if outcome == "serving":
            return
        if outcome == "exited":
            rc = self.proc.returncode
            self.proc = None
            raise AssertionError(f"broker exited with {rc} while starting\n{self.log()}")
        self.kill()
        raise AssertionError(f"broker did not accept connections within {START_TIMEOUT}s\n{self.log()}")

    def stop(self, timeout: float = STOP_TIMEOUT) -> int:
        """SIGTERM and wait; returns the exit code (the process is killed if it hangs)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return 0
        try:
            return terminate(proc, timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"broker did not exit within {timeout}s of SIGTERM\n{self.log()}") from None

    def stop_cleanly(self) -> None:
        rc = self.stop()
        assert rc == 0, f"broker exited with {rc} after SIGTERM\n{self.log()}"

    def restart(self) -> None:
        self.stop_cleanly()
        self.start()

    def kill(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            proc.kill()
            proc.wait()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self) -> str:
        try:
            return self.log_path.read_bytes().decode(errors="replace")
        except OSError:
            return "(no broker log)"


LOG_TAIL = 30000


def pytest_collection_modifyitems(items):
    # kafka-python 3.0.12 loads its schemas with a deprecated importlib.resources call
    for item in items:
        if "tests/integration/" in str(item.fspath):
            item.add_marker(pytest.mark.filterwarnings("ignore::DeprecationWarning:kafka.protocol.schemas.load_json"))
            item.add_marker(pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test gets the log of every broker it used as a report section."""
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for name in ("broker", "module_broker"):
            proc = item.funcargs.get(name) if hasattr(item, "funcargs") else None
            if isinstance(proc, BrokerProcess):
                report.sections.append((f"broker log ({proc.log_path})", proc.log()[-LOG_TAIL:]))
        for proc in getattr(item, "_brokers", ()):
            report.sections.append((f"broker log ({proc.log_path})", proc.log()[-LOG_TAIL:]))


def broker_errors(text: str) -> list[str]:
    """ERROR lines and tracebacks of a broker log: whatever a client sends, the broker answers it
    or closes the connection on purpose; an ERROR means a handler or the network layer failed."""
    return [line for line in text.splitlines() if "] ERROR " in line or line.startswith("Traceback")]


def _make_broker(base: Path, overrides: dict[str, str] | None = None):
    yield from run_broker(BrokerProcess(base, overrides))


def run_broker(proc: BrokerProcess):
    """Start ``proc``, yield it, stop it with SIGTERM: it must still run then, exit 0 and have logged no ERROR or
    traceback (the log's tail goes into the failure)."""
    proc.start()
    try:
        yield proc
    finally:
        try:
            assert proc.running, f"the broker died\n{proc.log()[-LOG_TAIL:]}"
            proc.stop_cleanly()
        finally:
            proc.kill()
        found = broker_errors(proc.log())
        assert not found, f"the broker logged errors: {found[:5]}\n{proc.log()[-LOG_TAIL:]}"


@pytest.fixture
def broker(tmp_path):
    """A fresh broker for one test."""
    yield from _make_broker(tmp_path)


@pytest.fixture(scope="module")
def module_broker(tmp_path_factory):
    """One broker shared by the tests of a module (each uses topics of its own)."""
    yield from _make_broker(tmp_path_factory.mktemp("broker"))


@pytest.fixture
def broker_factory(request, tmp_path):
    """Start a broker with extra ``--override`` settings: ``broker_factory({"key": "value"})``."""
    made = []

    def make(overrides: dict[str, str] | None = None) -> BrokerProcess:
        base = tmp_path / f"b{len(made)}"
        base.mkdir(parents=True, exist_ok=True)
        gen = _make_broker(base, overrides)
        proc = next(gen)
        made.append(gen)
        request.node._brokers = getattr(request.node, "_brokers", []) + [proc]
        return proc

    yield make
    for gen in made:
        try:
            next(gen)
        except StopIteration:
            pass
