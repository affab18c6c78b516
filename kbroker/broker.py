"""The broker: wires config, logs, metadata store, partitions, purgatory, coordinator and network.

Single-node mode (no ``zookeeper.connect``) keeps Kafka's ZooKeeper layout in the embedded store
under the first log dir; this broker is then the controller and the leader of every partition.
"""
from __future__ import annotations

import asyncio
import base64
import logging
import random
import signal
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from kbroker import errors
from kbroker.cluster import ClusterView, LiveBroker, Snapshot
from kbroker.config import BrokerConfig
from kbroker.coordinator.bridge import CoordinatorBridge
from kbroker.status import StatusServer, parse_listener
from kbroker.txn.bridge import TransactionBridge
from kbroker.fetch_sessions import FetchSessionCache
from kbroker.handlers import load_all
from kbroker.log import LogManager, TopicPartition
from kbroker.log.config import ConfigError
from kbroker.log.log_manager import HOSTING_CHUNK
from kbroker.log.names import validate_topic_name
from kbroker.metadata_cache import MetadataCache
from kbroker.network.server import NetworkServer
from kbroker.partition import Partition
from kbroker.purgatory import Purgatory
from zk_compat import layout
from zk_compat.embedded import EmbeddedServer
from zk_compat.store import BadVersionError
from zk_compat.znodes import BrokerInfo, EndPoint, PartitionState

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_TOPIC = "__transaction_state"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_TOPIC})


