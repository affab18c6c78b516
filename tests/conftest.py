"""Shared fixtures. The compiled core is required: an ImportError here fails the whole run."""
from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from kazoo_bridge.local_server import ZooKeeperServer, ZooKeeperUnavailable
from kbroker._core import appender as _appender

# KBROKER_APPENDER forces one backend for every log dir of a broker (kbroker.log.appenders), and the storage tests
# then run on that one only (`make test-io-uring`)
_FORCED = os.environ.get("KBROKER_APPENDER", "").strip().lower()
BACKENDS = [_FORCED] if _FORCED in ("io_uring", "pwritev") else ["io_uring", "pwritev"]


@pytest.fixture(params=BACKENDS)
def appender(request: pytest.FixtureRequest):
    """Each storage test runs once per appender backend (the forced one only, under KBROKER_APPENDER)."""
    if request.param == "io_uring" and not _appender.io_uring_available():
        pytest.skip("io_uring cannot be set up on this kernel; the pwritev run covers the fallback")
    with _appender.open_appender(request.param) as app:
        assert app.backend == request.param
        yield app


@pytest.fixture(scope="session")
def zookeeper_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """One real ZooKeeper (Debian's, on a free loopback port) for the session; tests take a chroot each."""
    try:
        server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"))
    except ZooKeeperUnavailable as exc:
        pytest.fail(f"these tests need a real ZooKeeper: {exc}", pytrace=False)
    server.start()
    yield server
    server.stop()
