"""The transaction coordinator (Kafka's TransactionCoordinator, KIP-98): one state machine per
transactional id, kept in ``__transaction_state`` (the partition is the id's hash).

    InitProducerId  Empty/Complete* -> Empty with epoch + 1 (a new producer id when it is new);
                    Ongoing -> the old transaction is aborted with epoch + 1 (zombie fencing), the
                    caller retries (CONCURRENT_TRANSACTIONS) until that is done
    AddPartitions / AddOffsets   Empty/Ongoing/Complete* -> Ongoing with the partitions added
    EndTxn          Ongoing -> PrepareCommit/PrepareAbort (durable, then answered) -> markers to
                    every partition -> CompleteCommit/CompleteAbort
    timeout         an Ongoing transaction older than its timeout is aborted with epoch + 1: a
                    deadline on the timing wheel when it starts, and Kafka's periodic sweep
                    (``abort_timed_out``) for the ones a load brought in

Every transition is written to the log first; ``pending`` blocks a second one meanwhile
(CONCURRENT_TRANSACTIONS). A request with another producer id is INVALID_PRODUCER_ID_MAPPING, an
older epoch PRODUCER_FENCED.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any

from kbroker import errors
from kbroker.clock import wall_ms
from kbroker.coordinator.group.offsets_log import build_batch, is_awaitable, iter_batches
from kbroker.coordinator.transaction import state_log
from kbroker.coordinator.transaction.state_log import TxnMetadata, TxnState
from kbroker.timers import Timer

log = logging.getLogger(__name__)

MAX_EPOCH = 32767
NONE = 0
OFFSETS_TOPIC = "__consumer_offsets"

AppendFn = Callable[[int, bytearray], "int | Awaitable[int]"]
MarkersFn = Callable[[int, int, bool, int, set[tuple[str, int]]], Awaitable[bool | None]]  # False: fenced


class TransactionCoordinator:
    def __init__(self, num_partitions: int, append: AppendFn, next_producer_id: Callable[[], int],
                 send_markers: MarkersFn, offsets_partition_for: Callable[[str], int],
                 max_timeout_ms: int = 900000, clock: Callable[[], int] = wall_ms, timer: Timer | None = None) -> None:
        self.num_partitions = num_partitions
        self._append = append
        self._next_producer_id = next_producer_id
        self._send_markers = send_markers
        self._offsets_partition_for = offsets_partition_for
        self.max_timeout_ms = max_timeout_ms
        self.clock = clock
        self.txns: dict[str, TxnMetadata] = {}
        self.pending: set[str] = set()
        self.epochs: dict[int, int] = {}  # state partition -> coordinator epoch (its leader epoch)
        self.loading: set[int] = set()
        self._tasks: set[asyncio.Future[object]] = set()
        self.timer = timer  # add(expire_ms, callback) / cancel(handle), e.g. kbroker.timers.WheelTimer
        self._deadlines: dict[str, object] = {}
        # the epoch an InitProducerId bump replaced (Kafka's in-memory lastProducerEpoch): a retry of that bump,
        # whose answer was lost, gets the current epoch instead of being fenced
        self._bumped_from: dict[str, int] = {}

    # -- ownership --------------------------------------------------------------------------

    def partition_for(self, transactional_id: str) -> int:
        return state_log.partition_for(transactional_id, self.num_partitions)

    def load_partition(self, partition: int, coordinator_epoch: int,
                       batches: Iterable[bytes | bytearray | memoryview]) -> int:
        """Rebuild the transactions of ``partition`` from its log; unfinished ones resume."""
        self.unload_partition(partition)
        self.loading.add(partition)
        found: dict[str, TxnMetadata | None] = {}
        for data in batches:
            for batch in iter_batches(data):
                for key, value in batch.records:
                    txn_id = state_log.decode_key(key) if key is not None else None
                    if txn_id is None:
                        continue
                    found[txn_id] = None if value is None else state_log.decode_value(txn_id, value)
        for txn_id, meta in found.items():
            if meta is not None and meta.state is not TxnState.DEAD:
                self.txns[txn_id] = meta
        self.epochs[partition] = coordinator_epoch
        self.loading.discard(partition)
        for meta in list(self.txns.values()):  # Kafka completes what was prepared before the move
            if self.partition_for(meta.transactional_id) != partition:
                continue
            if meta.state is TxnState.ONGOING:
                self._schedule_timeout(meta)
            if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                self._spawn(self._complete(meta, meta.state is TxnState.PREPARE_COMMIT))
        log.info("__transaction_state-%d loaded: %d transactional ids", partition,
                 sum(1 for t in self.txns if self.partition_for(t) == partition))
        return len(found)

    def unload_partition(self, partition: int) -> None:
        self.epochs.pop(partition, None)
        for txn_id in [t for t in self.txns if self.partition_for(t) == partition]:
            del self.txns[txn_id]
            self.pending.discard(txn_id)
            self._bumped_from.pop(txn_id, None)
            self._cancel_timeout(txn_id)

    def _owner_error(self, transactional_id: str | None) -> int:
        if not transactional_id:
            return errors.InvalidRequestError.code
        partition = self.partition_for(transactional_id)
        if partition in self.loading:
            return errors.CoordinatorLoadInProgressError.code
        if partition not in self.epochs:
            return errors.NotCoordinatorError.code
        return NONE

    def _producer_txn(self, transactional_id: str, producer_id: int, epoch: int) -> tuple[int, TxnMetadata | None]:
        """(NONE, its metadata) when this coordinator owns ``transactional_id``, (producer_id, epoch)
        is its current producer and no transition is pending; else (the error code, None)."""
        code = self._owner_error(transactional_id)
        if code:
            return code, None
        meta = self.txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return errors.InvalidProducerIdMappingError.code, None
        if epoch != meta.producer_epoch:
            return errors.ProducerFencedError.code, None
        if meta.transactional_id in self.pending:
            return errors.ConcurrentTransactionsError.code, None
        return NONE, meta

    # -- requests ---------------------------------------------------------------------------

    async def init_producer_id(self, transactional_id: str, timeout_ms: int,
                               expected: tuple[int, int] | None = None) -> tuple[int, int, int]:
        """-> (error code, producer id, epoch). ``expected`` is the (producer id, epoch) a producer that
        already has one sends (InitProducerId v3+, KIP-360): anything but the current one is PRODUCER_FENCED,
        as Kafka's TransactionCoordinator.handleInitProducerId."""
        code = self._owner_error(transactional_id)
        if code:
            return code, -1, -1
        if not 0 < timeout_ms <= self.max_timeout_ms:
            return errors.InvalidTransactionTimeoutError.code, -1, -1
        meta = self.txns.get(transactional_id)
        if transactional_id in self.pending:
            return errors.ConcurrentTransactionsError.code, -1, -1
        if meta is not None and expected is not None and meta.producer_epoch >= 0:
            if expected[0] != meta.producer_id:
                return errors.ProducerFencedError.code, -1, -1
            if expected[1] != meta.producer_epoch:
                if expected[1] == self._bumped_from.get(transactional_id):
                    return NONE, meta.producer_id, meta.producer_epoch  # a retry of the bump already made
                return errors.ProducerFencedError.code, -1, -1
        now = self.clock()
        if meta is None:
            new = TxnMetadata(transactional_id, self._next_producer_id(), 0, timeout_ms, TxnState.EMPTY,
                              set(), -1, now)
        elif meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return errors.ConcurrentTransactionsError.code, -1, -1
        elif meta.state is TxnState.ONGOING:
            # a new instance of the producer: abort the old one's transaction with a bumped epoch
            self._spawn(self._abort(meta, bump_epoch=True))
            return errors.ConcurrentTransactionsError.code, -1, -1
        else:
            pid, epoch = meta.producer_id, meta.producer_epoch + 1
            if epoch >= MAX_EPOCH:
                pid, epoch = self._next_producer_id(), 0
            new = TxnMetadata(transactional_id, pid, epoch, timeout_ms, TxnState.EMPTY, set(), -1, now)
        code = await self._write(new)
        if code:
            return code, -1, -1
        if expected is not None and meta is not None and new.producer_id == meta.producer_id:
            self._bumped_from[transactional_id] = meta.producer_epoch  # a fresh producer's bump sets none
        else:
            self._bumped_from.pop(transactional_id, None)
        return NONE, new.producer_id, new.producer_epoch

    async def add_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                             partitions: set[tuple[str, int]]) -> int:
        code, meta = self._producer_txn(transactional_id, producer_id, epoch)
        if code:
            return code
        assert meta is not None
        if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT, TxnState.PREPARE_EPOCH_FENCE):
            return errors.ConcurrentTransactionsError.code
        if meta.state is TxnState.ONGOING and partitions <= meta.partitions:
            return NONE
        now = self.clock()
        current = meta.partitions if meta.state is TxnState.ONGOING else set()
        new = TxnMetadata(transactional_id, producer_id, epoch, meta.timeout_ms, TxnState.ONGOING,
                          current | partitions, meta.start_ms if meta.state is TxnState.ONGOING else now, now)
        return await self._write(new)

    async def add_offsets(self, transactional_id: str, producer_id: int, epoch: int, group_id: str) -> int:
        return await self.add_partitions(transactional_id, producer_id, epoch,
                                         {(OFFSETS_TOPIC, self._offsets_partition_for(group_id))})

    async def end_txn(self, transactional_id: str, producer_id: int, epoch: int, commit: bool) -> int:
        code, meta = self._producer_txn(transactional_id, producer_id, epoch)
        if code:
            return code
        assert meta is not None
        done, preparing = ((TxnState.COMPLETE_COMMIT, TxnState.PREPARE_COMMIT) if commit
                           else (TxnState.COMPLETE_ABORT, TxnState.PREPARE_ABORT))
        if meta.state is done:
            return NONE  # a retry of what already happened
        if meta.state is preparing:
            return errors.ConcurrentTransactionsError.code
        if meta.state is not TxnState.ONGOING:
            return errors.InvalidTxnStateError.code
        prepared = TxnMetadata(transactional_id, producer_id, epoch, meta.timeout_ms, preparing,
                               set(meta.partitions), meta.start_ms, self.clock())
        code = await self._write(prepared)
        if code:
            return code
        self._spawn(self._complete(prepared, commit))
        return NONE

    # -- transitions ------------------------------------------------------------------------

    async def _abort(self, meta: TxnMetadata, bump_epoch: bool) -> None:
        if bump_epoch:  # fencing: no epoch before this one may come back as a retry (Kafka's prepareFenceProducerEpoch)
            self._bumped_from.pop(meta.transactional_id, None)
        epoch = meta.producer_epoch + 1 if bump_epoch else meta.producer_epoch
        prepared = TxnMetadata(meta.transactional_id, meta.producer_id, min(epoch, MAX_EPOCH - 1), meta.timeout_ms,
                               TxnState.PREPARE_ABORT, set(meta.partitions), meta.start_ms, self.clock())
        if await self._write(prepared):
            return
        await self._complete(prepared, commit=False)

    async def _complete(self, prepared: TxnMetadata, commit: bool) -> None:
        """Write the markers (retried until every partition has its marker), then Complete*."""
        txn_id = prepared.transactional_id
        partition = self.partition_for(txn_id)
        coordinator_epoch = self.epochs.get(partition)
        if coordinator_epoch is None:
            return  # moved away: the new coordinator completes it when it loads
        self.pending.add(txn_id)
        try:
            written = await self._send_markers(prepared.producer_id, prepared.producer_epoch, commit,
                                               coordinator_epoch, set(prepared.partitions))
        finally:
            self.pending.discard(txn_id)
        if written is False or self.epochs.get(partition) != coordinator_epoch:
            return  # fenced by a newer coordinator or producer epoch, or moved: not ours to complete
        done = TxnMetadata(txn_id, prepared.producer_id, prepared.producer_epoch, prepared.timeout_ms,
                           TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT, set(),
                           prepared.start_ms, self.clock())
        code = await self._write(done)
        if code:
            log.warning("transaction %s: could not record its completion (error %d)", txn_id, code)

    async def _write(self, meta: TxnMetadata) -> int:
        """Append the new state; on success it becomes the current one."""
        txn_id = meta.transactional_id
        partition = self.partition_for(txn_id)
        epoch = self.epochs.get(partition)
        batch = build_batch([(state_log.encode_key(txn_id), state_log.encode_value(meta))], self.clock())
        self.pending.add(txn_id)
        try:
            result = self._append(partition, batch)
            if is_awaitable(result):
                await result
        except errors.KafkaError as exc:
            return _STORE_ERRORS.get(exc.code, exc.code)
        finally:
            self.pending.discard(txn_id)
        if self.epochs.get(partition) != epoch:
            return errors.NotCoordinatorError.code
        previous = self.txns.get(txn_id)
        self.txns[txn_id] = meta
        if meta.state is TxnState.ONGOING and (previous is None or previous.state is not TxnState.ONGOING):
            self._schedule_timeout(meta)
        elif meta.state is not TxnState.ONGOING:
            self._cancel_timeout(txn_id)
        return NONE

    def _schedule_timeout(self, meta: TxnMetadata) -> None:
        if self.timer is None:
            return
        self._cancel_timeout(meta.transactional_id)
        txn_id, start = meta.transactional_id, meta.start_ms
        self._deadlines[txn_id] = self.timer.add(start + meta.timeout_ms + 1, lambda: self._expire(txn_id, start))

    def _cancel_timeout(self, txn_id: str) -> None:
        handle = self._deadlines.pop(txn_id, None)
        if handle is not None and self.timer is not None:
            self.timer.cancel(handle)

    def _expire(self, txn_id: str, start_ms: int) -> None:
        self._deadlines.pop(txn_id, None)
        meta = self.txns.get(txn_id)
        if (meta is not None and meta.state is TxnState.ONGOING and meta.start_ms == start_ms
                and txn_id not in self.pending):
            log.info("transaction %s timed out after %d ms: aborting", txn_id, meta.timeout_ms)
            self._spawn(self._abort(meta, bump_epoch=True))

    def abort_timed_out(self) -> int:
        """Abort (with epoch + 1) every Ongoing transaction older than its timeout."""
        now = self.clock()
        count = 0
        for meta in list(self.txns.values()):
            if (meta.state is TxnState.ONGOING and meta.transactional_id not in self.pending
                    and meta.start_ms >= 0 and now - meta.start_ms > meta.timeout_ms):
                log.info("transaction %s timed out after %d ms: aborting", meta.transactional_id, meta.timeout_ms)
                self._spawn(self._abort(meta, bump_epoch=True))
                count += 1
        return count

    def _spawn(self, coro: Coroutine[Any, Any, object]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def shutdown(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        self.txns.clear()
        self.epochs.clear()


# What a failed write of the transaction log becomes for the client (Kafka's TransactionStateManager).
_STORE_ERRORS = {
    errors.UnknownTopicOrPartitionError.code: errors.CoordinatorNotAvailableError.code,
    errors.NotEnoughReplicasError.code: errors.CoordinatorNotAvailableError.code,
    errors.NotEnoughReplicasAfterAppendError.code: errors.CoordinatorNotAvailableError.code,
    errors.RequestTimedOutError.code: errors.CoordinatorNotAvailableError.code,
    errors.NotLeaderOrFollowerError.code: errors.NotCoordinatorError.code,
    errors.NotCoordinatorError.code: errors.NotCoordinatorError.code,
    errors.KafkaStorageError.code: errors.NotCoordinatorError.code,
}
