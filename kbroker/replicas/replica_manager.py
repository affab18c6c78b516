"""The replica manager (Kafka's ReplicaManager): the partitions this broker hosts and everything that
happens to them.

One module: every entry point below reads or changes the one partition table and completes operations in the
one purgatory, in the same turn of the loop (an append wakes parked fetches, a follower's fetch completes parked
produces). What keeps state of its own is apart already: one partition's replicas and the delayed operations
(``kbroker.replication``), a failed log dir (``log_dir_failure``), the topic table (``kbroker.topics``).

- The partition table: ``partitions`` (every hosted replica), ``partition(tp)`` (only what this broker
  leads: what Produce, Fetch and ListOffsets serve) and ``not_hosted_error`` (why it found nothing).
- Produce (Kafka's appendRecords): ``append_records`` takes the partitions' records (``ProduceEntry``) and owns
  the data-path rules of a client's write: the acks check, the refusal of internal topics, the log's batch
  checks, the per-topic produce meters and, for acks=all, the wait in the purgatory until the high watermark
  passes every write (``DelayedProduce``); it answers per partition through the handler's ``respond``.
  ``append_internal`` is the coordinators' acks=all write to their internal topics.
- Fetch (Kafka's fetchMessages): ``fetch_messages`` takes ``FetchParams`` and the partitions and owns a Fetch
  past its authorization: a follower's fetch offset recorded as its log end offset (``record_follower_fetch``:
  the high watermark, the ISR and waiting produces move with it), the read (``kbroker.replication.fetch_read``,
  each partition checked by ``fetchable``), the fetch-request meters and the wait for ``min_bytes`` in the
  purgatory (``DelayedFetch``); it answers per partition through the handler's ``respond``.
- What the wire says stays with the handlers, as in Kafka's KafkaApis: request versions, fetch sessions, client
  quotas and down-conversion (``tests/quality/test_data_path_layers.py`` checks it).
- Replication throttles (KIP-73): ``quotas`` (leader, follower, log-dir moves; bounds from the dynamic config),
  ``should_leader_throttle`` and ``record_leader_replication`` for the Fetch handler.
- Requests from the controller, as Kafka's ReplicaManager takes them: ``heard_from_controller`` (the controller
  epoch check of LeaderAndIsr, StopReplica and UpdateMetadata), ``apply_leader_and_isr`` (becomeLeaderOrFollower:
  each partition hosted and given its role) and ``stop_replicas`` (leader epochs, KIP-570); the fetchers and the
  ISR manager exist in ZooKeeper mode only (``enable_replication``).
- Markers: ``write_markers`` appends transaction markers to the partitions led here.
- A failed log dir (KIP-112): ``kbroker.replicas.log_dir_failure`` stops its replicas and tells the controller;
  LeaderAndIsr answers KAFKA_STORAGE_ERROR for a replica on an offline dir.
- Log dirs: ``alter_log_dir`` (AlterReplicaLogDirs) starts moving a hosted partition to another dir of this
  broker (``kbroker.log.log_dir_mover``); a move a restart interrupted resumes when the partition is hosted.

Nothing here knows the coordinators: they register ``leadership_listeners`` (this broker became or
stopped being the leader of a partition) and ``marker_listeners`` (a marker reached a partition), so
the data only moves down and completions come back through callbacks.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping, Sequence
from typing import Protocol, TypeAlias, TypedDict, TypeVar

from kbroker import errors
from kbroker.clock import monotonic_ms
from kbroker.config.broker import BrokerConfig
from kbroker.config.dynamic import DynamicBrokerConfig
from kbroker.log import LogManager, TopicPartition, legacy, producer_snapshot
from kbroker.log.log_dir_mover import LogDirMover
from kbroker.log.log_manager import HOSTING_TURN_S
from kbroker.log.names import INTERNAL_TOPICS
from kbroker.log.partition_log import AppendResult, PartitionLog
from kbroker.metadata.zk_view import LiveBroker, RunBlocking
from kbroker.metrics import BrokerMetrics
from kbroker.metrics.hops import HOPS
from kbroker.protocol import message_types as msg
from kbroker.protocol.outcome import CLOSE, NO_RESPONSE, Outcome
from kbroker.replicas.log_dir_failure import LogDirFailures
from kbroker.replication.delayed import DelayedFetch, DelayedProduce, PendingAck
from kbroker.replication.fetch_read import FetchParams, FetchRead, PartitionAnswers, Wanted, records_size
from kbroker.replication.fetcher import ReplicaFetcherManager
from kbroker.replication.isr import IsrManager
from kbroker.replication.partition import Partition, error_code_of
from kbroker.replication.purgatory import Purgatory
from kbroker.replication.quiet import QuietPartitions, QuietRegistry
from kbroker.replication.throttle import ReplicationQuotas, throttled
from zk_compat.store import MetadataStore
from zk_compat.znodes import PartitionState

log = logging.getLogger(__name__)
R = TypeVar("R")

LeadershipListener = Callable[[Partition, bool], None]
MarkerListener = Callable[[int, bool, TopicPartition], Awaitable[None]]


# One partition's write of a Produce, as the handler hands it over: (topic, partition, its records: a view into
# the request frame, None when the request carried none).
ProduceEntry: TypeAlias = "tuple[str, int, memoryview | None]"
PartitionAnswer: TypeAlias = "msg.ProduceResponse_PartitionResponse"


# One partition's state in a LeaderAndIsr request (v2+ groups them by topic).
LeaderAndIsrPartition: TypeAlias = "msg.LeaderAndIsrRequest.LeaderAndIsrTopicState.LeaderAndIsrPartitionState"


# Refusals Kafka's ReplicaManager makes for a partition its metadata knows, after the request's checks (so
# counted in TotalProduceRequests) though kbroker makes them before looking at the records
_REFUSED_AT_THE_LOG = (errors.InvalidTopicError, errors.NotLeaderOrFollowerError, errors.KafkaStorageError)


class MarkerTopic(TypedDict):
    name: str
    partition_indexes: list[int]


class TxnMarker(TypedDict):
    """One transaction marker to write, with the fields of a WriteTxnMarkers request's marker."""
    producer_id: int
    producer_epoch: int
    transaction_result: bool  # True: COMMIT
    coordinator_epoch: int
    topics: list[MarkerTopic]


