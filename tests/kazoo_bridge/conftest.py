"""Fixtures: one real ZooKeeper per test session (kazoo's harness does the same), a chroot per
test, and the ``backend`` fixture that runs each behavioural test against the embedded store
and against ZooKeeper through kazoo_bridge."""
from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kazoo_bridge.store import KazooStore, connect
from kazoo_bridge.local_server import ZooKeeperServer, ZooKeeperUnavailable
from zk_compat.embedded import EmbeddedServer, EmbeddedStore
from zk_compat.store import MetadataStore, NoNodeError, SessionState

# Session timeouts are short so that nothing waits long, and long enough that a loaded CI
# machine does not expire sessions by accident.
SESSION_TIMEOUT_MS = 6000
CONNECTION_TIMEOUT_MS = 5000


class EmbeddedBackend:
    name = "embedded"

    def __init__(self) -> None:
        self.server = EmbeddedServer(None, fsync=False)

    def connect(self, **_: object) -> EmbeddedStore:
        return self.server.connect()

    def close(self) -> None:
        self.server.close()


class ZooKeeperBackend:
    """Sessions on the shared server, all under one chroot made for this test."""

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


@pytest.fixture(params=["embedded", "zookeeper"])
def backend(request: pytest.FixtureRequest) -> Iterator[EmbeddedBackend | ZooKeeperBackend]:
    if request.param == "embedded":
        chosen: EmbeddedBackend | ZooKeeperBackend = EmbeddedBackend()
    else:
        chosen = ZooKeeperBackend(request.getfixturevalue("zookeeper_server"))
    yield chosen
    chosen.close()


@pytest.fixture
def store(backend: EmbeddedBackend | ZooKeeperBackend) -> MetadataStore:
    return backend.connect()


@pytest.fixture
def zk_backend(zookeeper_server: ZooKeeperServer) -> Iterator[ZooKeeperBackend]:
    """For ZooKeeper-only tests on the shared server."""
    chosen = ZooKeeperBackend(zookeeper_server)
    yield chosen
    chosen.close()


@pytest.fixture
def private_zookeeper(tmp_path: Path) -> Iterator[ZooKeeperServer]:
    """A server of this test's own, for tests that stop or kill it."""
    try:
        server = ZooKeeperServer(tmp_path / "zookeeper")
    except ZooKeeperUnavailable as exc:
        pytest.fail(f"the kazoo_bridge tests need a real ZooKeeper: {exc}", pytrace=False)
    server.start()
    yield server
    server.stop()


def wait_until(condition: Callable[[], object], timeout: float = 10.0, message: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {message}")
        time.sleep(0.01)


def assert_expired_then_connected(states: list[SessionState]) -> None:
    """An expiry as each store reports it: the embedded store says LOST, CONNECTED; a real
    client first loses the connection (SUSPENDED) and learns of the expiry on reconnecting."""
    assert states[-2:] == [SessionState.LOST, SessionState.CONNECTED], states
    assert set(states[:-2]) <= {SessionState.SUSPENDED}, states
