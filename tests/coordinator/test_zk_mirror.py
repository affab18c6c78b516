"""The ZooKeeper offsets mirror follows deletions: a mirrored offset the coordinator dropped
(OffsetDelete, or the whole group gone) loses its /consumers node; a group that moved to another
coordinator keeps its nodes (the new coordinator's mirror owns them)."""
from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from kbroker.config.broker import load_config
from kbroker.coordinator.group.zk_offsets import ZkOffsetMirror
from zk_compat import layout
from zk_compat.embedded import EmbeddedServer

from .conftest import Env

T = TypeVar("T")


class StoreAccess:
    def __init__(self) -> None:
        self.store = EmbeddedServer(None, fsync=False).connect()
        self.config = load_config()

    async def run_blocking(self, fn: Callable[[], T]) -> T:
        return fn()


def mirrored(access: StoreAccess, group: str, partitions: int = 2) -> dict[int, int | None]:
    return {p: layout.get_consumer_offset(access.store, group, "t", p) for p in range(partitions)}


async def test_deleted_offsets_leave_zookeeper_too(env: Env):
    access = StoreAccess()
    mirror = ZkOffsetMirror(access, lambda: env.coordinator, interval_ms=1000, clock=lambda: 0.0)
    await env.coordinator.commit_offsets("s", "", -1, None, {("t", 0): (5, -1, ""), ("t", 1): (6, -1, "")})
    assert await mirror.poll_once() == 2
    assert mirrored(access, "s") == {0: 5, 1: 6}
    assert await env.coordinator.delete_offsets("s", [("t", 0)]) == (0, {("t", 0): 0})
    assert await mirror.poll_once() == 1
    assert mirrored(access, "s") == {0: None, 1: 6}
    assert await env.coordinator.delete_offsets("s", [("t", 1)]) == (0, {("t", 1): 0})
    assert env.coordinator.get_group("s") is None  # nothing left: the group went with its last offset
    assert await mirror.poll_once() == 1
    assert mirrored(access, "s") == {0: None, 1: None}
    assert await mirror.poll_once() == 0


async def test_a_group_that_moved_keeps_its_mirrored_offsets(env: Env):
    access = StoreAccess()
    mirror = ZkOffsetMirror(access, lambda: env.coordinator, interval_ms=1000, clock=lambda: 0.0)
    await env.coordinator.commit_offsets("m", "", -1, None, {("t", 0): (3, -1, "")})
    assert await mirror.poll_once() == 1
    env.coordinator.unload_partition(env.coordinator.partition_for("m"))
    assert await mirror.poll_once() == 0
    assert mirrored(access, "m", 1) == {0: 3}