class LiveLeader(Protocol):
    """Where a partition's leader listens, as LeaderAndIsr names it."""
    broker_id: int
    host_name: str
    port: int


def unanswered(acks: int, failed: bool) -> Outcome | None:
    """What an acks=0 Produce gets instead of an answer (None for acks 1 and all): nothing, or, when a partition
    failed, a closed connection so that the client refreshes its metadata (apache/kafka
    core/src/main/scala/kafka/server/KafkaApis.scala, handleProduceRequest's sendResponseCallback)."""
    if acks != 0:
        return None
    return CLOSE if failed else NO_RESPONSE


class ReplicaManager:
    def __init__(self, broker_id: int, config: BrokerConfig, log_manager: LogManager, purgatory: Purgatory,
                 dynamic_config: DynamicBrokerConfig | None = None, metrics: BrokerMetrics | None = None) -> None:
        self.broker_id = broker_id
        self.config = config
        self.metrics = metrics  # the per-topic produce and fetch meters (None: metrics.enabled=false)
        HOPS.start(broker_id)  # with KBROKER_TRACE_HOPS set, this broker stamps its replication steps
        # the broker's configs changed at run time (KIP-226): replication throttles subscribe to it
        self.dynamic_config = dynamic_config or DynamicBrokerConfig(config, broker_id)
        self.log_manager = log_manager
        self.purgatory = purgatory
        self.partitions: dict[TopicPartition, Partition] = {}
        # the follower fetch sessions resting on each partition led here (kbroker.replication.quiet)
        self.quiet = QuietRegistry(purgatory.check)
        # ZooKeeper mode: is the partition in the cluster's view (then NOT_LEADER_OR_FOLLOWER, not UNKNOWN)?
        self.exists_in_cluster: Callable[[str, int], bool] | None = None
        self.controller_epoch = -1  # the newest controller's epoch heard from (LeaderAndIsr, StopReplica, ...)
        self.leadership_listeners: list[LeadershipListener] = []
        self.marker_listeners: list[MarkerListener] = []
        self.fetchers: ReplicaFetcherManager | None = None
        self.isr: IsrManager | None = None
        self.replication_bytes_in = 0  # record bytes this broker's followers appended (its fetchers count them)
        # replication throttles (KIP-73): bounds from the broker's current config, kept current as it changes
        self.quotas = ReplicationQuotas(self.dynamic_config.current)
        self.dynamic_config.subscribe(self.quotas.apply)
        self.mover = LogDirMover(log_manager, self._prepare_move, self._moved, self.quotas.alter_log_dirs)
        self.log_dir_failures = LogDirFailures(self)  # the log manager's on_dir_offline (KIP-112)

    def enable_replication(self, store: MetadataStore, run_blocking: RunBlocking,
                           exists_in_cluster: Callable[[str, int], bool]) -> None:
        """ZooKeeper mode: follower fetchers, the ISR manager writing through ``store``, and the cluster's view of
        which partitions exist (a partition known there but not here answers NOT_LEADER_OR_FOLLOWER)."""
        self.exists_in_cluster = exists_in_cluster
        self.fetchers = ReplicaFetcherManager(self, self.dynamic_config.current.num_replica_fetchers)
        self.dynamic_config.subscribe(self._fetchers_reconfigured)
        self.isr = IsrManager(self.broker_id, self.config.replica_lag_time_max_ms, self.partitions, store,
                              run_blocking, self.on_append)
        self.log_dir_failures.enable(store, run_blocking)

    def _fetchers_reconfigured(self, config: BrokerConfig, changed: frozenset[str]) -> None:
        if "num.replica.fetchers" in changed and self.fetchers is not None:
            self.fetchers.resize(config.num_replica_fetchers)

    def start(self) -> None:
        """ZooKeeper mode: the ISR checks begin (once the cluster view is read)."""
        if self.isr is not None:
            self.isr.start()

    def stop(self) -> None:
        self.mover.stop()  # before the log manager closes the logs it copies
        self.log_dir_failures.stop()
        if self.isr is not None:
            self.isr.stop()
        if self.fetchers is not None:
            self.fetchers.stop()

    def replicated_in(self, size: int) -> None:
        """A fetcher appended ``size`` record bytes from a leader."""
        self.replication_bytes_in += size

    def write_snapshots(self) -> None:
        for partition in self.partitions.values():
            partition.write_snapshot()  # the next start replays nothing

    # -- the partition table -----------------------------------------------------------------

    def partition(self, tp: TopicPartition) -> Partition | None:
        """The partition if this broker leads it (what Produce, Fetch and ListOffsets serve)."""
        partition = self.partitions.get(tp)
        if partition is not None and partition.leader_id != self.broker_id:
            return None
        return partition

    def exists(self, topic: str, index: int) -> bool:
        """Does the partition exist: in the cluster (ZooKeeper mode), or hosted here (a single broker hosts every
        partition)?"""
        if self.exists_in_cluster is not None:
            return self.exists_in_cluster(topic, index)
        return TopicPartition(topic, index) in self.partitions

    def not_hosted_error(self, topic: str, index: int) -> errors.KafkaError:
        """Why ``partition()`` found nothing: NOT_LEADER_OR_FOLLOWER for a partition that exists
        in the cluster (led elsewhere, or not yet), else UNKNOWN_TOPIC_OR_PARTITION."""
        if self.exists_in_cluster is not None and self.exists_in_cluster(topic, index):
            return errors.NotLeaderOrFollowerError(f"broker {self.broker_id} is not the leader of {topic}-{index}")
        return errors.UnknownTopicOrPartitionError(f"{topic}-{index} is not hosted here")

    def leader(self, tp: TopicPartition) -> Partition:
        """``partition(tp)``, or the error that says why not."""
        partition = self.partition(tp)
        if partition is None:
            raise self.not_hosted_error(tp.topic, tp.partition)
        return partition

    def on_append(self, partition: Partition) -> None:
        """Something a waiting produce or fetch depends on moved: let the purgatory look again, and the follower
        sessions resting on the partition wake it."""
        self.purgatory.check(partition.tp)
        self.quiet.moved(partition.tp)

    def first_unstable_offset(self, tp: TopicPartition) -> int | None:
        """The cleaner never compacts past an open transaction."""
        partition = self.partitions.get(tp)
        return None if partition is None else partition.producer_state.first_unstable_offset()

    def host_as_sole_replica(self, tp: TopicPartition) -> Partition:
        """Single broker: host ``tp`` as its leader and only replica."""
        plog = self.log_manager.get_or_create_log(tp)
        partition = Partition(tp, plog, self.broker_id)
        # As Kafka's makeLeader: the epoch starts at the log end now, so the checkpoint write (two fsyncs)
        # happens here once and not in the first Produce to each partition (1,000 of them: a second).
        plog.leader_epochs.assign(partition.leader_epoch, plog.log_end_offset)
        self.partitions[tp] = partition
        self._resume_move(tp)
        return partition

    def delete_partitions(self, topic: str, indexes: Iterable[int]) -> None:
        """The topic is deleted: stop its replicas and delete their logs."""
        for index in indexes:
            tp = TopicPartition(topic, index)
            gone = self.partitions.pop(tp, None)
            self.quiet.moved(tp)
            if gone is not None and self.fetchers is not None:
                self.fetchers.unfollow(tp)
            self.log_manager.delete_log(tp)

    # -- append --------------------------------------------------------------------------------

    def append_as_leader(self, partition: Partition, batches: memoryview, acks: int) -> AppendResult:
        """A client's batches to a partition led here (``leader(tp)``); waiting fetches and produces look again."""
        result = partition.append_as_leader(batches, acks)
        if HOPS.on:
            HOPS.mark("append", partition.tp.topic, partition.tp.partition, result.last_offset + 1)
        self.on_append(partition)
        return result

    def append_records(self, entries: Sequence[ProduceEntry], acks: int, timeout_ms: int,
                       respond: Callable[[list[PartitionAnswer], bool], R],
                       refused: bool = False) -> R | Outcome | asyncio.Future[R]:
        """A client's Produce, as Kafka's ReplicaManager.appendRecords: each entry's records written (or refused
        with its error), ``respond(answers, failed)`` shapes the answer from the partition answers (in entry
        order; ``failed``: one was refused), and acks=all parks that answer in the purgatory until the ISR has
        every write (or ``timeout_ms``), whose REQUEST_TIMED_OUT or NOT_LEADER_OR_FOLLOWER then lands in the
        partition answers it holds. acks=0 gets no answer (``unanswered``); ``refused``: the handler refused some
        partitions already (authorization, the request's own format rules)."""
        waiting: list[PendingAck] = []
        failed = False
        answers: list[PartitionAnswer] = []
        for topic, index, records in entries:
            out = self._append_one(acks, topic, index, records, waiting)
            failed |= out["error_code"] != 0
            answers.append(out)
        silent = unanswered(acks, failed or refused)
        if silent is not None:
            return silent
        response = respond(answers, failed)
        if not waiting:
            return response
        return self.wait_for_isr(response, waiting, timeout_ms)

    def _append_one(self, acks: int, topic: str, index: int, batches: memoryview | None,
                    waiting: list[PendingAck]) -> PartitionAnswer:
        metrics = self.metrics
        out: PartitionAnswer = {"index": index, "error_code": 0, "base_offset": -1, "log_append_time_ms": -1,
                                "log_start_offset": -1}
        counted = False  # reached the log, as Kafka counts TotalProduceRequests (past its request checks)
        try:
            if acks not in (-1, 0, 1):
                raise errors.InvalidRequiredAcksError(f"acks must be -1, 0 or 1, not {acks}")
            if topic in INTERNAL_TOPICS:  # Kafka's Topic.isInternal: internalTopicsAllowed only for the coordinators
                raise errors.InvalidTopicError(f"{topic} is internal: clients may not produce to it")
            tp = TopicPartition(topic, index)
            partition = self.leader(tp)  # NOT_LEADER_OR_FOLLOWER / UNKNOWN_TOPIC_OR_PARTITION before the records
            if batches is None or len(batches) == 0:
                raise errors.InvalidRecordError("no record batch")
            if legacy.is_legacy(batches) and partition.log.config.record_magic >= 2:
                # message sets (magic 0/1, only Produce v0-2 carries them) become one batch of the topic's format
                batches = memoryview(legacy.up_convert(batches))
            counted = True
            result = self.append_as_leader(partition, batches, acks)
            if metrics is not None:
                metrics.produced(topic, result.size, result.record_count)
            out["base_offset"] = result.first_offset
            out["log_append_time_ms"] = result.log_append_time
            out["log_start_offset"] = partition.log.log_start_offset
            if acks == -1 and partition.high_watermark <= result.last_offset:
                waiting.append(PendingAck(partition, result.last_offset + 1, out))
        except errors.KafkaError as exc:
            out["error_code"] = exc.code
            if metrics is not None and (counted or (isinstance(exc, _REFUSED_AT_THE_LOG)
                                                    and self.exists(topic, index))):
                metrics.produce_refused(topic, exc.code, len(batches) if batches is not None else 0)
            # Produce v8+ carries these (older answers leave them out): the message, and the records refused one
            # by one (keyless on a compacted topic, timestamps), each named by its index
            out["error_message"] = exc.message
            out["record_errors"] = [{"batch_index": i, "batch_index_error_message": text}
                                    for i, text in getattr(exc, "record_errors", ())]
            log.debug("produce to %s-%d refused: %s", topic, index, exc)
        except Exception as exc:  # a bug must cost one partition its answer, not the broker
            log.exception("produce to %s-%d failed", topic, index)
            out["error_code"] = error_code_of(exc)
            if metrics is not None and counted:
                metrics.produce_refused(topic, out["error_code"], len(batches) if batches is not None else 0)
        return out

    def wait_for_isr(self, response: R, waiting: list[PendingAck], timeout_ms: int) -> asyncio.Future[R]:
        """acks=all: answer ``response`` once the ISR has every ``waiting`` append (or at the timeout)."""
        delayed = DelayedProduce(self.partitions, response, waiting)
        return self.purgatory.watch(delayed, [ack.partition.tp for ack in waiting], timeout_ms)

    def append_internal(self, tp: TopicPartition, batch: bytearray, timeout_ms: int) -> int | Awaitable[int]:
        """Write ``batch`` to an internal topic's partition this broker leads, with acks=all (as Kafka
        writes __consumer_offsets and __transaction_state): the first offset, or an awaitable of it
        when the ISR does not have it yet. Raises the KafkaError of a refusal."""
        partition = self.partition(tp)
        if partition is None:
            raise errors.NotLeaderOrFollowerError(f"{tp} is not led here")
        result = partition.append_as_leader(memoryview(batch), -1, from_client=False)
        self.on_append(partition)
        if partition.high_watermark > result.last_offset:
            return result.first_offset
        return self._replicated(partition, result.first_offset, result.last_offset + 1, timeout_ms)

    async def _replicated(self, partition: Partition, first_offset: int, required_offset: int,
                          timeout_ms: int) -> int:
        out: PartitionAnswer = {"index": partition.tp.partition, "error_code": 0, "base_offset": first_offset}
        await self.wait_for_isr(out, [PendingAck(partition, required_offset, out)], timeout_ms)
        if out["error_code"]:
            raise errors.for_code(out["error_code"])(f"{partition.tp}: not replicated")
        return first_offset

    # -- fetch ---------------------------------------------------------------------------------

    def fetch_messages(self, params: FetchParams, wanted: Wanted, denied: list[tuple[str, int]],
                       respond: Callable[[PartitionAnswers], R],
                       quiet: QuietPartitions | None = None) -> R | asyncio.Future[R]:
        """A Fetch of ``wanted`` (topic, partition, fetch offset, max bytes, leader epoch), authorized, as Kafka's
        ReplicaManager.fetchMessages: ``respond`` shapes the answer from each partition's (``denied`` ones
        TOPIC_AUTHORIZATION_FAILED), now, or from the purgatory when less than ``min_bytes`` can be read now and
        ``max_wait_ms`` allows a wait. Only partitions that exist count in the fetch meters, as Kafka's.

        ``quiet``: a follower's fetch session's quiet partitions (``kbroker.replication.quiet``, none yet at the
        session's first fetch), which ``wanted`` leaves out unless it names them (and then they are skipped at the
        offset they rest at): a waiting fetch wakes when one of them moves, and reads it then."""
        replica_id = params.replica_id
        active = wanted
        if quiet is not None:
            quiet.fetched(monotonic_ms(), self.partitions.get)
            moved = quiet.take_moved()  # found by the sweep
            if moved:
                named = {(e[0], e[1]) for e in wanted}
                active = wanted = wanted + [e for e in moved if (e[0], e[1]) not in named]
            if len(quiet):  # a partition named at the offset it rests at stays quiet
                active = [e for e in wanted
                          if not quiet.still_quiet(TopicPartition(e[0], e[1]), e[2],
                                                   self.partitions.get(TopicPartition(e[0], e[1])))]
        if replica_id >= 0:
            self.record_follower_fetch(replica_id, [(TopicPartition(t, p), offset, epoch)
                                                    for t, p, offset, _, epoch in active])
        metrics = self.metrics
        evaluation = FetchRead(self, params, active, denied, metrics, quiet)
        if metrics is not None:  # once per partition read, as Kafka (only partitions its metadata knows are read)
            for t, p, *_ in wanted:
                if self.exists(t, p):
                    metrics.fetch_read(t)
        evaluation.run()
        min_bytes = max(params.min_bytes, 1)
        if params.max_wait_ms <= 0 or evaluation.errors or evaluation.bytes >= min_bytes:
            return respond(evaluation.answers())
        delayed = DelayedFetch(evaluation, min_bytes, respond)
        keys: list[Hashable] = [TopicPartition(t, p) for t, p, *_ in active]
        if quiet is not None:
            keys.append(quiet)  # its partitions that wake
        return self.purgatory.watch(delayed, keys, params.max_wait_ms)

    def fetchable(self, tp: TopicPartition, leader_epoch: int, replica_id: int, max_bytes: int) -> Partition:
        """One partition of a Fetch, checked before its read: led here, the fetcher's epoch current, a
        follower's fetch from one of its followers; else the error for that partition."""
        partition = self.leader(tp)
        partition.check_leader_epoch(leader_epoch)
        if replica_id >= 0 and replica_id not in partition.followers:
            raise errors.NotLeaderOrFollowerError(f"broker {replica_id} is not a follower of {tp}")
        if max_bytes < 0:  # Kafka's log read refuses it: UNKNOWN_SERVER_ERROR for the partition
            raise errors.UnknownServerError(f"invalid partition max bytes {max_bytes} for {tp}")
        return partition

    def leader_throttled(self, partition: Partition) -> bool:
        """Is ``partition`` (led here) listed for this broker in leader.replication.throttled.replicas?"""
        return throttled(partition.log.config.leader_replication_throttled_replicas, partition.tp.partition,
                         self.broker_id)

    def should_leader_throttle(self, partition: Partition, replica_id: int) -> bool:
        """Kafka's ReplicaManager.shouldLeaderThrottle: a follower outside the ISR fetching a throttled
        replica while the leader quota is exceeded gets no records (an in-sync follower never waits)."""
        quota = self.quotas.leader
        return (quota.bounded and replica_id not in partition.isr and self.leader_throttled(partition)
                and quota.exceeded())

    def record_leader_replication(self, answered: PartitionAnswers) -> None:
        """A follower's fetch answer leaves: the records of throttled replicas count towards the leader quota
        (Kafka records the size of the throttled partitions of each answer)."""
        quota = self.quotas.leader
        size = 0
        for topic, out in answered:
            records = out["records"]
            if records and out["error_code"] == 0:
                partition = self.partitions.get(TopicPartition(topic, out["partition_index"]))
                if partition is not None and self.leader_throttled(partition):
                    size += records_size(records)
        if size:
            quota.record(size)

    def record_follower_fetch(self, replica_id: int, positions: list[tuple[TopicPartition, int, int]]) -> None:
        """A follower fetched (tp, fetch offset, leader epoch): its log end offsets, before any read."""
        now = monotonic_ms()
        for tp, offset, leader_epoch in positions:
            partition = self.partition(tp)
            if partition is None:
                continue  # the evaluation answers the error
            try:
                partition.check_leader_epoch(leader_epoch)
                partition.update_follower(replica_id, offset, now)
            except errors.KafkaError:
                continue
            if HOPS.on:
                HOPS.mark("fetch_in", tp.topic, tp.partition, offset, replica_id)
            if partition.maybe_advance_high_watermark():
                if HOPS.on:
                    HOPS.mark("hw", tp.topic, tp.partition, partition.high_watermark)
                self.on_append(partition)
            if self.isr is not None:
                self.isr.maybe_expand(partition, replica_id)

    # -- requests from the controller (LeaderAndIsr, StopReplica, UpdateMetadata) -----------------

    def heard_from_controller(self, controller_epoch: int) -> bool:
        """Is a request of the controller of ``controller_epoch`` current? As Kafka's ReplicaManager, a request of
        a controller older than the newest one heard from is refused (STALE_CONTROLLER_EPOCH) and a newer epoch
        is remembered; a single broker has no controller and refuses them all."""
        if self.fetchers is None or controller_epoch < self.controller_epoch:
            return False
        self.controller_epoch = controller_epoch
        return True

    async def apply_leader_and_isr(self, controller_epoch: int,
                                   partitions: Iterable[tuple[str, LeaderAndIsrPartition]],
                                   live_leaders: Mapping[int, LiveLeader]) -> list[tuple[str, int, int]]:
        """A current LeaderAndIsr request's partitions, as Kafka's becomeLeaderOrFollower: (topic, partition,
        error code) for each. The loop is given away every HOSTING_TURN_S of it (thousands of new logs must
        not stall the other connections: an acks=all write waits for three brokers' loops); a newer controller
        heard from meanwhile makes the rest
        STALE_CONTROLLER_EPOCH."""
        results: list[tuple[str, int, int]] = []
        turn = time.monotonic()
        for topic, p in partitions:
            if time.monotonic() - turn > HOSTING_TURN_S:
                await asyncio.sleep(0)
                turn = time.monotonic()
            code = 0
            try:
                if controller_epoch < self.controller_epoch:
                    raise errors.StaleControllerEpochError(f"controller epoch {controller_epoch} is stale")
                self.become_leader_or_follower(topic, p, live_leaders.get(p.leader))
            except errors.KafkaError as exc:
                code = exc.code
            except Exception:
                log.exception("LeaderAndIsr for %s-%d failed", topic, p.partition_index)
                code = errors.UnknownServerError.code
            results.append((topic, p.partition_index, code))
        return results

    def stop_replicas(self, stops: Iterable[tuple[str, int, bool, int]]) -> list[tuple[str, int, int]]:
        """A current StopReplica request's partitions (topic, partition, delete, leader epoch: -1 before v3), as
        Kafka's stopReplicas: (topic, partition, error code) for each. A stop naming a leader epoch no newer than
        the replica's is refused FENCED_LEADER_EPOCH (KIP-570: stale or repeated)."""
        results: list[tuple[str, int, int]] = []
        for topic, index, delete, leader_epoch in stops:
            code = 0
            partition = self.partitions.get(TopicPartition(topic, index))
            if partition is not None and 0 <= leader_epoch <= partition.leader_epoch:
                code = errors.FencedLeaderEpochError.code
            else:
                self.stop_replica(topic, index, delete)
            results.append((topic, index, code))
        return results

    def become_leader_or_follower(self, topic: str, p: LeaderAndIsrPartition, live_leader: LiveLeader | None) -> None:
        """One partition of a LeaderAndIsr request: host it (creating its log) and take the role. A state
        older (by zkVersion) than the one this broker has is ignored: requests can cross the leader's own
        ISR writes."""
        assert self.fetchers is not None, "roles come from a controller: ZooKeeper mode only"
        tp = TopicPartition(topic, p.partition_index)
        if self.broker_id not in p.replicas:
            raise errors.UnknownTopicOrPartitionError(f"{tp} is not assigned to broker {self.broker_id}")
        partition = self.partitions.get(tp)
        if partition is not None and partition.log.offline:
            # Kafka's HostedPartition.Offline: the controller learns from this answer that the replica is offline
            raise errors.KafkaStorageError(f"{tp} is in the offline log dir {partition.log.directory.parent}")
        lm = self.log_manager
        if partition is None and lm.offline_dirs and not p.is_new and lm.get_log(tp) is None:
            # Kafka's getOrCreateLog: the replica's log may be on the failed dir; an empty one would lose it
            raise errors.KafkaStorageError(f"Can not create log for {tp} because log directories "
                                           f"{','.join(map(str, sorted(lm.offline_dirs)))} are offline")
        if partition is None:
            plog = lm.get_or_create_log(tp)
            if plog.offline:
                raise errors.KafkaStorageError(f"{tp} is in the offline log dir {plog.directory.parent}")
            partition = self.partitions[tp] = Partition(tp, plog, self.broker_id, p.leader_epoch, single_replica=False)
            log.info("hosting %s (leader %d, epoch %d)", tp, p.leader, p.leader_epoch)
            self._resume_move(tp)
        state = PartitionState(leader=p.leader, leader_epoch=p.leader_epoch, isr=list(p.isr),
                               controller_epoch=p.controller_epoch)
        if p.zk_version < partition.zk_version:
            return  # older than what this broker wrote or saw: the newer view is on its way
        if state.leader == self.broker_id:
            self._become_leader(partition, state, list(p.replicas), p.zk_version)
        else:
            leader = None if live_leader is None else LiveBroker(live_leader.broker_id, live_leader.host_name,
                                                                  live_leader.port, None)
            self._become_follower(partition, state, list(p.replicas), p.zk_version, leader)

    def _become_leader(self, partition: Partition, state: PartitionState, replicas: list[int],
                       zk_version: int) -> None:
        assert self.fetchers is not None
        if partition.become_leader(state.leader_epoch, list(state.isr), replicas, zk_version, state.controller_epoch):
            self.fetchers.unfollow(partition.tp)
            log.info("%s: leader at epoch %d, ISR %s, log end %d, high watermark %d", partition.tp,
                     state.leader_epoch, state.isr, partition.log.log_end_offset, partition.high_watermark)
            self._leadership_changed(partition, True)
        self.on_append(partition)  # acks=all waiters look at the new ISR

    def _become_follower(self, partition: Partition, state: PartitionState, replicas: list[int], zk_version: int,
                         leader: LiveBroker | None) -> None:
        assert self.fetchers is not None
        was_leader = partition.is_leader
        changed = partition.become_follower(state.leader, state.leader_epoch, list(state.isr), replicas,
                                            zk_version, state.controller_epoch)
        if was_leader:
            self.on_append(partition)  # waiting produces learn they lost the leadership
            self._leadership_changed(partition, False)
        if leader is None:
            if self.fetchers.following(partition.tp) is not None or changed:
                log.info("%s: follower of %d at epoch %d, which is not among the live leaders: fetching from no "
                         "one until the controller says where it is", partition.tp, state.leader, state.leader_epoch)
            self.fetchers.unfollow(partition.tp)
        elif changed or self.fetchers.following(partition.tp) != leader.id:
            log.info("%s: follower of %d at epoch %d (log end %d)", partition.tp, state.leader, state.leader_epoch,
                     partition.log.log_end_offset)
            self.fetchers.follow(partition, leader)

    def _leadership_changed(self, partition: Partition, leader: bool) -> None:
        for listener in self.leadership_listeners:
            listener(partition, leader)

    def stop_replica(self, topic: str, index: int, delete: bool) -> None:
        """StopReplica: no longer a replica (reassigned away, or the topic is deleted)."""
        tp = TopicPartition(topic, index)
        partition = self.partitions.pop(tp, None)
        if partition is not None:
            if self.fetchers is not None:
                self.fetchers.unfollow(tp)
            if partition.is_leader:
                self.on_append(partition)  # waiting produces learn the partition is gone
        if delete:
            self.log_manager.delete_log(tp)
            log.info("%s is no longer a replica here: its log is deleted", tp)

    # -- log dirs (AlterReplicaLogDirs) ---------------------------------------------------------------

    def alter_log_dir(self, tp: TopicPartition, path: str) -> None:
        """Move ``tp``'s replica to the log dir ``path`` of this broker, as Kafka's alterReplicaLogDirs:
        LOG_DIR_NOT_FOUND for a dir not in log.dirs, KAFKA_STORAGE_ERROR for an offline one (or while any
        dir is offline: a future log is never made then), REPLICA_NOT_AVAILABLE when the replica is not
        here (its log will then be created in ``path``). A move to another dir replaces one in flight; to
        the dir the log is in (or going to), nothing happens."""
        lm = self.log_manager
        if len(f"{tp}.{'0' * 32}-future") > 255:
            raise errors.InvalidTopicError("the topic name is too long")
        directory = lm.find_log_dir(path)
        future = lm.future_logs.get(tp)
        if future is not None and future.directory.parent != directory:
            log.info("%s: its move to %s is replaced by one to %s", tp, future.directory.parent, directory)
            lm.remove_future_log(tp)
        lm.maybe_update_preferred_dir(tp, directory)
        current = lm.logs.get(tp)
        if tp not in self.partitions or current is None:
            raise errors.ReplicaNotAvailableError(f"{tp} has no replica on broker {self.broker_id}")
        if current.offline:
            raise errors.KafkaStorageError(f"{tp} is offline")
        if current.directory.parent == directory or tp in lm.future_logs:
            return
        if lm.offline_dirs:
            raise errors.KafkaStorageError("a log dir is offline: no future log is made until it is back")
        lm.create_future_log(tp, directory)
        self.mover.start(tp)

    def _resume_move(self, tp: TopicPartition) -> None:
        if tp in self.log_manager.future_logs:
            self.mover.start(tp)

    def _prepare_move(self, tp: TopicPartition, future: PartitionLog) -> None:
        """The producer state follows the partition: a snapshot at the log end and the aborted
        transactions' index entries, in the future log's dir, before it becomes current."""
        partition = self.partitions.get(tp)
        if partition is None:
            return
        producer_snapshot.write_snapshot(future.directory, future.log_end_offset, partition.producer_state)
        bases = [s.base_offset for s in future.segments]
        for aborted in partition.producer_state.aborted:
            base = max((b for b in bases if b <= aborted.last_offset), default=bases[0])
            producer_snapshot.append_aborted(future.directory, base, aborted, -1)

    def _moved(self, tp: TopicPartition, plog: PartitionLog) -> None:
        partition = self.partitions.get(tp)
        if partition is not None:
            partition.log = plog
            self.on_append(partition)  # waiting fetches read the new log

    # -- transaction markers -------------------------------------------------------------------------

    async def write_markers(self, markers: list[TxnMarker]) -> dict[tuple[str, int], int]:
        """Append each marker to the partitions this broker leads; answer once the ISR has them."""
        results: dict[tuple[str, int], msg.ProduceResponse_PartitionResponse] = {}
        waiting: list[PendingAck] = []
        written: list[tuple[int, bool, TopicPartition]] = []
        for m in markers:
            for t in m["topics"]:
                for index in t["partition_indexes"]:
                    tp = TopicPartition(t["name"], index)
                    out = results[(tp.topic, index)] = {"index": index, "error_code": 0, "base_offset": -1}
                    try:
                        partition = self.leader(tp)
                        offset = partition.write_marker(m["producer_id"], m["producer_epoch"],
                                                        m["transaction_result"], m["coordinator_epoch"])
                        self.on_append(partition)
                        if partition.high_watermark <= offset:
                            waiting.append(PendingAck(partition, offset + 1, out))
                        written.append((m["producer_id"], m["transaction_result"], tp))
                    except errors.KafkaError as exc:
                        out["error_code"] = exc.code
                    except Exception:
                        log.exception("marker for %s failed", tp)
                        out["error_code"] = errors.UnknownServerError.code
        if waiting:
            await self.wait_for_isr({}, waiting, self.config.request_timeout_ms)
        for producer_id, commit, tp in written:
            for listener in self.marker_listeners:
                await listener(producer_id, commit, tp)
        return {key: out["error_code"] for key, out in results.items()}
