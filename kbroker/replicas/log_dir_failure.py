"""What the broker does when one of its log dirs fails (KIP-112), as Kafka 2.8's
``ReplicaManager.handleLogDirFailure`` (apache/kafka ``core/src/main/scala/kafka/server/ReplicaManager.scala``):
the partitions in that dir stop being fetched, the acks=all writes waiting on those it leads are answered (their
log is gone: KAFKA_STORAGE_ERROR), the coordinators let go of those it led, and, in ZooKeeper mode, one
``/log_dir_event_notification/log_dir_event_<seq>`` (``{"version":1,"broker":<id>,"event":1}``,
``KafkaZkClient.propagateLogDirEvent``) tells the controller, which asks this broker with LeaderAndIsr which
replicas are offline (``ReplicaManager.become_leader_or_follower`` answers KAFKA_STORAGE_ERROR for them) and moves
their leaderships. Metadata and DescribeLogDirs then show them offline.

A dir that fails while the log manager starts (before ZooKeeper is connected) is announced once replication is
enabled, as Kafka's failure channel queues it for the handler thread.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from kbroker.log import TopicPartition
from kbroker.replication.fetcher import ReplicaFetcherManager
from kbroker.replication.partition import Partition
from zk_compat import layout
from zk_compat.store import ConnectionLossError, MetadataStore, SessionExpiredError

log = logging.getLogger(__name__)

ANNOUNCE_ATTEMPTS = 10  # Kafka retries until connected; a broker that cannot reach ZooKeeper this long is gone
ANNOUNCE_BACKOFF_S = 1.0


class HostedReplicas(Protocol):
    """What this needs of the replica manager (which owns it: no import back)."""

    @property
    def broker_id(self) -> int: ...
    @property
    def partitions(self) -> Mapping[TopicPartition, Partition]: ...
    @property
    def fetchers(self) -> ReplicaFetcherManager | None: ...
    @property
    def leadership_listeners(self) -> Sequence[Callable[[Partition, bool], None]]: ...
    def on_append(self, partition: Partition) -> None: ...


class LogDirFailures:
    def __init__(self, replicas: HostedReplicas) -> None:
        self.replicas = replicas
        self._store: MetadataStore | None = None
        self._run_blocking: Callable[[Callable[[], Any]], Awaitable[Any]] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._unannounced = 0  # dirs that failed before ZooKeeper mode was enabled
        self._tasks: set[asyncio.Task[None]] = set()
        self.announced: list[str] = []  # the notification znodes written, for the log and tests

    def enable(self, store: MetadataStore, run_blocking: Callable[[Callable[[], Any]], Awaitable[Any]]) -> None:
        """ZooKeeper mode: failures from now on are announced, and those before it once."""
        self._store, self._run_blocking = store, run_blocking
        self._loop = asyncio.get_running_loop()
        for _ in range(self._unannounced):
            self._announce()
        self._unannounced = 0

    def dir_offline(self, directory: Path, partitions: list[TopicPartition]) -> None:
        """The log manager took ``directory`` offline with these partitions' logs (any thread)."""
        loop = self._loop
        if loop is not None and not _on_loop(loop):
            loop.call_soon_threadsafe(self._handle, directory, partitions)
        else:
            self._handle(directory, partitions)

    def _handle(self, directory: Path, partitions: list[TopicPartition]) -> None:
        rm = self.replicas
        stopped = []
        for tp in partitions:
            partition = rm.partitions.get(tp)
            if partition is None:
                continue
            if rm.fetchers is not None:
                rm.fetchers.unfollow(tp)
            if partition.is_leader:
                rm.on_append(partition)  # acks=all waiters see the offline log
                for listener in rm.leadership_listeners:  # coordinators let go (Kafka: at the StopReplica after)
                    listener(partition, False)
            stopped.append(tp)
        log.warning("broker %d stopped serving %d replicas in the failed log dir %s: %s", rm.broker_id, len(stopped),
                    directory, ", ".join(map(str, sorted(stopped))))
        if self._store is None:
            self._unannounced += 1
        else:
            self._announce()

    def _announce(self) -> None:
        task = asyncio.get_running_loop().create_task(self._write_notification())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _write_notification(self) -> None:
        store, run_blocking, broker_id = self._store, self._run_blocking, self.replicas.broker_id
        assert store is not None and run_blocking is not None
        for attempt in range(ANNOUNCE_ATTEMPTS):
            try:
                path = await run_blocking(lambda: layout.create_log_dir_event_notification(store, broker_id))
            except (ConnectionLossError, SessionExpiredError) as exc:
                log.warning("log dir event of broker %d not written yet (%s); retrying", broker_id, exc)
                await asyncio.sleep(ANNOUNCE_BACKOFF_S * (attempt + 1))
                continue
            self.announced.append(path)
            log.info("broker %d wrote %s: the controller moves the replicas of its failed log dir", broker_id, path)
            return
        log.error("broker %d could not write its log dir event to ZooKeeper; its offline replicas stay led here "
                  "until it restarts", broker_id)

    def stop(self) -> None:
        for task in self._tasks:
            task.cancel()


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False
