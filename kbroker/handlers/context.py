"""What a request handler may use of the broker, as a typed Protocol: handlers depend on these parts,
never on the ``Broker`` that wires them (``kbroker.broker.Broker`` satisfies it)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

from kbroker.config.broker import BrokerConfig
from kbroker.config.dynamic import DynamicBrokerConfig
from kbroker.controller.controller import Controller
from kbroker.coordinator.group.binding import GroupBinding
from kbroker.coordinator.transaction.binding import TransactionBinding
from kbroker.handlers.fetch_sessions import FetchSessionCache
from kbroker.log import LogManager
from kbroker.metadata.cache import MetadataCache
from kbroker.metadata.zk_view import ClusterView
from kbroker.metrics import BrokerMetrics
from kbroker.replicas.replica_manager import ReplicaManager
from kbroker.security import Security
from kbroker.topics.admin import TopicAdmin
from zk_compat.store import MetadataStore

T = TypeVar("T")


class ZooKeeperMode(Protocol):
    """The parts only a broker of a ZooKeeper-mode cluster has."""
    controller: Controller          # this broker's controller role (active when it won the election)
    cluster: ClusterView            # the cluster as ZooKeeper says, from watches
    metadata: MetadataCache         # what the controller last told this broker (UpdateMetadata)


class BrokerContext(Protocol):
    broker_id: int
    cluster_id: str
    dynamic_config: DynamicBrokerConfig  # the configuration's layers (KIP-226): static, cluster default, per broker
    store: MetadataStore            # the embedded store, or ZooKeeper through kazoo
    log_manager: LogManager
    replicas: ReplicaManager
    fetch_sessions: FetchSessionCache
    metrics: BrokerMetrics | None   # the counters GET /metrics reads (None: metrics.enabled=false)

    # Read-only: the broker builds these once its metadata store is connected (Broker.start)
    @property
    def topics(self) -> TopicAdmin: ...

    @property
    def groups(self) -> GroupBinding: ...

    @property
    def transactions(self) -> TransactionBinding: ...

    @property
    def security(self) -> Security:
        """Authorizer (None: all allowed), SCRAM credentials, quotas."""
        ...

    @property
    def config(self) -> BrokerConfig:
        """The current config: server.properties under the dynamic layers (read it at use, never keep it)."""
        ...

    @property
    def zookeeper(self) -> ZooKeeperMode | None:
        """None on a single broker. Read-only here, so that the broker's own class for the parts fits
        (a Protocol's settable attribute would have to be of this very type)."""
        ...

    def next_producer_id(self) -> int: ...

    async def run_blocking(self, fn: Callable[[], T]) -> T:
        """Run a metadata-store call: off the event loop in ZooKeeper mode, directly on the embedded store."""
        ...


__all__ = ["BrokerContext", "ZooKeeperMode"]
