"""ZooKeeper-era consumer offsets (``/consumers/<group>/offsets/<topic>/<partition>``: OffsetCommit/OffsetFetch v0).
"""
from __future__ import annotations

from zk_compat.store import (
    MetadataStore,
    NodeExistsError,
    NoNodeError,
    Stat,
)
from zk_compat.znodes import (
    ConsumerOffsetZNode,
)

# ZooKeeper-era consumer offsets (OffsetCommit/OffsetFetch v0)

def commit_consumer_offset(store: MetadataStore, group: str, topic: str, partition: int, offset: int) -> Stat:
    """OffsetCommit v0: an unconditional write (so mtime and version move on every commit, even
    with the same offset: Burrow watches for that), creating the node and parents if missing."""
    path = ConsumerOffsetZNode.path(group, topic, partition)
    data = ConsumerOffsetZNode.encode(offset)
    try:
        return store.set(path, data)
    except NoNodeError:
        try:
            store.create(path, data, makepath=True)
        except NodeExistsError:
            return store.set(path, data)
        _, stat = store.get(path)
        return stat


def get_consumer_offset(store: MetadataStore, group: str, topic: str, partition: int) -> int | None:
    path = ConsumerOffsetZNode.path(group, topic, partition)
    try:
        data, _ = store.get(path)
    except NoNodeError:
        return None
    return ConsumerOffsetZNode.decode(data, path)
