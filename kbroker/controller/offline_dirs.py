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
