"""Host mode's supervisor: ``kbroker serve`` with ``broker.processes`` > 1 runs the plan's brokers as child
processes and keeps them running (issue 24).

Each child is an ordinary ``kbroker serve <its rendered server.properties>``, pinned to its cores with
``sched_setaffinity`` before it runs a line of Python (so every thread it starts inherits the set), its output
relayed line by line prefixed ``[broker <id>]``. A separate interpreter per broker rather than a fork of this one:
the supervisor stays a small single-threaded loop with no broker state, and a child starts from a clean
interpreter exactly as a broker started by hand does.

- A child that dies is started again after a backoff (1 s, doubling up to 30 s). Its old ZooKeeper registration
  may outlive it by up to ``zookeeper.session.timeout.ms``: the new process waits for ``/brokers/ids/<id>`` to be
  gone before it registers (kazoo_bridge.session), as a broker restarted by hand does.
- Crash loop: a broker that dies 5 times within 60 s makes the supervisor stop every broker and exit 1 (an
  init system's own restart policy then decides). A child that exits 2 (its configuration is refused) is not
  restarted: every broker is stopped and the supervisor exits 2.
- SIGTERM or SIGINT stops the children one at a time, the last first, each with SIGTERM, which runs Kafka's
  controlled shutdown: a broker hands its leaderships to brokers that keep running, never to a sibling about to
  stop (stopped all at once, each would also lose its controller midway and retry after
  ``controlled.shutdown.retry.backoff.ms``). A second signal sends SIGTERM to every child left at once. The
  supervisor exits 0 once all exited 0 (1 otherwise, or if one still runs 120 s after its SIGTERM and is killed).
  Children run in process groups of their own, so a terminal's Ctrl-C reaches only the supervisor, which stops
  them in that order; a child whose supervisor dies gets SIGTERM from the kernel (PR_SET_PDEATHSIG).
"""
from __future__ import annotations

import ctypes
import logging
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import BinaryIO

from kbroker.host.plan import HostPlan, format_cpulist

log = logging.getLogger(__name__)

CONFIG_REFUSED = 2  # ``kbroker serve``'s exit status for a configuration it refuses
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


@dataclass(frozen=True)
class RestartPolicy:
    first_backoff_s: float = 1.0
    max_backoff_s: float = 30.0
    crash_loop_deaths: int = 5  # this many deaths of one broker ...
    crash_loop_window_s: float = 60.0  # ... within this window stop the host
    stop_timeout_s: float = 120.0  # per broker: controlled shutdown may retry (controlled.shutdown.max.retries)


def serve_command() -> list[str]:
    """``kbroker serve`` of this installation, run by this interpreter."""
    return [sys.executable, "-m", "kbroker.cli", "serve"]


class _Child:
    """One broker process of the plan: its current process, if any, and its history of deaths."""

    def __init__(self, index: int, broker_id: int, properties: Path, cpus: tuple[int, ...]) -> None:
        self.index = index
        self.broker_id = broker_id
        self.properties = properties
        self.cpus = cpus
        self.proc: subprocess.Popen[bytes] | None = None
        self.partial = b""  # output after its last newline
        self.deaths: deque[float] = deque()
        self.start_at: float | None = 0.0  # when to start it next (None: not to be started)
        self.prefix = f"[broker {broker_id}] ".encode()


