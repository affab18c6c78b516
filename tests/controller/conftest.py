"""The controller unit tests' store: the embedded metadata store with Kafka's persistent paths."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from zk_compat import layout
from zk_compat.embedded import EmbeddedServer
from zk_compat.store import MetadataStore


@pytest.fixture
def store() -> Iterator[MetadataStore]:
    server = EmbeddedServer(None)
    with server.connect() as session:
        layout.ensure_persistent_paths(session)
        yield session
    server.close()
