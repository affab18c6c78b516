"""Fixtures: the ``backend`` and ``store`` of the store contract (each test on every store), and
for ZooKeeper-only tests a chroot on the session's server (``zk_backend``) or a server of the
test's own (``private_zookeeper``)."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kazoo_bridge.local_server import ZooKeeperServer, ZooKeeperUnavailable
from tests.store_contract.backends import ZooKeeperBackend, backend, store  # noqa: F401  (fixtures)


@pytest.fixture
def zk_backend(zookeeper_server: ZooKeeperServer) -> Iterator[ZooKeeperBackend]:
    """Sessions on the shared server, under a chroot of this test's own."""
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
