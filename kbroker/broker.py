"""The broker: wiring only (tests/quality keeps it under 300 lines). It builds the parts, starts them in order,
stops them in reverse, and is the ``BrokerContext`` the request handlers see (``kbroker.handlers.context``).

    LogManager -> ReplicaManager (partitions, append with acks, fetch reads, roles, markers)
               -> TopicAdmin (SingleNodeTopics, or ZooKeeperTopics beside the controller)
               -> GroupBinding, TransactionBinding (group and transaction coordinators)
               -> NetworkServer per listener (security.connection_security builds its TLS and SASL)
                  -> Dispatcher (handlers.dispatcher: quotas, then the API's handler)

The listeners bind once the logs are recovered (KafkaServer.startup: LogManager.startup first) and accept only once
the broker can answer (``_listen``): until then a client's connect is refused and retried, not left unanswered.

Single-node mode (no ``zookeeper.connect``) keeps Kafka's ZooKeeper layout in the embedded store
under the first log dir; this broker is then the controller and the leader of every partition.
"""
from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from kbroker.clock import wall_ms
from kbroker.config.broker import BrokerConfig, parse_status_listener
from kbroker.config.dynamic import DynamicBrokerConfig
from kbroker.controller.channel import ControllerChannel
from kbroker.controller.controller import Controller
from kbroker.controller.zookeeper_mode import ZooKeeperParts
from kbroker.coordinator.group.binding import GroupBinding
from kbroker.coordinator.group.zk_offsets import ZkOffsetMirror
from kbroker.coordinator.transaction.binding import TransactionBinding
from kbroker.coordinator.transaction.producer_ids import ProducerIdAllocator
from kbroker.handlers import load_all
from kbroker.handlers.dispatcher import Dispatcher
from kbroker.handlers.fetch_sessions import FetchSessionCache
from kbroker.interbroker.client import use_inter_broker_security
from kbroker.lifecycle.controlled_shutdown import controlled_shutdown
from kbroker.lifecycle.housekeeping import housekeeping
from kbroker.lifecycle.listeners import bind_listeners
from kbroker.log import LogManager
from kbroker.log.log_manager import halt_without_log_dirs
from kbroker.metadata.cache import MetadataCache
from kbroker.metadata.zk_view import ClusterView, LiveBroker, Snapshot
from kbroker.metrics import BrokerMetrics
from kbroker.network.server import NetworkServer
from kbroker.replicas.replica_manager import ReplicaManager
from kbroker.replication.purgatory import Purgatory
from kbroker.security import Security
from kbroker.security.connection_security import inter_broker_client_security
from kbroker.security.listeners import Listeners, parse_listeners
from kbroker.topics.admin import TopicAdmin
from kbroker.topics.single_node import SingleNodeTopics
from kbroker.topics.zookeeper import ZooKeeperTopics
from zk_compat import layout
from zk_compat.embedded import EmbeddedServer
from zk_compat.znodes import BrokerInfo, EndPoint

if TYPE_CHECKING:
    from kbroker.status.endpoint import StatusServer

log = logging.getLogger(__name__)

