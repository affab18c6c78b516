"""Replicas on failed log dirs (KIP-112), as the controller knows them: Kafka's ``replicasOnOfflineDirs``
(apache/kafka ``core/src/main/scala/kafka/controller/ControllerContext.scala``).

A broker whose log dir fails writes ``/log_dir_event_notification/log_dir_event_<seq>``; the controller then sends
it LeaderAndIsr for every replica it holds, and the broker answers KAFKA_STORAGE_ERROR for those in the failed dir
(``KafkaController.processLeaderAndIsrResponseReceived``). Those replicas count as offline: never elected, taken
out of their ISR, listed in UpdateMetadata's ``offline_replicas``, until the broker registers again (a restart,
``onBrokerStartup``) or dies (``onBrokerFailure``), which forget what it had reported.

Written by the controller channel on the event loop, read by the controller on the cluster view's thread: one lock.
"""
from __future__ import annotations

import threading
from collections.abc import Iterable

TP = tuple[str, int]


class OfflineReplicas:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_broker: dict[int, frozenset[TP]] = {}

    def record(self, broker_id: int, offline: Iterable[TP], online: Iterable[TP]) -> frozenset[TP]:
        """One LeaderAndIsr answer of ``broker_id``: ``offline`` answered KAFKA_STORAGE_ERROR, ``online`` no error.
        Returns the replicas newly offline (the controller must move them)."""
        offline = frozenset(offline)
        with self._lock:
            before = self._by_broker.get(broker_id, frozenset())
            now = (before - frozenset(online)) | offline
            if now:
                self._by_broker[broker_id] = now
            else:
                self._by_broker.pop(broker_id, None)
        return now - before

    def forget(self, broker_id: int) -> None:
        """The broker registered again or left: its failed dirs are its own business again."""
        with self._lock:
            self._by_broker.pop(broker_id, None)

    def clear(self) -> None:
        """This broker stopped being controller: a new one asks every broker again."""
        with self._lock:
            self._by_broker.clear()

    def view(self) -> dict[int, frozenset[TP]]:
        """broker id -> its replicas on offline dirs, a copy."""
        with self._lock:
            return dict(self._by_broker)

    def is_offline(self, broker_id: int, tp: TP) -> bool:
        with self._lock:
            return tp in self._by_broker.get(broker_id, ())


class NewReplicas:
    """Replicas the controller just made (a new partition's, or added by a reassignment): Kafka's NewReplica state,
    whose first LeaderAndIsr says ``is_new``. A broker with an offline log dir creates a log only for such a replica;
    any other it cannot find may be on the failed dir, and an empty log there would lose what it held (Kafka's
    ``LogManager.getOrCreateLog``: "Can not create log ... because log directories ... are offline").

    Added by the controller on the cluster view's thread, taken by the channel on the event loop once a broker
    acknowledged the LeaderAndIsr that carried it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._replicas: set[tuple[str, int, int]] = set()

    def add(self, topic: str, index: int, brokers: Iterable[int]) -> None:
        with self._lock:
            self._replicas.update((topic, index, b) for b in brokers)

    def contains(self, topic: str, index: int, broker_id: int) -> bool:
        with self._lock:
            return (topic, index, broker_id) in self._replicas

    def told(self, broker_id: int, partitions: Iterable[TP]) -> None:
        """``broker_id`` acknowledged a LeaderAndIsr for these partitions: their replicas there are not new now."""
        with self._lock:
            self._replicas.difference_update((t, p, broker_id) for t, p in partitions)

    def clear(self) -> None:
        with self._lock:
            self._replicas.clear()
