"""The leader's ISR changes (Kafka's maybeShrinkIsr / maybeExpandIsr in ZooKeeper mode).

A change is a compare-and-set of the partition state znode against the zkVersion this broker last
saw, followed by an ``/isr_change_notification`` for the controller. Only when ZooKeeper took it
does the ISR in memory change, so the high watermark is never computed over an ISR that ZooKeeper
(and so the next leader election) does not have. A lost compare-and-set means someone else (the
controller) changed the state: the watch brings the new state, and the next check tries again.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

from kbroker.clock import monotonic_ms
from kbroker.log import TopicPartition
from kbroker.metadata.zk_view import RunBlocking
from kbroker.replication.partition import Partition
from zk_compat import layout
from zk_compat.store import BadVersionError, MetadataStore, NoNodeError, Stat
from zk_compat.znodes import PartitionState

log = logging.getLogger(__name__)


class IsrManager:
    def __init__(self, broker_id: int, max_lag_ms: int, partitions: Mapping[TopicPartition, Partition],
                 store: MetadataStore, run_blocking: RunBlocking,
                 on_change: Callable[[Partition], None]) -> None:
        self.broker_id = broker_id
        self.max_lag_ms = max_lag_ms
        self.partitions = partitions  # the replica manager's: the leaders among them are watched
        self.store = store
        self.run_blocking = run_blocking  # ZooKeeper writes go off the event loop
        self.on_change = on_change  # delayed produces and fetches look again
        self._task: asyncio.Task[None] | None = None
        self._writes: set[asyncio.Task[None]] = set()
        self.shrinks = self.expands = 0  # ISR changes ZooKeeper took (kafka_server_replicamanager_isr*_total)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._shrink_loop())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        for task in self._writes:
            task.cancel()

    async def _shrink_loop(self) -> None:
        """Kafka schedules the ISR expiration check every replica.lag.time.max.ms / 2."""
        period = max(self.max_lag_ms / 2, 10) / 1000
        while True:
            await asyncio.sleep(period)
            now = monotonic_ms()
            for partition in list(self.partitions.values()):
                if not partition.is_leader or partition.isr_change_pending or partition.log.offline:
                    continue  # (an offline replica is the controller's to move: Kafka's onlinePartitionsIterator)
                lagging = partition.lagging_isr_members(now, self.max_lag_ms)
                if lagging:
                    log.info("%s: shrinking ISR from %s: %s did not catch up within %d ms", partition.tp,
                             partition.isr, lagging, self.max_lag_ms)
                    self.propose(partition, [r for r in partition.isr if r not in lagging])

    def maybe_expand(self, partition: Partition, replica_id: int) -> None:
        if partition.isr_change_pending or not partition.may_join_isr(replica_id):
            return
        log.info("%s: expanding ISR from %s to add %d", partition.tp, partition.isr, replica_id)
        self.propose(partition, partition.isr + [replica_id])

    def propose(self, partition: Partition, isr: list[int]) -> None:
        partition.isr_change_pending = True
        task = asyncio.get_running_loop().create_task(self._write(partition, isr))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _write(self, partition: Partition, isr: list[int]) -> None:
        epoch, version = partition.leader_epoch, partition.zk_version
        state = PartitionState(leader=self.broker_id, leader_epoch=epoch, isr=list(isr),
                               controller_epoch=partition.controller_epoch)
        tp = partition.tp
        store = self.store

        def write() -> Stat:
            stat = layout.set_partition_state(store, tp.topic, tp.partition, state, version)
            layout.create_isr_change_notification(store, [(tp.topic, tp.partition)])
            return stat

        try:
            stat = await self.run_blocking(write)
        except (BadVersionError, NoNodeError):
            log.info("%s: the partition state changed under us (zkVersion %d); not changing the ISR to %s",
                     tp, version, isr)
            return
        except Exception as exc:
            log.warning("%s: could not write ISR %s: %s", tp, isr, exc)
            return
        finally:
            if partition.leader_epoch == epoch:
                partition.isr_change_pending = False
        if not partition.is_leader or partition.leader_epoch != epoch or partition.zk_version > stat.version:
            return
        if len(isr) < len(partition.isr):
            self.shrinks += 1
        else:
            self.expands += 1
        partition.isr = list(isr)
        partition.zk_version = stat.version
        log.info("%s: ISR is now %s (zkVersion %d)", tp, isr, stat.version)
        partition.maybe_advance_high_watermark()
        self.on_change(partition)