@dataclass
class TopicInfo:
    name: str
    assignment: dict[int, list[int]]
    configs: dict[str, str] = field(default_factory=dict)
    topic_id: uuid.UUID = uuid.UUID(int=0)  # Kafka's topic id (stored base64url in /brokers/topics/<t>)

    @property
    def internal(self) -> bool:
        return self.name in INTERNAL_TOPICS


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.broker_id = config.broker_id if config.broker_id >= 0 else 0
        self.topics: dict[str, TopicInfo] = {}
        self.partitions: dict[TopicPartition, Partition] = {}
        self.fetch_sessions = FetchSessionCache()
        self.cluster_id = ""
        self.log_manager: LogManager | None = None
        self.store: Any = None
        self.server: NetworkServer | None = None
        self.purgatory: Purgatory | None = None
        self.coordinator: CoordinatorBridge | None = None
        self.transactions: TransactionBridge | None = None
        self.status: StatusServer | None = None
        self._tasks: list[asyncio.Task] = []
        self._next_producer_id = 0
        self.cluster: ClusterView | None = None  # ZooKeeper mode only
        self.controller: Any = None
        self.replication: Any = None  # kbroker.replication.manager.Replication, ZooKeeper mode only
        self.controller_channel: Any = None  # kbroker.controller.channel.ControllerChannel, idem
        self.metadata = MetadataCache()  # what the controller last told us (UpdateMetadata)
        self.session: Any = None
        self._pending_topics: set[str] = set()  # created here, not yet seen in a snapshot
        self._stopping = False

    # -- start and stop ----------------------------------------------------------------------

    async def start(self) -> None:
        if self.config.zookeeper_connect:
            return await self._start_zookeeper_mode()
        cfg = self.config
        self.log_manager = LogManager(cfg.log_dirs, cfg.log, last_stable_offset=self._first_unstable_offset)
        store_dir = self.log_manager.log_dirs[0]
        store_dir.mkdir(parents=True, exist_ok=True)
        self._store_server = EmbeddedServer.in_log_dir(store_dir)
        self.store = self._store_server.connect()
        layout.ensure_persistent_paths(self.store)
        self.cluster_id = layout.get_or_create_cluster_id(self.store)
        self._load_topics()
        for name, info in self.topics.items():
            self.log_manager.topic_overrides[name] = info.configs
        self.log_manager.startup()
        for name, info in self.topics.items():
            for index in info.assignment:
                self._host_partition(TopicPartition(name, index))
        self.purgatory = Purgatory()
        self._producer_ids = iter(())
        host, port = await self._start_server()
        layout.register_broker(self.store, BrokerInfo.from_endpoints(
            self.broker_id, [EndPoint("PLAINTEXT", host, port, "PLAINTEXT")],
            timestamp_ms=int(time.time() * 1000), rack=cfg.broker_rack or None))
        # Nothing below yields to the loop, so no request is served before the coordinator is ready.
        await self._start_services()
        log.info("kbroker %d started: cluster %s, %d topics, listening on %s:%d", self.broker_id,
                 self.cluster_id, len(self.topics), host, port)

    async def _start_zookeeper_mode(self) -> None:
        """Cluster mode: KazooStore, registration through SessionManager, controller election,
        and the cluster view (brokers, controller, topics, partition states) from watches."""
        import kazoo_bridge
        from kbroker.controller import Controller
        from kbroker.controller.channel import ControllerChannel
        from kbroker.replication.manager import Replication
        cfg = self.config
        loop = asyncio.get_running_loop()
        self.log_manager = LogManager(cfg.log_dirs, cfg.log, last_stable_offset=self._first_unstable_offset)
        self.store = await loop.run_in_executor(None, lambda: kazoo_bridge.connect(
            cfg.zookeeper_connect, cfg.zookeeper_session_timeout_ms, cfg.zookeeper_connection_timeout_ms))
        await loop.run_in_executor(None, self._init_zookeeper_paths)
        self.log_manager.startup()
        self.purgatory = Purgatory()
        self._producer_ids = iter(())
        host, port = await self._start_server()
        self.controller = Controller(self.store, self.broker_id, cfg.log.unclean_leader_election_enable)
        self.replication = Replication(self)
        self.controller_channel = ControllerChannel(self)
        self.cluster = ClusterView(self.store, loop, self._on_cluster_change)
        self.cluster.wants_states = lambda controller_id: controller_id in (None, self.broker_id)
        info = BrokerInfo.from_endpoints(self.broker_id, [EndPoint("PLAINTEXT", host, port, "PLAINTEXT")],
                                         timestamp_ms=int(time.time() * 1000), rack=cfg.broker_rack or None)
        self.session = kazoo_bridge.SessionManager(
            self.store, info, loop=loop, on_resign=self.controller.resign,
            on_reelect=self.cluster.trigger, on_reconnect=self.cluster.trigger)
        await self.session.start_async()
        await self.cluster.start()
        self.replication.start()
        await self._start_services()
        log.info("kbroker %d started in ZooKeeper mode: cluster %s, controller %s, %d live brokers, %d topics, "
                 "listening on %s:%d", self.broker_id, self.cluster_id, self.controller_id(),
                 len(self.live_brokers()), len(self.topics), host, port)

    async def _start_server(self) -> tuple[str, int]:
        """Listen, and work out the advertised endpoint (the bound port when 0 was asked)."""
        cfg = self.config
        listener = cfg.listeners[0]
        self.server = NetworkServer(listener.host, listener.port, self.dispatch,
                                    max_request_bytes=cfg.socket_request_max_bytes,
                                    send_buffer_bytes=cfg.socket_send_buffer_bytes,
                                    receive_buffer_bytes=cfg.socket_receive_buffer_bytes,
                                    idle_ms=cfg.connections_max_idle_ms)
        await self.server.start()
        advertised = cfg.advertised_listeners[0]
        host = advertised.host if advertised.host not in ("0.0.0.0", "") else "127.0.0.1"
        port = self.server.port if advertised.port == 0 else advertised.port
        self.endpoint = LiveBroker(self.broker_id, host, port, cfg.broker_rack or None)
        return host, port

    async def _start_services(self) -> None:
        """The coordinators, the optional ZooKeeper offsets mirror and status endpoint, housekeeping."""
        self.coordinator = CoordinatorBridge(self)
        await self.coordinator.start()
        self.transactions = TransactionBridge(self)
        await self.transactions.start()
        await self._start_zk_offset_mirror()
        await self._start_status()
        self._tasks.append(asyncio.ensure_future(self._housekeeping()))

    def _init_zookeeper_paths(self) -> None:
        layout.ensure_persistent_paths(self.store)
        self.cluster_id = layout.get_or_create_cluster_id(self.store)

    async def _on_cluster_change(self, snap: Snapshot) -> None:
        assert self.cluster is not None and self.controller is not None
        self._apply_snapshot(snap)
        # the controller's writes come back through the watches as the next snapshot
        await self.cluster.run_blocking(lambda: self.controller.on_snapshot(snap))
        if self.controller.active:
            self.controller_channel.sync(snap, self.controller.epoch)
        else:
            self.controller_channel.stop()

    def become_leader_or_follower(self, topic: str, p, leader_endpoint) -> None:
        """One partition of a LeaderAndIsr request: host it (creating its log) and take the role."""
        assert self.log_manager is not None and self.replication is not None
        tp = TopicPartition(topic, p.partition_index)
        if self.broker_id not in p.replicas:
            raise errors.UnknownTopicOrPartitionError(f"{tp} is not assigned to broker {self.broker_id}")
        partition = self.partitions.get(tp)
        if partition is None:
            plog = self.log_manager.get_or_create_log(tp)
            partition = self.partitions[tp] = Partition(tp, plog, self.broker_id, p.leader_epoch, single_replica=False)
            log.info("hosting %s (leader %d, epoch %d)", tp, p.leader, p.leader_epoch)
        leader = None
        if leader_endpoint is not None:
            leader = LiveBroker(leader_endpoint.broker_id, leader_endpoint.host_name, leader_endpoint.port, None)
        state = PartitionState(leader=p.leader, leader_epoch=p.leader_epoch, isr=list(p.isr),
                               controller_epoch=p.controller_epoch)
        self.replication.apply(partition, state, p.zk_version, list(p.replicas), leader)

    def stop_replica(self, topic: str, index: int, delete: bool) -> None:
        """StopReplica: no longer a replica (reassigned away, or the topic is deleted)."""
        assert self.log_manager is not None and self.replication is not None
        tp = TopicPartition(topic, index)
        partition = self.partitions.pop(tp, None)
        if partition is not None:
            self.replication.forget(partition)
            if partition.is_leader:
                self.on_append(partition)  # waiting produces learn the partition is gone
        if delete:
            self.log_manager.delete_log(tp)
            log.info("%s is no longer a replica here: its log is deleted", tp)

    def _apply_snapshot(self, snap: Snapshot) -> None:
        """Topics with their assignments and configs. Which partitions this broker hosts, and as
        leader or follower, the controller says (LeaderAndIsr, ``become_leader_or_follower``)."""
        assert self.log_manager is not None
        for name in list(self.topics):
            if name not in snap.assignments and name not in self._pending_topics:
                info = self.topics.pop(name)
                self.log_manager.topic_overrides.pop(name, None)
                for index in info.assignment:
                    tp = TopicPartition(name, index)
                    gone = self.partitions.pop(tp, None)
                    if gone is not None:
                        self.replication.forget(gone)
                    self.log_manager.delete_log(tp)  # deleted in ZooKeeper: the controller removed it
                log.info("topic %s is gone from ZooKeeper: its local logs are deleted", name)
        self._pending_topics.intersection_update(set(self.topics) - set(snap.assignments))
        for name, assignment in snap.assignments.items():
            configs = snap.configs.get(name, {})
            known = self.topics.get(name)
            if known is not None and known.configs != configs:
                self._apply_topic_configs(name, assignment, configs)
            self.topics[name] = TopicInfo(name, {p: list(r) for p, r in assignment.items()}, dict(configs),
                                          _topic_uuid(snap.topic_ids.get(name)))
            self.log_manager.topic_overrides[name] = self.topics[name].configs

    def _apply_topic_configs(self, name: str, assignment: dict[int, list[int]], configs: dict[str, str]) -> None:
        """A topic's configs changed in ZooKeeper (/config/changes): the hosted logs take them."""
        try:
            effective = self.config.log.with_overrides(configs)
        except ConfigError as exc:
            log.warning("topic %s: new configs refused (%s); keeping the old ones", name, exc)
            return
        for index in assignment:
            partition = self.partitions.get(TopicPartition(name, index))
            if partition is not None:
                partition.log.config = effective
        log.info("topic %s now runs with configs %s", name, configs)

    async def stop(self) -> None:
        """Graceful shutdown: hand leaderships over (ZooKeeper mode), stop serving, flush,
        checkpoint, leave the clean-shutdown marker."""
        self._stopping = True
        if self.cluster is not None and self.config.controlled_shutdown_enable:
            await self._controlled_shutdown()
        for task in self._tasks:
            task.cancel()
        if self.status is not None:
            await self.status.stop()
        if self.server is not None:
            await self.server.stop()
        if self.cluster is not None:
            self.cluster.stop()
        if self.controller_channel is not None:
            self.controller_channel.stop()
        if self.replication is not None:
            self.replication.stop()
        if self.session is not None:
            self.session.stop()
        if self.transactions is not None:
            await self.transactions.stop()
        if self.coordinator is not None:
            await self.coordinator.stop()
        if self.purgatory is not None:
            self.purgatory.close()
        for partition in self.partitions.values():
            partition.write_snapshot()  # the next start replays nothing
        if self.log_manager is not None:
            self.log_manager.shutdown()
        if self.store is not None:
            self.store.close()
            if self.cluster is None:
                self._store_server.close()
        log.info("kbroker %d stopped cleanly", self.broker_id)

    def _first_unstable_offset(self, tp: TopicPartition) -> int | None:
        """The cleaner never compacts past an open transaction."""
        partition = self.partitions.get(tp)
        return None if partition is None else partition.producer_state.first_unstable_offset()

    async def _start_zk_offset_mirror(self) -> None:
        if self.config.offsets_zookeeper_mirror_enable:
            from kbroker.zk_offsets import ZkOffsetMirror
            self._tasks.append(asyncio.ensure_future(
                ZkOffsetMirror(self, self.config.offsets_zookeeper_mirror_interval_ms).run()))

    async def _start_status(self) -> None:
        found = parse_listener(self.config.status_listener)
        if found is not None:
            self.status = StatusServer(self, *found)
            await self.status.start()

    async def _controlled_shutdown(self) -> bool:
        """Ask the controller to move this broker's leaderships away (Kafka's controlled shutdown):
        up to controlled.shutdown.max.retries more times while some remain."""
        from kbroker.replication.client import BrokerConnection
        cfg = self.config
        for attempt in range(cfg.controlled_shutdown_max_retries + 1):
            if attempt:
                await asyncio.sleep(cfg.controlled_shutdown_retry_backoff_ms / 1000)
            assert self.cluster is not None
            controller = self.cluster.snapshot.brokers.get(self.controller_id())
            if controller is None:
                log.info("controlled shutdown: no controller known yet")
                continue
            conn = BrokerConnection(controller.host, controller.port, f"broker-{self.broker_id}-shutdown",
                                    cfg.request_timeout_ms / 1000)
            try:
                response = await conn.request(7, 3, {"broker_id": self.broker_id, "broker_epoch": -1})
            except OSError as exc:
                log.info("controlled shutdown: controller %d unreachable: %s", controller.id, exc)
                continue
            finally:
                conn.close()
            if response.error_code:
                log.info("controlled shutdown refused by %d: %s", controller.id,
                         errors.for_code(response.error_code).__name__)
                continue
            if not response.remaining_partitions:
                log.info("controlled shutdown complete: controller %d moved every leadership", controller.id)
                return True
            log.info("controlled shutdown: %d partitions have no other in-sync replica to lead them",
                     len(response.remaining_partitions))
        log.warning("controlled shutdown did not complete; shutting down anyway")
        return False

    async def _housekeeping(self) -> None:
        cfg = self.config
        period = min(cfg.log_retention_check_interval_ms, cfg.log_flush_offset_checkpoint_interval_ms or 60000,
                     1000) / 1000
        last_retention = last_checkpoint = last_offsets_cleanup = last_rebalance = last_txn_check = time.monotonic()
        while True:
            await asyncio.sleep(period)
            now = time.monotonic()
            assert self.log_manager is not None
            self.log_manager.flush_dirty()
            self.log_manager.clean()  # compaction: applies a finished job, hands the next to the cleaner thread
            if now - last_retention >= cfg.log_retention_check_interval_ms / 1000:
                self.log_manager.cleanup()
                last_retention = now
            if now - last_checkpoint >= (cfg.log_flush_offset_checkpoint_interval_ms or 60000) / 1000:
                self.log_manager.checkpoint()
                last_checkpoint = now
            if (self.cluster is not None and cfg.auto_leader_rebalance_enable
                    and now - last_rebalance >= cfg.leader_imbalance_check_interval_seconds):
                last_rebalance = now
                if self.controller.active:
                    snap = self.cluster.snapshot
                    await self.cluster.run_blocking(
                        lambda: self.controller.auto_rebalance(snap, cfg.leader_imbalance_per_broker_percentage))
            if now - last_txn_check >= cfg.transaction_abort_timed_out_transaction_cleanup_interval_ms / 1000:
                last_txn_check = now
                if self.transactions is not None and self.transactions.coordinator is not None:
                    self.transactions.coordinator.abort_timed_out()
            if now - last_offsets_cleanup >= cfg.offsets_retention_check_interval_ms / 1000:
                assert self.coordinator is not None and self.coordinator.coordinator is not None
                await self.coordinator.coordinator.cleanup_expired_offsets()
                last_offsets_cleanup = now

    # -- requests ----------------------------------------------------------------------------

    _handlers = None

    def dispatch(self, header, body, conn):
        handlers = Broker._handlers
        if handlers is None:
            handlers = Broker._handlers = load_all()
        handler = handlers.get(header.api_key)
        if handler is None:
            from kbroker.network.connection import CLOSE
            log.info("closing a connection that sent api key %d, which is not served", header.api_key)
            return CLOSE
        return handler(self, header, body, conn)

    def on_append(self, partition: Partition) -> None:
        assert self.purgatory is not None
        self.purgatory.check(partition.tp)

    # -- cluster view (single node) ----------------------------------------------------------

    def live_brokers(self) -> list[LiveBroker]:
        if self.cluster is not None:
            return list(self.cluster.snapshot.brokers.values())
        return [self.endpoint]

    def controller_id(self) -> int:
        if self.cluster is not None:
            found = self.cluster.snapshot.controller_id
            return -1 if found is None else found
        return self.broker_id

    def partition(self, tp: TopicPartition) -> Partition | None:
        """The partition if this broker leads it (what Produce, Fetch and ListOffsets serve)."""
        partition = self.partitions.get(tp)
        if partition is not None and partition.leader_id != self.broker_id:
            return None
        return partition

    def not_hosted_error(self, topic: str, index: int) -> errors.KafkaError:
        """Why ``partition()`` found nothing: NOT_LEADER_OR_FOLLOWER for a partition that exists
        in the cluster (led elsewhere, or not yet), else UNKNOWN_TOPIC_OR_PARTITION."""
        info = self.topics.get(topic)
        if self.cluster is not None and info is not None and index in info.assignment:
            return errors.NotLeaderOrFollowerError(f"broker {self.broker_id} is not the leader of {topic}-{index}")
        return errors.UnknownTopicOrPartitionError(f"{topic}-{index} is not hosted here")

    def coordinator_endpoint(self, group_id: str) -> LiveBroker | None:
        """The group coordinator: the leader of the group's ``__consumer_offsets`` partition."""
        if self.cluster is None:
            return self.endpoint
        assert self.coordinator is not None and self.coordinator.coordinator is not None
        state = self.metadata.state(OFFSETS_TOPIC, self.coordinator.coordinator.partition_for(group_id))
        if state is None:
            return None
        return self.cluster.snapshot.brokers.get(state.leader)

    def partition_state(self, topic: str, index: int) -> PartitionState:
        if self.cluster is not None:
            state = self.metadata.state(topic, index)
            if state is None or state.leader not in self.cluster.snapshot.brokers:
                return PartitionState(leader=-1, leader_epoch=state.leader_epoch if state else 0,
                                      isr=list(state.isr) if state else [], controller_epoch=-1)
            return state
        partition = self.partitions.get(TopicPartition(topic, index))
        if partition is None or partition.log.offline:
            return PartitionState(leader=-1, leader_epoch=0, isr=[], controller_epoch=1)
        return PartitionState(leader=partition.leader_id, leader_epoch=partition.leader_epoch,
                              isr=list(partition.isr), controller_epoch=1)

    def broker_config_strings(self) -> dict[str, str]:
        out = {}
        for key, value in self.config.values.items():
            text = ",".join(map(str, value)) if isinstance(value, list) else str(value)
            out[key.replace("_", ".")] = text.lower() if isinstance(value, bool) else text
        return out

    # -- topics ------------------------------------------------------------------------------

    def _load_topics(self) -> None:
        doomed = set(layout.get_topics_marked_for_deletion(self.store))
        for name in layout.get_all_topics(self.store):
            assignment = layout.get_topic_assignment(self.store, name)
            if assignment is None:
                continue
            if name in doomed:  # a deletion the last run did not finish
                self._finish_deletion(name, assignment.partitions)
                continue
            configs = layout.get_entity_config(self.store, "topics", name)
            self.topics[name] = TopicInfo(name, {p: list(r) for p, r in assignment.partitions.items()}, dict(configs),
                                          _topic_uuid(assignment.topic_id))

    def _host_partition(self, tp: TopicPartition) -> Partition:
        assert self.log_manager is not None
        plog = self.log_manager.get_or_create_log(tp)
        partition = Partition(tp, plog, self.broker_id)
        # As Kafka's makeLeader: the epoch starts at the log end now, so the checkpoint write (two fsyncs)
        # happens here once and not in the first Produce to each partition (1,000 of them: a second).
        plog.leader_epochs.assign(partition.leader_epoch, plog.log_end_offset)
        self.partitions[tp] = partition
        state = PartitionState(leader=self.broker_id, leader_epoch=partition.leader_epoch,
                               isr=[self.broker_id], controller_epoch=1)
        current = layout.get_partition_state(self.store, tp.topic, tp.partition)
        if current is None:
            layout.create_partition_state(self.store, tp.topic, tp.partition, state)
        elif current[0] != state:
            layout.set_partition_state(self.store, tp.topic, tp.partition, state, current[1].version)
        return partition

    def _broker_metadatas(self) -> list:
        from zk_compat.assignment import broker_metadatas
        return broker_metadatas((b.id, b.rack) for b in self.live_brokers())

    def auto_create_topic(self, name: str) -> TopicInfo | None:
        if name in self.topics:
            return self.topics[name]
        try:
            return self.create_topic(name, self.config.num_partitions, self.config.default_replication_factor)
        except errors.TopicAlreadyExistsError:
            return self.topics.get(name)

    def create_topic(self, name: str, num_partitions: int = -1, replication_factor: int = -1,
                     assignment: dict[int, list[int]] | None = None, configs: dict[str, str] | None = None,
                     validate_only: bool = False, host: bool = True) -> TopicInfo:
        """Validate, register and (single broker, ``host``) host the partitions; ``create_topic_async`` hosts
        them without holding the event loop."""
        try:
            validate_topic_name(name)
        except ValueError as exc:
            raise errors.InvalidTopicError(str(exc)) from None
        if name in self.topics:
            raise errors.TopicAlreadyExistsError(f"Topic '{name}' already exists.")
        configs = dict(configs or {})
        try:
            self.config.log.with_overrides(configs)
        except ConfigError as exc:
            raise errors.InvalidConfigError(str(exc)) from None
        live = [b.id for b in self.live_brokers()]
        if assignment:
            if sorted(assignment) != list(range(len(assignment))):
                raise errors.InvalidReplicaAssignmentError("partitions must be numbered 0..n-1")
            for replicas in assignment.values():
                if not replicas or len(set(replicas)) != len(replicas) or any(r not in live for r in replicas):
                    raise errors.InvalidReplicaAssignmentError(f"replicas {replicas} are not distinct live brokers")
        else:
            partitions = self.config.num_partitions if num_partitions == -1 else num_partitions
            factor = self.config.default_replication_factor if replication_factor == -1 else replication_factor
            if partitions <= 0:
                raise errors.InvalidPartitionsError(f"number of partitions must be at least 1, got {partitions}")
            if factor <= 0:
                raise errors.InvalidReplicationFactorError(f"replication factor must be at least 1, got {factor}")
            if factor > len(live):
                raise errors.InvalidReplicationFactorError(
                    f"replication factor {factor} is larger than the {len(live)} available broker(s)")
            # rack-aware when every broker has broker.rack (Kafka's ENFORCED mode; a partial
            # rack setup is refused rather than placed blindly)
            assignment = layout.assign_replicas_to_brokers(self._broker_metadatas(), partitions, factor,
                                                           rng=random.Random())
        info = TopicInfo(name, {p: list(r) for p, r in assignment.items()}, configs)
        if validate_only:
            return info
        if self.cluster is not None:
            info.topic_id = _topic_uuid(layout.create_topic(self.store, name, info.assignment, configs))
            return self._topic_registered(info)
        info.topic_id = _topic_uuid(layout.create_topic(self.store, name, info.assignment, configs))
        self.topics[name] = info
        assert self.log_manager is not None
        self.log_manager.topic_overrides[name] = configs
        if host:
            for index, replicas in info.assignment.items():
                if self.broker_id in replicas:
                    self._host_partition(TopicPartition(name, index))
            log.info("created topic %s with %d partitions", name, len(info.assignment))
        return info

    async def _host_topic_async(self, info: TopicInfo, every: int = HOSTING_CHUNK) -> None:
        """Host a new topic's partitions, giving the loop back every ``every`` of them: each costs a directory,
        three files and a checkpoint (a 1,000-partition topic took seconds, every connection waiting). The
        topic's other partitions answer LEADER_NOT_AVAILABLE (retriable) meanwhile; a deletion stops it."""
        for n, (index, replicas) in enumerate(info.assignment.items(), start=1):
            if self.topics.get(info.name) is not info or self._stopping:
                return
            if self.broker_id in replicas:
                self._host_partition(TopicPartition(info.name, index))
            if n % every == 0:
                await asyncio.sleep(0)
        log.info("created topic %s with %d partitions", info.name, len(info.assignment))

    def _topic_registered(self, info: TopicInfo) -> TopicInfo:
        """ZooKeeper mode, as AdminZkClient: /config/topics/<t> and /brokers/topics/<t> are
        written; the controller creates the partition states and tells the replicas."""
        if info.name not in self.topics:
            self.topics[info.name] = info
            self._pending_topics.add(info.name)
        assert self.log_manager is not None
        self.log_manager.topic_overrides[info.name] = info.configs
        log.info("created topic %s with %d partitions", info.name, len(info.assignment))
        return info

    async def create_topic_async(self, name: str, num_partitions: int = -1, replication_factor: int = -1,
                                 assignment: dict[int, list[int]] | None = None,
                                 configs: dict[str, str] | None = None, validate_only: bool = False) -> TopicInfo:
        """CreateTopics: in ZooKeeper mode the znodes are written off the event loop (a slow
        ensemble must not stall every connection); validation and state stay on the loop."""
        if validate_only:
            return self.create_topic(name, num_partitions, replication_factor, assignment, configs, True)
        if self.cluster is None:
            info = self.create_topic(name, num_partitions, replication_factor, assignment, configs, host=False)
            await self._host_topic_async(info)
            return info
        info = self.create_topic(name, num_partitions, replication_factor, assignment, configs, validate_only=True)
        topic_id = await self.cluster.run_blocking(
            lambda: layout.create_topic(self.store, name, info.assignment, info.configs))
        if name in self.topics and name not in self._pending_topics:
            raise errors.TopicAlreadyExistsError(f"Topic '{name}' already exists.")
        info.topic_id = _topic_uuid(topic_id)
        return self._topic_registered(info)

    async def delete_topic_async(self, name: str) -> None:
        if self.cluster is None:
            return self.delete_topic(name)
        self._check_deletable(name)
        await self.cluster.run_blocking(lambda: layout.mark_topic_for_deletion(self.store, name))

    def _check_deletable(self, name: str) -> TopicInfo:
        info = self.topics.get(name)
        if info is None:
            raise errors.UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        if not self.config.delete_topic_enable:
            raise errors.TopicDeletionDisabledError("delete.topic.enable is false")
        if info.internal:
            raise errors.InvalidTopicError(f"{name} is internal and cannot be deleted")
        return info

    def delete_topic(self, name: str) -> None:
        info = self._check_deletable(name)
        layout.mark_topic_for_deletion(self.store, name)
        if self.cluster is not None:
            return  # the controller deletes it; the logs go when the topic leaves the view
        del self.topics[name]
        self._finish_deletion(name, info.assignment)
        self.log_manager.topic_overrides.pop(name, None)
        log.info("deleted topic %s", name)

    def _finish_deletion(self, name: str, assignment: dict[int, list[int]]) -> None:
        """Logs first, then the znodes (the deletion marker last), so a crash in between resumes."""
        assert self.log_manager is not None
        for index in assignment:
            tp = TopicPartition(name, index)
            self.partitions.pop(tp, None)
            self.log_manager.delete_log(tp)
        layout.delete_topic_znodes(self.store, name)

    def _new_partitions(self, name: str, count: int) -> tuple[TopicInfo, dict[int, list[int]]]:
        info = self.topics.get(name)
        if info is None:
            raise errors.UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        current = len(info.assignment)
        if count <= current:
            raise errors.InvalidPartitionsError(f"topic {name} has {current} partitions; {count} would not add any")
        extra = layout.assign_replicas_for_new_partitions(info.assignment, self._broker_metadatas(), count)
        return info, {p: list(r) for p, r in extra.items()}

    def _write_new_partitions(self, name: str, info: TopicInfo, extra: dict[int, list[int]]) -> None:
        """Add the partitions to the topic znode as it is now (a reassignment's adding/removing replicas kept),
        compare-and-set so a controller's rewrite in between is not lost."""
        for _ in range(5):
            found = layout.get_topic_assignment_with_version(self.store, name)
            if found is None:
                raise errors.UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
            current, version = found
            if len(current.partitions) != len(info.assignment):
                raise errors.InvalidPartitionsError(
                    f"topic {name} now has {len(current.partitions)} partitions; ask again")
            current.partitions.update(extra)
            try:
                layout.set_topic_assignment(self.store, name, current, version)
                return
            except BadVersionError:
                continue
        raise errors.ReassignmentInProgressError(f"topic {name} kept changing while partitions were added")

    def create_partitions(self, name: str, count: int, validate_only: bool = False) -> None:
        info, extra = self._new_partitions(name, count)
        if validate_only:
            return
        current = len(info.assignment)
        self._write_new_partitions(name, info, extra)
        info.assignment.update(extra)
        if self.cluster is not None:
            return  # the controller creates the new partitions' states; the view hosts them
        for index in range(current, count):
            if self.broker_id in info.assignment[index]:
                self._host_partition(TopicPartition(name, index))

    async def create_partitions_async(self, name: str, count: int, validate_only: bool = False) -> None:
        """CreatePartitions: in ZooKeeper mode the topic znode is read and rewritten off the event loop."""
        if self.cluster is None or validate_only:
            return self.create_partitions(name, count, validate_only)
        info, extra = self._new_partitions(name, count)
        await self.cluster.run_blocking(lambda: self._write_new_partitions(name, info, extra))
        info.assignment.update(extra)

    def _checked_configs(self, name: str, configs: dict[str, str]):
        info = self.topics.get(name)
        if info is None:
            raise errors.UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        try:
            return info, self.config.log.with_overrides(configs)
        except ConfigError as exc:
            raise errors.InvalidConfigError(str(exc)) from None

    def alter_topic_configs(self, name: str, configs: dict[str, str], validate_only: bool = False) -> None:
        info, effective = self._checked_configs(name, configs)
        if validate_only:
            return
        layout.change_entity_config(self.store, "topics", name, configs)
        self._topic_configs_changed(name, info, configs, effective)

    async def alter_topic_configs_async(self, name: str, configs: dict[str, str],
                                        validate_only: bool = False) -> None:
        """AlterConfigs: in ZooKeeper mode the config znode and its change notification are written off the
        event loop (every broker then applies it from /config/changes, this one too)."""
        if self.cluster is None or validate_only:
            return self.alter_topic_configs(name, configs, validate_only)
        info, effective = self._checked_configs(name, configs)
        await self.cluster.run_blocking(lambda: layout.change_entity_config(self.store, "topics", name, configs))
        self._topic_configs_changed(name, info, configs, effective)

    def _topic_configs_changed(self, name: str, info: TopicInfo, configs: dict[str, str], effective) -> None:
        info.configs = dict(configs)
        assert self.log_manager is not None
        self.log_manager.topic_overrides[name] = info.configs
        for index in info.assignment:
            partition = self.partitions.get(TopicPartition(name, index))
            if partition is not None:
                partition.log.config = effective

    # -- producer ids ------------------------------------------------------------------------

    def next_producer_id(self) -> int:
        """Ids come from /latest_producer_id_block in blocks of 1000, as Kafka allocates them."""
        for pid in self._producer_ids:
            return pid
        block = layout.claim_producer_id_block(self.store, self.broker_id)
        self._producer_ids = iter(range(block.block_start, block.block_end + 1))
        return next(self._producer_ids)


def _topic_uuid(text: str | None) -> uuid.UUID:
    """Kafka stores topic ids as 22-character base64url strings; the wire carries 16 bytes."""
    if not text:
        return uuid.UUID(int=0)
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))


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
