from __future__ import annotations

import pytest

from tests.zk_compat.clock import FakeClock
from zk_compat.embedded import EmbeddedServer


@pytest.fixture(params=["memory", "disk"])
def server(request, tmp_path):
    """Every semantics test runs against the in-memory server and the journaled one."""
    directory = tmp_path / "meta" if request.param == "disk" else None
    srv = EmbeddedServer(directory, clock_ms=FakeClock())
    yield srv
    srv.close()


@pytest.fixture
def store(server):
    with server.connect() as session:
        yield session
