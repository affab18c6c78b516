"""The stores a contract test runs on, and the fixtures that hand them out.

``backend`` runs a test once per store: the embedded store in memory (what unit tests use),
the embedded store journaled to a directory (what a broker runs), and a real ZooKeeper through
kazoo_bridge (one server per test session, the one of ``tests/conftest.py``, with a chroot per
test, as kazoo's own harness does). ``store`` is a session on it. A conftest that wants them
imports them from here.
"""
from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kazoo_bridge.local_server import ZooKeeperServer
from kazoo_bridge.store import KazooStore, connect
from tests.zk_compat.clock import FakeClock
from zk_compat.embedded import EmbeddedServer, EmbeddedStore
from zk_compat.store import MetadataStore, NoNodeError, SessionState, WatchedEvent

# Session timeouts are short so that nothing waits long, and long enough that a loaded CI
# machine does not expire sessions by accident.
SESSION_TIMEOUT_MS = 6000
CONNECTION_TIMEOUT_MS = 5000

# a real ZooKeeper: the slow tier (tests/conftest.py)
BACKENDS = ["embedded", "embedded-journal", pytest.param("zookeeper", marks=pytest.mark.slow)]


class EmbeddedBackend:
    """Sessions on one embedded server, in memory or journaled under ``directory``; its clock
    moves on by a millisecond at every read, so each write has a time of its own."""

    def __init__(self, name: str, directory: Path | None = None) -> None:
        self.name = name
        self.server = EmbeddedServer(directory, clock_ms=FakeClock())

    def connect(self, **_: object) -> EmbeddedStore:
        return self.server.connect()

    def close(self) -> None:
        self.server.close()

    @staticmethod
    def assert_expired_then_connected(states: list[SessionState]) -> None:
        """The embedded store reports an expiry as exactly that: LOST, then CONNECTED."""
        assert states == [SessionState.LOST, SessionState.CONNECTED], states


class ZooKeeperBackend:
    """Sessions on a real server, all under one chroot made for this test."""

    name = "zookeeper"

    def __init__(self, zookeeper: ZooKeeperServer, hosts: str | None = None) -> None:
        self.zookeeper = zookeeper
        self.hosts = hosts or zookeeper.hosts
        self.chroot = f"/kbroker-tests-{uuid.uuid4().hex}"
        self.sessions: list[KazooStore] = []

    def connect(self, *, session_timeout_ms: int = SESSION_TIMEOUT_MS,
                connection_timeout_ms: int = CONNECTION_TIMEOUT_MS, hosts: str | None = None) -> KazooStore:
        store = connect((hosts or self.hosts) + self.chroot, session_timeout_ms, connection_timeout_ms)
        self.sessions.append(store)
        return store

    def close(self) -> None:
        for store in self.sessions:
            store.close(timeout_s=5)
        if self.zookeeper.running:
            with connect(self.zookeeper.hosts, SESSION_TIMEOUT_MS, CONNECTION_TIMEOUT_MS) as root:
                try:
                    root.delete(self.chroot, recursive=True)
                except NoNodeError:
                    pass

    @staticmethod
    def assert_expired_then_connected(states: list[SessionState]) -> None:
        """A real client first loses the connection (SUSPENDED, maybe more than once) and learns
        of the expiry on reconnecting: LOST, then CONNECTED with the new session."""
        assert states[-2:] == [SessionState.LOST, SessionState.CONNECTED], states
        assert set(states[:-2]) <= {SessionState.SUSPENDED}, states


Backend = EmbeddedBackend | ZooKeeperBackend


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    chosen: Backend
    if request.param == "embedded":
        chosen = EmbeddedBackend(request.param)
    elif request.param == "embedded-journal":
        chosen = EmbeddedBackend(request.param, tmp_path / "metadata")
    else:
        chosen = ZooKeeperBackend(request.getfixturevalue("zookeeper_server"))
    yield chosen
    chosen.close()


@pytest.fixture
def store(backend: Backend) -> MetadataStore:
    return backend.connect()


class Recorder:
    """A watcher that keeps every event it is called with."""

    def __init__(self) -> None:
        self.events: list[WatchedEvent] = []

    def __call__(self, event: WatchedEvent) -> None:
        self.events.append(event)


def wait_until(condition: Callable[[], object], timeout: float = 10.0, message: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {message}")
        time.sleep(0.01)


class CountingStore:
    """A store that counts its calls by method name (each one round trip to ZooKeeper)."""

    def __init__(self, store: MetadataStore) -> None:
        self._store = store
        self.calls: dict[str, int] = {}
        self.many_read = 0  # paths read by get_many

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if not callable(attr):
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] = self.calls.get(name, 0) + 1
            if name == "get_many":
                self.many_read += len(args[0] if args else kwargs["paths"])
            return attr(*args, **kwargs)
        return counted

    def reads(self) -> int:
        """Nodes read: each get, exists and get_children, and each path of a get_many (one pipelined round)."""
        return sum(self.calls.get(name, 0) for name in ("get", "exists", "get_children")) + self.many_read
