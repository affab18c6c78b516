"""ZooKeeper-stored consumer offsets: ``/consumers/<group>/offsets/<topic>/<partition>``, the
offset as bare decimal text.

OffsetCommit v0 and OffsetFetch v0 use them, as Kafka 0.8.2+ does (v1+ use __consumer_offsets):
``commit_v0`` and ``fetch_v0``. With ``zookeeper.connect`` the store calls run on the cluster
view's thread (``ClusterView.run_blocking``) so the event loop never waits on ZooKeeper; the
embedded store (single broker) is called directly.

``ZkOffsetMirror`` optionally copies offsets committed to __consumer_offsets (groups this broker
coordinates) into the same paths, so ZooKeeper-era monitors (KafkaOffsetMonitor, Burrow's
kafka_zk) see modern groups. It polls the coordinator every ``interval_ms``, writes only offsets
that changed since its last write, and each group at most once per interval. An offset it wrote
that the coordinator no longer has (OffsetDelete, DeleteGroups, expiry) has its node removed, but
only while this broker still coordinates the group (a group that moved is the new coordinator's).
Off by default (broker keys ``offsets.zookeeper.mirror.enable`` and
``offsets.zookeeper.mirror.interval.ms``).

Kafka keeps no such copy, and its coordinator does not know groups whose offsets live only in
ZooKeeper (OffsetCommit v0): OffsetDelete answers GROUP_ID_NOT_FOUND for them, here as there.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Protocol, TypeVar

from kbroker import errors
from kbroker.config.broker import BrokerConfig
from kbroker.coordinator.group.coordinator import GroupCoordinator
from kbroker.log import TopicPartition
from kbroker.replication.partition import error_code_of
from zk_compat import layout
from zk_compat.store import MetadataStore, NoNodeError
from zk_compat.znodes import ConsumerOffsetZNode

log = logging.getLogger(__name__)

T = TypeVar("T")
OFFSET_METADATA_TOO_LARGE = 12
DEFAULT_METADATA_MAX_BYTES = 4096


class StoreAccess(Protocol):
    """What these functions need of the broker: its metadata store, and a way to call it that keeps
    the event loop free (off the loop for ZooKeeper, directly for the embedded store)."""
    store: MetadataStore

    @property
    def config(self) -> BrokerConfig: ...

    async def run_blocking(self, fn: Callable[[], T]) -> T: ...


async def commit_v0(ctx: StoreAccess, group: str, offsets: Mapping[TopicPartition, tuple[int, str | None]]
                    ) -> dict[TopicPartition, int]:
    """OffsetCommit v0: each (offset, metadata) written to ZooKeeper (the metadata is checked
    against offset.metadata.max.bytes, then dropped, as Kafka does). A code per partition."""
    max_metadata = getattr(ctx.config, "offset_metadata_max_bytes", DEFAULT_METADATA_MAX_BYTES)
    codes: dict[TopicPartition, int] = {}
    todo: dict[TopicPartition, int] = {}
    for tp, (offset, metadata) in offsets.items():
        if not group:
            codes[tp] = errors.InvalidGroupIdError.code
        elif metadata is not None and len(metadata) > max_metadata:
            codes[tp] = OFFSET_METADATA_TOO_LARGE
        else:
            todo[tp] = offset
    if todo:
        store = ctx.store

        def write() -> dict[TopicPartition, int]:
            out = {}
            for (topic, partition), offset in todo.items():
                try:
                    layout.commit_consumer_offset(store, group, topic, partition, offset)
                    out[TopicPartition(topic, partition)] = 0
                except Exception as exc:  # a store failure costs this partition its commit
                    log.warning("OffsetCommit v0 of %s %s-%d to ZooKeeper failed: %s", group, topic, partition, exc)
                    out[TopicPartition(topic, partition)] = error_code_of(exc)
            return out

        codes.update(await ctx.run_blocking(write))
    return {tp: codes[tp] for tp in offsets}


async def fetch_v0(ctx: StoreAccess, group: str, partitions: list[TopicPartition],
                   known: Callable[[str, int], bool]) -> dict[TopicPartition, tuple[int, int]]:
    """OffsetFetch v0: (offset, error code) per partition from ZooKeeper. An unknown partition or
    one without an offset node is (-1, UNKNOWN_TOPIC_OR_PARTITION), as Kafka answers."""
    unknown = (-1, errors.UnknownTopicOrPartitionError.code)
    store = ctx.store
    wanted = [tp for tp in partitions if known(*tp)]

    def read() -> dict[TopicPartition, tuple[int, int]]:
        out = {}
        for topic, partition in wanted:
            try:
                offset = layout.get_consumer_offset(store, group, topic, partition)
                out[TopicPartition(topic, partition)] = unknown if offset is None else (offset, 0)
            except Exception as exc:
                out[TopicPartition(topic, partition)] = (-1, error_code_of(exc))
        return out

    found = await ctx.run_blocking(read) if wanted and group else {}
    return {tp: found.get(tp, unknown) for tp in partitions}


class ZkOffsetMirror:
    """Copies committed offsets of the groups this broker coordinates into ZooKeeper.

    ``poll_once`` is one pass; ``run`` loops it every ``interval_ms`` until cancelled."""

    def __init__(self, ctx: StoreAccess, groups: Callable[[], GroupCoordinator | None], interval_ms: int = 10000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ctx = ctx
        self.groups = groups  # the group coordinator, once it runs
        self.interval = max(interval_ms, 1) / 1000
        self.clock = clock
        self._written: dict[tuple[str, str, int], int] = {}   # (group, topic, partition) -> offset
        self._last_write: dict[str, float] = {}                # group -> clock of its last write

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.poll_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.warning("mirroring committed offsets to ZooKeeper failed", exc_info=True)

    def _changes(self) -> tuple[dict[str, dict[TopicPartition, int]], list[tuple[str, str, int]]]:
        """(offsets to write per group, mirrored offsets to remove)."""
        coordinator = self.groups()
        if coordinator is None:
            return {}, []
        code, groups = coordinator.list_groups()
        if code:
            return {}, []
        now = self.clock()
        out: dict[str, dict[TopicPartition, int]] = {}
        current: dict[str, set[TopicPartition]] = {}
        for overview in groups:
            group = overview.group_id
            try:
                found = coordinator.fetch_offsets(group, None)
            except errors.KafkaError:
                continue  # moved or loading: the next pass, or the new coordinator, writes it
            current[group] = {tp for tp, entry in found.items() if entry[3] == 0 and entry[0] >= 0}
            last = self._last_write.get(group)
            if last is not None and now - last < self.interval:
                continue  # rate limit: one write per group per interval
            changed = {tp: entry[0] for tp, entry in found.items()
                       if entry[3] == 0 and entry[0] >= 0 and self._written.get((group, *tp)) != entry[0]}
            if changed:
                out[group] = changed
        gone = [key for key in self._written
                if TopicPartition(key[1], key[2]) not in current.get(key[0], ())
                and (key[0] in current or coordinator.is_active(coordinator.partition_for(key[0])))]
        return out, gone

    async def poll_once(self) -> int:
        """Write every offset that changed since the last write of its group and remove the
        nodes of mirrored offsets the coordinator dropped; returns how many nodes changed."""
        changes, gone = self._changes()
        if not changes and not gone:
            return 0
        store = self.ctx.store

        def write() -> tuple[list[tuple[str, str, int, int]], list[tuple[str, str, int]]]:
            done, removed = [], []
            for group, offsets in changes.items():
                for (topic, partition), offset in offsets.items():
                    try:
                        layout.commit_consumer_offset(store, group, topic, partition, offset)
                        done.append((group, topic, partition, offset))
                    except Exception as exc:
                        log.warning("mirroring %s %s-%d to ZooKeeper failed: %s", group, topic, partition, exc)
            for group, topic, partition in gone:
                try:
                    store.delete(ConsumerOffsetZNode.path(group, topic, partition))
                except NoNodeError:
                    pass
                except Exception as exc:
                    log.warning("removing the mirrored offset of %s %s-%d failed: %s", group, topic, partition, exc)
                    continue
                removed.append((group, topic, partition))
            return done, removed

        done, removed = await self.ctx.run_blocking(write)
        now = self.clock()
        for group, topic, partition, offset in done:
            self._written[(group, topic, partition)] = offset
            self._last_write[group] = now
        for key in removed:
            self._written.pop(key, None)
        return len(done) + len(removed)
