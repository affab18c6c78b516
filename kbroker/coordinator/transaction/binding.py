"""Binds the transaction coordinator to this broker: the ``__transaction_state`` topic (created
at start on a single broker, on the first FindCoordinator for a transactional id in ZooKeeper
mode), loading its partitions as this broker comes to lead them, and sending the commit/abort
markers to the leaders of a transaction's partitions (WriteTxnMarkers, retried until each has
its marker; the local leader is written directly)."""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from kbroker import errors
from kbroker.clock import wall_ms
from kbroker.config.broker import BrokerConfig
from kbroker.coordinator.binding import InternalTopicBinding
from kbroker.coordinator.group.binding import GroupBinding
from kbroker.coordinator.transaction.coordinator import TransactionCoordinator
from kbroker.interbroker.client import BrokerConnection
from kbroker.metadata.zk_view import LiveBroker
from kbroker.replicas.replica_manager import MarkerTopic, ReplicaManager, TxnMarker
from kbroker.replication.partition import Partition
from kbroker.timers import WheelTimer
from kbroker.topics.admin import TopicAdmin
from kbroker.topics.internal import TRANSACTION_TOPIC, stored_batches, transaction_topic_configs

log = logging.getLogger(__name__)

WRITE_TXN_MARKERS_VERSION = 0
_RETRY_S = 0.2
# Marker answers after which the partition needs nothing more (it is gone) or the same leader is
# asked again; anything else re-resolves the leader.
_GONE = frozenset({errors.UnknownTopicOrPartitionError.code})
# A newer producer epoch or transaction coordinator wrote there: this coordinator is stale and stops
# sending this transaction's markers, and records no completion (Kafka's abortSending).
_FENCED = frozenset({errors.TransactionCoordinatorFencedError.code, errors.InvalidProducerEpochError.code})


class TransactionBinding(InternalTopicBinding):
    topic = TRANSACTION_TOPIC

    def __init__(self, config: BrokerConfig, replicas: ReplicaManager, topics: TopicAdmin, groups: GroupBinding,
                 next_producer_id: Callable[[], int], clustered: bool) -> None:
        super().__init__(config, replicas, topics, clustered)
        self.groups = groups
        self.next_producer_id = next_producer_id
        self.coordinator: TransactionCoordinator | None = None
        self._connections: dict[int, BrokerConnection] = {}
        self._stopped = False

    async def start(self) -> None:
        cfg = self.config
        partitions = self._partition_count(cfg.transaction_state_log_num_partitions)
        groups = self.groups.coordinator
        assert groups is not None, "the group coordinator starts first"
        self.timer = WheelTimer(wall_ms)  # transaction deadlines on a Cython timing wheel
        self.coordinator = TransactionCoordinator(
            partitions, self._append, self.next_producer_id, self._send_markers, groups.partition_for,
            cfg.transaction_max_timeout_ms, timer=self.timer)
        for partition in self._led_partitions(partitions):
            self._loaded(partition)

    async def stop(self) -> None:
        self._stopped = True
        if self.coordinator is not None:
            self.coordinator.shutdown()
            self.timer.wheel.close()
        for conn in self._connections.values():
            conn.close()

    def _running(self) -> bool:
        return self.coordinator is not None

    def _loaded(self, partition: Partition) -> None:
        assert self.coordinator is not None
        self.coordinator.load_partition(partition.tp.partition, partition.leader_epoch, stored_batches(partition))

    def _unloaded(self, index: int) -> None:
        assert self.coordinator is not None
        self.coordinator.unload_partition(index)

    def _topic_layout(self, replication_factor: int) -> tuple[int, dict[str, str]]:
        return (self.config.transaction_state_log_num_partitions,
                transaction_topic_configs(self.config, replication_factor))

    async def ensure_topic(self) -> None:
        """ZooKeeper mode: create the topic once enough brokers live for its replication factor."""
        await self._ensure_topic(self.config.transaction_state_log_replication_factor,
                                 "transaction.state.log.replication.factor")

    def coordinator_endpoint(self, transactional_id: str) -> LiveBroker | None:
        if self.coordinator is None:
            return None
        return self._endpoint(self.coordinator.partition_for(transactional_id))

    def _append(self, partition: int, batch: bytearray) -> int | Awaitable[int]:
        return self._append_to(partition, batch, self.config.request_timeout_ms)

    # -- markers ----------------------------------------------------------------------------

    async def _send_markers(self, producer_id: int, epoch: int, commit: bool, coordinator_epoch: int,
                            partitions: set[tuple[str, int]]) -> bool:
        """Write the markers, retried until each partition has its own; False when a partition fenced this
        coordinator (see _FENCED)."""
        left = set(partitions)
        while left and not self._stopped:
            by_leader: dict[int, list[tuple[str, int]]] = {}
            for topic, index in sorted(left):
                by_leader.setdefault(self._leader_of(topic, index), []).append((topic, index))
            for leader, tps in by_leader.items():
                if leader < 0:  # no leader now: wait for one, unless the topic is gone
                    left.difference_update(tp for tp in tps if tp[0] not in self.topics.topics)
                    continue
                marker: TxnMarker = {"producer_id": producer_id, "producer_epoch": epoch, "transaction_result": commit,
                          "coordinator_epoch": coordinator_epoch, "topics": _by_topic(tps)}
                try:
                    if leader == self.replicas.broker_id:
                        results = await self.replicas.write_markers([marker])
                    else:
                        results = await self._remote(leader, marker)
                except OSError as exc:
                    log.info("markers for producer %d to broker %d: %s; retrying", producer_id, leader, exc)
                    continue
                for (topic, index), code in results.items():
                    if code in _FENCED:
                        log.warning("markers for producer %d (coordinator epoch %d): %s-%d answered %s; this "
                                    "coordinator is stale and stops", producer_id, coordinator_epoch, topic, index,
                                    errors.for_code(code).__name__)
                        return False
                    if code == 0 or code in _GONE:
                        left.discard((topic, index))
            if left:
                await asyncio.sleep(_RETRY_S)
        return True

    def _leader_of(self, topic: str, index: int) -> int:
        return self.topics.partition_state(topic, index).leader

    async def _remote(self, leader: int, marker: TxnMarker) -> dict[tuple[str, int], int]:
        endpoint = self.topics.live_broker(leader)
        if endpoint is None:
            raise OSError(f"broker {leader} is not registered")
        conn = self._connections.get(leader)
        if conn is None or (conn.host, conn.port) != (endpoint.host, endpoint.port):
            if conn is not None:
                conn.close()
            conn = self._connections[leader] = BrokerConnection(
                endpoint.host, endpoint.port, f"txn-coordinator-{self.replicas.broker_id}",
                self.config.request_timeout_ms / 1000)
        response = await conn.request(27, WRITE_TXN_MARKERS_VERSION, {"markers": [marker]})
        return {(t.name, p.partition_index): p.error_code for m in response.markers for t in m.topics
                for p in t.partitions}


def _by_topic(tps: list[tuple[str, int]]) -> list[MarkerTopic]:
    out: dict[str, list[int]] = {}
    for topic, index in tps:
        out.setdefault(topic, []).append(index)
    return [{"name": t, "partition_indexes": ps} for t, ps in out.items()]