class Supervisor:
    """Runs ``plan``'s brokers until SIGTERM/SIGINT or a crash loop; ``run()`` returns the exit status."""

    def __init__(self, plan: HostPlan, *, command: Sequence[str] | None = None, out: BinaryIO | None = None,
                 policy: RestartPolicy = RestartPolicy(), clock: Callable[[], float] = time.monotonic) -> None:
        self._plan = plan
        self._command = list(command) if command is not None else serve_command()
        self._out = out if out is not None else sys.stderr.buffer
        self._policy = policy
        self._clock = clock
        self._children: list[_Child] = []
        self._selector = selectors.DefaultSelector()
        self._signals: list[int] = []
        self._signals_seen = 0
        self._stopping = False
        self._stop_current: _Child | None = None
        self._stop_sent_at = 0.0
        self._exit_status = 0

    def run(self) -> int:
        runtime = Path(tempfile.mkdtemp(prefix="kbroker-host-"))
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        previous_wakeup = signal.set_wakeup_fd(wake_w)
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        self._selector.register(wake_r, selectors.EVENT_READ, None)
        try:
            for process in self._plan.processes:
                path = runtime / f"broker-{process.broker_id}.properties"
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # it may hold passwords
                with os.fdopen(fd, "w") as f:
                    f.write(self._plan.render(process.index))
                self._children.append(_Child(process.index, process.broker_id, path, process.cpus))
            return self._loop(wake_r)
        finally:
            for child in self._children:  # only after an error in the loop itself
                if child.proc is not None and child.proc.poll() is None:
                    child.proc.kill()
                    child.proc.wait()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            signal.set_wakeup_fd(previous_wakeup)
            self._selector.close()
            os.close(wake_r)
            os.close(wake_w)
            shutil.rmtree(runtime, ignore_errors=True)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals.append(signum)

    def _loop(self, wake_r: int) -> int:
        while True:
            now = self._clock()
            if len(self._signals) > self._signals_seen:
                self._signals_seen = len(self._signals)
                name = signal.Signals(self._signals[-1]).name
                if not self._stopping:
                    log.info("%s: stopping the brokers one at a time, the last first (controlled shutdown)", name)
                    self._stop_all(0)
                else:
                    log.warning("%s again: SIGTERM to every broker still running", name)
                    for child in self._children:
                        if child.proc is not None and child.proc.poll() is None:
                            child.proc.send_signal(signal.SIGTERM)
            for child in self._children:
                if child.proc is None and child.start_at is not None and child.start_at <= now:
                    self._start(child)
            for key, _ in self._selector.select(self._next_wait(now)):
                if key.data is None:
                    _drain_wakeup(wake_r)
                else:
                    self._relay(key.data)
            for child in self._children:
                if child.proc is not None and child.proc.poll() is not None:
                    self._exited(child)
            if self._stopping:
                if all(child.proc is None for child in self._children):
                    return self._exit_status
                self._stop_next()

    def _next_wait(self, now: float) -> float:
        waits = [c.start_at - now for c in self._children if c.proc is None and c.start_at is not None]
        return max(0.0, min([0.5, *waits]))

    def _start(self, child: _Child) -> None:
        child.start_at = None
        child.partial = b""
        argv = [*self._command, str(child.properties)]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        child.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, env=env, preexec_fn=_pin(child.cpus),
                                      process_group=0)  # a terminal's Ctrl-C reaches the supervisor only
        assert child.proc.stdout is not None
        os.set_blocking(child.proc.stdout.fileno(), False)
        self._selector.register(child.proc.stdout, selectors.EVENT_READ, child)
        log.info("broker %d (process %d) started: pid %d, cpus %s", child.broker_id, child.index, child.proc.pid,
                 format_cpulist(child.cpus))

    def _relay(self, child: _Child) -> bool:
        """Copy what the child wrote, whole lines each prefixed by its broker id; False once nothing is left to
        read for now (or at end of file)."""
        assert child.proc is not None and child.proc.stdout is not None
        try:
            data = os.read(child.proc.stdout.fileno(), 65536)
        except BlockingIOError:
            return False
        if not data:
            self._forget_output(child)
            return False
        lines = (child.partial + data).split(b"\n")
        child.partial = lines.pop()
        self._write(child, lines)
        return True

    def _forget_output(self, child: _Child) -> None:
        assert child.proc is not None and child.proc.stdout is not None
        if child.proc.stdout in {key.fileobj for key in self._selector.get_map().values()}:
            self._selector.unregister(child.proc.stdout)

    def _write(self, child: _Child, lines: list[bytes]) -> None:
        if lines:
            self._out.write(b"".join(child.prefix + line + b"\n" for line in lines))
            self._out.flush()

    def _exited(self, child: _Child) -> None:
        assert child.proc is not None and child.proc.stdout is not None
        while self._relay(child):  # the rest of its output
            pass
        self._forget_output(child)
        if child.partial:
            self._write(child, [child.partial])
        child.proc.stdout.close()
        code = child.proc.returncode
        child.proc = None
        if self._stopping:
            log.info("broker %d exited (%s)", child.broker_id, _describe_exit(code))
            if code != 0:
                self._exit_status = self._exit_status or 1
            return
        now = self._clock()
        if code == CONFIG_REFUSED:
            log.error("broker %d refused its configuration (exit 2): stopping every broker", child.broker_id)
            self._stop_all(CONFIG_REFUSED)
            return
        child.deaths.append(now)
        while child.deaths and now - child.deaths[0] > self._policy.crash_loop_window_s:
            child.deaths.popleft()
        if len(child.deaths) >= self._policy.crash_loop_deaths:
            log.error("broker %d died %d times within %.0f s (last: %s): crash loop, stopping every broker",
                      child.broker_id, len(child.deaths), self._policy.crash_loop_window_s, _describe_exit(code))
            self._stop_all(1)
            return
        backoff = min(self._policy.max_backoff_s, self._policy.first_backoff_s * 2 ** (len(child.deaths) - 1))
        child.start_at = now + backoff
        log.warning("broker %d died (%s): starting it again in %.0f s", child.broker_id, _describe_exit(code),
                    backoff)

    def _stop_all(self, status: int) -> None:
        self._stopping = True
        self._exit_status = status
        for child in self._children:
            child.start_at = None
        self._stop_next()

    def _stop_next(self) -> None:
        """SIGTERM to the last running child once the one before has exited; kill one past its timeout."""
        now = self._clock()
        current = self._stop_current
        if current is not None and current.proc is not None:
            if now - self._stop_sent_at > self._policy.stop_timeout_s and current.proc.poll() is None:
                log.error("broker %d did not stop within %.0f s of SIGTERM: killing it", current.broker_id,
                          self._policy.stop_timeout_s)
                current.proc.kill()
                self._exit_status = self._exit_status or 1
                self._stop_sent_at = now  # reaped on the next turn
            return
        running = [child for child in reversed(self._children) if child.proc is not None]
        if running:
            self._stop_current, self._stop_sent_at = running[0], now
            assert running[0].proc is not None
            running[0].proc.send_signal(signal.SIGTERM)


def _describe_exit(code: int) -> str:
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exit status {code}"


def _drain_wakeup(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


def _pin(cpus: tuple[int, ...]) -> Callable[[], None]:
    """What the child runs between fork and exec: its core set, and SIGTERM should the supervisor die. (The
    supervisor has no other thread, so running Python there is safe.)"""
    libc = ctypes.CDLL(None, use_errno=True)

    def setup() -> None:
        os.sched_setaffinity(0, cpus)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    return setup