T = TypeVar("T")


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.broker_id = config.broker_id if config.broker_id >= 0 else 0
        # KIP-226: server.properties under /config/brokers/<default> and /config/brokers/<id>; ``config`` is current
        self.dynamic_config = DynamicBrokerConfig(config, self.broker_id)
        self.cluster_id = ""
        self.fetch_sessions = FetchSessionCache()
        self.metrics: BrokerMetrics | None = BrokerMetrics() if config.metrics_enabled else None
        self.zookeeper: ZooKeeperParts | None = None
        self.status: StatusServer | None = None
        self.listeners: Listeners = parse_listeners(config)  # ConfigError: what Kafka would refuse
        self.servers: list[NetworkServer] = []  # one per listener
        self.server: NetworkServer | None = None  # the first
        self._store_server: EmbeddedServer | None = None
        self._tasks: list[asyncio.Future[None]] = []  # the offsets mirror, housekeeping
        self.log_manager = LogManager(config.log_dirs, config.log, cleaner_threads=config.log_cleaner_threads,
                                      last_stable_offset=lambda tp: self.replicas.first_unstable_offset(tp),
                                      on_all_dirs_offline=lambda: halt_without_log_dirs(self.log_manager.log_dirs),
                                      on_dir_offline=lambda d, tps: self.replicas.log_dir_failures.dir_offline(d, tps))
        self.dynamic_config.subscribe(self.log_manager.reconfigure)
        self.purgatory = Purgatory()
        self.replicas = ReplicaManager(self.broker_id, config, self.log_manager, self.purgatory,
                                       dynamic_config=self.dynamic_config, metrics=self.metrics)
        # built by start() (the store first, then each part once what it needs exists); stop() stops what was built
        self.store: Any = None
        self._security: Security | None = None
        self._topics: TopicAdmin | None = None
        self._groups: GroupBinding | None = None
        self._transactions: TransactionBinding | None = None
        self.next_producer_id: ProducerIdAllocator
        self.endpoint: LiveBroker
        self.dispatcher: Dispatcher

    @property
    def config(self) -> BrokerConfig:
        return self.dynamic_config.current

    # the parts start() builds, as handlers see them (BrokerContext): asked for only once built
    @property
    def security(self) -> Security:
        return _built(self._security, "security")

    @property
    def topics(self) -> TopicAdmin:
        return _built(self._topics, "topics")

    @property
    def groups(self) -> GroupBinding:
        return _built(self._groups, "groups")

    @property
    def transactions(self) -> TransactionBinding:
        return _built(self._transactions, "transactions")

    # -- start and stop ----------------------------------------------------------------------

    async def start(self) -> None:
        if self.config.zookeeper_connect:
            return await self._start_zookeeper_mode()
        cfg = self.config
        store_dir = self.log_manager.log_dirs[0]
        store_dir.mkdir(parents=True, exist_ok=True)
        self._store_server = EmbeddedServer.in_log_dir(store_dir)
        self.store = self._store_server.connect()
        self._init_store()
        self.security.start()
        topics = self._topics = SingleNodeTopics(cfg, self.store, self.replicas, lambda: self.endpoint)
        topics.load()
        self.log_manager.startup()
        topics.host_all()
        host, port = self._bind_listeners()
        layout.register_broker(self.store, self._registration(host, port))
        await self._start_services()
        self._listen()
        log.info("kbroker %d started: cluster %s, %d topics, listening on %s:%d", self.broker_id,
                 self.cluster_id, len(topics.topics), host, port)

    async def _start_zookeeper_mode(self) -> None:
        """Cluster mode: KazooStore, registration through SessionManager, controller election,
        and the cluster view (brokers, controller, topics, partition states) from watches."""
        import kazoo_bridge
        cfg = self.config
        loop = asyncio.get_running_loop()
        self.store = await loop.run_in_executor(None, lambda: kazoo_bridge.connect(
            cfg.zookeeper_connect, cfg.zookeeper_session_timeout_ms, cfg.zookeeper_connection_timeout_ms))
        await loop.run_in_executor(None, self._init_store)
        await loop.run_in_executor(None, self.security.start)
        self.log_manager.startup()
        host, port = self._bind_listeners()
        controller = Controller(self.store, self.broker_id, self.config.log.unclean_leader_election_enable)
        use_inter_broker_security(inter_broker_client_security(self.config, self.listeners))
        cluster = ClusterView(self.store, loop, self._on_cluster_change, self.listeners.inter_broker,
                              wants_states=lambda controller_id: controller_id in (None, self.broker_id))
        metadata = MetadataCache()
        self._topics = topics = ZooKeeperTopics(cfg, self.store, self.replicas, cluster, metadata)
        self.replicas.enable_replication(self.store, cluster.run_blocking, topics.exists)
        session = kazoo_bridge.SessionManager(
            self.store, self._registration(host, port), loop=loop, on_resign=controller.resign,
            on_reelect=cluster.trigger, on_reconnect=cluster.trigger)
        self.zookeeper = ZooKeeperParts(controller, cluster, metadata,
                                        ControllerChannel(self.broker_id, cfg.request_timeout_ms,
                                                          controller.offline_replicas, cluster.trigger,
                                                          controller.new_replicas), session)
        self.dynamic_config.subscribe(self.zookeeper.follow_unclean_default)
        await session.start_async()
        await cluster.start()
        self.replicas.start()
        await self._start_services()
        self._listen()  # registered (after the previous session's registration expired), the cluster read
        log.info("kbroker %d started in ZooKeeper mode: cluster %s, controller %s, %d live brokers, %d topics, "
                 "listening on %s:%d", self.broker_id, self.cluster_id, self.topics.controller_id(),
                 len(self.topics.live_brokers()), len(self.topics.topics), host, port)

    def _init_store(self) -> None:
        layout.ensure_persistent_paths(self.store)
        self.cluster_id = layout.get_or_create_cluster_id(self.store)
        self.next_producer_id = ProducerIdAllocator(self.store, self.broker_id)
        self._security = Security(self.config, self.store)
        self._security.entity_configs.subscribe_brokers(self.dynamic_config.apply_entity)

    def _registration(self, host: str, port: int) -> BrokerInfo:
        """Every advertised endpoint and the listener map, as Kafka writes /brokers/ids/<id>."""
        endpoints = [EndPoint(name, h, p, protocol) for name, h, p, protocol in self.endpoint.endpoints]
        return BrokerInfo.from_endpoints(self.broker_id, endpoints, timestamp_ms=wall_ms(),
                                         rack=self.config.broker_rack or None)

    def _bind_listeners(self) -> tuple[str, int]:
        """The listeners bound, not yet accepting (``lifecycle.listeners``); returns the registered address."""
        self.dispatcher = Dispatcher(self, load_all(), self.security.quotas)
        self.endpoint = bind_listeners(self.config, self.broker_id, self.listeners, self.security, self.dispatcher,
                                       self.metrics, self.dynamic_config, self.servers)
        self.server = self.servers[0]
        return self.endpoint.host, self.endpoint.port

    def _listen(self) -> None:
        for server in self.servers:
            server.listen()

    async def _start_services(self) -> None:
        """The coordinators, the optional ZooKeeper offsets mirror and status endpoint, housekeeping."""
        cfg = self.config
        clustered = self.zookeeper is not None
        self._groups = GroupBinding(cfg, self.replicas, self.topics, clustered)
        await self._groups.start()
        self._transactions = TransactionBinding(cfg, self.replicas, self.topics, self.groups, self.next_producer_id,
                                                clustered)
        await self._transactions.start()
        if cfg.offsets_zookeeper_mirror_enable:
            mirror = ZkOffsetMirror(self, lambda: self.groups.coordinator, cfg.offsets_zookeeper_mirror_interval_ms)
            self._tasks.append(asyncio.ensure_future(mirror.run()))
        found = parse_status_listener(cfg.status_listener)
        if found is not None:
            from kbroker.status.endpoint import StatusServer  # aiohttp's import costs 0.2 s: only when it is on

            self.status = StatusServer(self, *found)
            await self.status.start()
        rebalance = self._rebalance_leaders if clustered else None
        self._tasks.append(asyncio.ensure_future(
            housekeeping(cfg, self.log_manager, self.groups, self.transactions, rebalance)))

    async def _on_cluster_change(self, snap: Snapshot) -> None:
        zk = self.zookeeper
        assert zk is not None and isinstance(self.topics, ZooKeeperTopics)
        self.topics.apply_snapshot(snap)
        await zk.on_snapshot(snap)

    async def _rebalance_leaders(self) -> None:
        """auto.leader.rebalance.enable, on the active controller only."""
        assert self.zookeeper is not None
        await self.zookeeper.rebalance_leaders(self.config.leader_imbalance_per_broker_percentage)

    async def stop(self) -> None:
        """Graceful shutdown: hand leaderships over (ZooKeeper mode), stop serving, flush,
        checkpoint, leave the clean-shutdown marker."""
        zk = self.zookeeper
        if self._topics is not None:
            self._topics.begin_shutdown()
        if zk is not None and self.config.controlled_shutdown_enable:
            await controlled_shutdown(self.config, self.broker_id,
                                      lambda: self.topics.live_broker(self.topics.controller_id()))
        for task in self._tasks:
            task.cancel()
        if self.status is not None:
            await self.status.stop()
        for server in self.servers:
            await server.stop()
        if zk is not None:
            zk.cluster.stop()
            zk.channel.stop()
        self.replicas.stop()
        if zk is not None:
            zk.session.stop()
        if self._transactions is not None:
            await self._transactions.stop()
        if self._groups is not None:
            await self._groups.stop()
        self.purgatory.close()
        if self._security is not None:
            self._security.stop()
        self.replicas.write_snapshots()
        self.log_manager.shutdown()
        if self.store is not None:
            self.store.close()
        if self._store_server is not None:
            self._store_server.close()
        log.info("kbroker %d stopped cleanly", self.broker_id)

    # -- what handlers see besides the parts (BrokerContext) ------------------------------------

    async def run_blocking(self, fn: Callable[[], T]) -> T:
        if self.zookeeper is not None:
            return await self.zookeeper.cluster.run_blocking(fn)
        return fn()


async def serve(config: BrokerConfig) -> None:
    """Run until SIGTERM/SIGINT, then shut down cleanly."""
    broker = Broker(config)
    await broker.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"kbroker {broker.broker_id} serving on {broker.endpoint.host}:{broker.endpoint.port}", flush=True)
    await stop.wait()
    await broker.stop()


def _built(part: T | None, name: str) -> T:
    if part is None:
        raise RuntimeError(f"the broker's {name} is built by Broker.start(), which has not got that far")
    return part
