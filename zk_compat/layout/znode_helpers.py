"""The small steps every part of the layout takes: a persistent path made if missing (the paths every broker
creates at startup among them), children of a node that may be absent, and Kafka's base64 UUIDs.
"""
from __future__ import annotations

import base64
import random
import uuid

from zk_compat.store import (
    MetadataStore,
    NodeExistsError,
)
from zk_compat.znodes import (
    PERSISTENT_ZK_PATHS,
)


def ensure_path(store: MetadataStore, path: str) -> None:
    try:
        store.create(path, None, makepath=True)
    except NodeExistsError:
        pass


def ensure_persistent_paths(store: MetadataStore) -> None:
    """Create the persistent paths every broker creates at startup, if missing (null data)."""
    for path in PERSISTENT_ZK_PATHS:
        ensure_path(store, path)


def new_base64_uuid(rng: random.Random | None = None) -> str:
    """A random (version 4) UUID as 22 characters of URL-safe base64 without padding: Kafka's
    cluster id and topic id format. Never all-zero, never starting with '-' (which command-line
    tools would take for an option)."""
    while True:
        raw = uuid.UUID(int=rng.getrandbits(128), version=4).bytes if rng else uuid.uuid4().bytes
        text = base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")
        if not text.startswith("-") and any(raw):
            return text
