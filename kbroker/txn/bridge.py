"""Binds the transaction coordinator to this broker: the ``__transaction_state`` topic (created
at start on a single broker, on the first FindCoordinator for a transactional id in ZooKeeper
mode), loading its partitions as this broker comes to lead them, and sending the commit/abort
markers to the leaders of a transaction's partitions (WriteTxnMarkers, retried until each has
its marker; the local leader is written directly)."""
from __future__ import annotations

import asyncio
import logging

from kbroker import errors
from kbroker.coordinator.bridge import ensure_internal_topic, stored_batches
from kbroker.log import TopicPartition
from kbroker.replication.client import BrokerConnection
from kbroker.replication.delayed_produce import append_internal
from kbroker.timers import WheelTimer
from kbroker.txn.coordinator import TransactionCoordinator, wall_ms

log = logging.getLogger(__name__)

TRANSACTION_TOPIC = "__transaction_state"
WRITE_TXN_MARKERS_VERSION = 0
_RETRY_S = 0.2
# Marker answers after which the partition needs nothing more (it is gone) or the same leader is
# asked again; anything else re-resolves the leader.
_GONE = frozenset({errors.UnknownTopicOrPartitionError.code})
# A newer producer epoch or transaction coordinator wrote there: this coordinator is stale and stops
# sending this transaction's markers, and records no completion (Kafka's abortSending).
_FENCED = frozenset({errors.TransactionCoordinatorFencedError.code, errors.InvalidProducerEpochError.code})


class TransactionBridge:
    def __init__(self, broker) -> None:
        self.broker = broker
        self.coordinator: TransactionCoordinator | None = None
        self._connections: dict[int, BrokerConnection] = {}
        self._stopped = False

    async def start(self) -> None:
        broker = self.broker
        cfg = broker.config
        if TRANSACTION_TOPIC not in broker.topics and broker.cluster is None:
            self._create_topic(1)
        info = broker.topics.get(TRANSACTION_TOPIC)
        partitions = len(info.assignment) if info is not None else cfg.transaction_state_log_num_partitions
        groups = broker.coordinator.coordinator
        self.timer = WheelTimer(wall_ms)  # transaction deadlines on a Cython timing wheel
        self.coordinator = TransactionCoordinator(
            partitions, self._append, broker.next_producer_id, self._send_markers, groups.partition_for,
            cfg.transaction_max_timeout_ms, timer=self.timer)
        for p in range(partitions):
            partition = broker.partition(TopicPartition(TRANSACTION_TOPIC, p))
            if partition is not None:
                self.coordinator.load_partition(p, partition.leader_epoch, self._batches(p))

    async def stop(self) -> None:
        self._stopped = True
        if self.coordinator is not None:
            self.coordinator.shutdown()
            self.timer.wheel.close()
        for conn in self._connections.values():
            conn.close()

    def _create_topic(self, factor: int) -> None:
        cfg = self.broker.config
        self.broker.create_topic(TRANSACTION_TOPIC, cfg.transaction_state_log_num_partitions, factor, configs={
            "cleanup.policy": "compact", "compression.type": "uncompressed",
            "segment.bytes": str(cfg.transaction_state_log_segment_bytes),
            "min.insync.replicas": str(min(cfg.transaction_state_log_min_isr, factor))})

    def ensure_topic(self) -> None:
        """ZooKeeper mode: create the topic once enough brokers live for its replication factor."""
        ensure_internal_topic(self.broker, TRANSACTION_TOPIC,
                              self.broker.config.transaction_state_log_replication_factor,
                              "transaction.state.log.replication.factor", self._create_topic)

    def leadership_changed(self, partition: int, leader: bool, leader_epoch: int) -> None:
        if self.coordinator is None:
            return
        if leader:
            self.coordinator.load_partition(partition, leader_epoch, self._batches(partition))
        else:
            self.coordinator.unload_partition(partition)

    def coordinator_endpoint(self, transactional_id: str):
        if self.coordinator is None:
            return None
        index = self.coordinator.partition_for(transactional_id)
        if self.broker.cluster is None:
            return self.broker.endpoint if self.broker.partition(TopicPartition(TRANSACTION_TOPIC, index)) else None
        state = self.broker.metadata.state(TRANSACTION_TOPIC, index)
        return None if state is None else self.broker.cluster.snapshot.brokers.get(state.leader)

    def _batches(self, partition: int):
        return stored_batches(self.broker, TopicPartition(TRANSACTION_TOPIC, partition))

    def _append(self, partition: int, batch: bytearray):
        try:
            return append_internal(self.broker, TopicPartition(TRANSACTION_TOPIC, partition), batch,
                                   self.broker.config.request_timeout_ms)
        except errors.NotLeaderOrFollowerError:
            raise errors.NotCoordinatorError(f"{TRANSACTION_TOPIC}-{partition} is not led here") from None

    # -- markers ----------------------------------------------------------------------------

    async def _send_markers(self, producer_id: int, epoch: int, commit: bool, coordinator_epoch: int,
                            partitions: set[tuple[str, int]]) -> bool:
        """Write the markers, retried until each partition has its own; False when a partition fenced this
        coordinator (see _FENCED)."""
        from kbroker.handlers.txn import write_markers_here
        left = set(partitions)
        while left and not self._stopped:
            by_leader: dict[int, list[tuple[str, int]]] = {}
            for topic, index in sorted(left):
                by_leader.setdefault(self._leader_of(topic, index), []).append((topic, index))
            for leader, tps in by_leader.items():
                if leader < 0:  # no leader now: wait for one, unless the topic is gone
                    left.difference_update(tp for tp in tps if tp[0] not in self.broker.topics)
                    continue
                marker = {"producer_id": producer_id, "producer_epoch": epoch, "transaction_result": commit,
                          "coordinator_epoch": coordinator_epoch, "topics": _by_topic(tps)}
                try:
                    if leader == self.broker.broker_id:
                        results = await write_markers_here(self.broker, [marker])
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
        if self.broker.cluster is None:
            return self.broker.broker_id if self.broker.partitions.get(TopicPartition(topic, index)) else -1
        state = self.broker.metadata.state(topic, index)
        if state is None or state.leader not in self.broker.cluster.snapshot.brokers:
            return -1
        return state.leader

    async def _remote(self, leader: int, marker: dict) -> dict[tuple[str, int], int]:
        endpoint = self.broker.cluster.snapshot.brokers.get(leader)
        if endpoint is None:
            raise OSError(f"broker {leader} is not registered")
        conn = self._connections.get(leader)
        if conn is None or (conn.host, conn.port) != (endpoint.host, endpoint.port):
            if conn is not None:
                conn.close()
            conn = self._connections[leader] = BrokerConnection(
                endpoint.host, endpoint.port, f"txn-coordinator-{self.broker.broker_id}",
                self.broker.config.request_timeout_ms / 1000)
        response = await conn.request(27, WRITE_TXN_MARKERS_VERSION, {"markers": [marker]})
        return {(t.name, p.partition_index): p.error_code for m in response.markers for t in m.topics
                for p in t.partitions}


def _by_topic(tps: list[tuple[str, int]]) -> list[dict]:
    out: dict[str, list[int]] = {}
    for topic, index in tps:
        out.setdefault(topic, []).append(index)
    return [{"name": t, "partition_indexes": ps} for t, ps in out.items()]
