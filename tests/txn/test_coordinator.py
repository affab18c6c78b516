"""The transaction coordinator's state machine over an in-memory __transaction_state (the append
function keeps the batches, as the log would) and a marker sender that records what it was asked."""
from __future__ import annotations

import asyncio
import struct

from kbroker import errors
from kbroker.coordinator.transaction import state_log
from kbroker.coordinator.transaction.coordinator import TransactionCoordinator
from kbroker.coordinator.transaction.state_log import TxnMetadata, TxnState


class Harness:
    def __init__(self, partitions: int = 1) -> None:
        self.batches: dict[int, list[bytes]] = {}
        self.markers: list[tuple[int, int, bool, int, set]] = []
        self.now = 1_000
        self.pids = iter(range(4000, 5000))
        self.coordinator = self._new()
        for p in range(partitions):
            self.coordinator.load_partition(p, 3, [])

    def _new(self) -> TransactionCoordinator:
        return TransactionCoordinator(1, self.append, lambda: next(self.pids), self.send_markers,
                                      lambda group: 7, clock=lambda: self.now)

    def append(self, partition: int, batch: bytearray) -> int:
        self.batches.setdefault(partition, []).append(bytes(batch))
        return len(self.batches[partition]) - 1

    async def send_markers(self, pid, epoch, commit, coordinator_epoch, partitions) -> None:
        self.markers.append((pid, epoch, commit, coordinator_epoch, partitions))

    def reload(self) -> TransactionCoordinator:
        self.coordinator = self._new()
        self.coordinator.load_partition(0, 4, list(self.batches.get(0, [])))
        return self.coordinator


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_state_log_value_bytes_as_kafka_lays_them_out():
    meta = TxnMetadata("t", 4000, 2, 60000, TxnState.ONGOING, {("a", 1), ("a", 0)}, 5, 9)
    expected = (struct.pack(">hqhib", 0, 4000, 2, 60000, 1)
                + struct.pack(">i", 1) + struct.pack(">h", 1) + b"a" + struct.pack(">iii", 2, 0, 1)
                + struct.pack(">qq", 9, 5))
    assert state_log.encode_value(meta) == expected
    assert state_log.decode_value("t", expected) == meta
    empty = TxnMetadata("t", 4000, 3, 60000, TxnState.EMPTY, set(), -1, 10)
    assert state_log.encode_value(empty)[17:21] == struct.pack(">i", -1)  # null partitions
    assert state_log.encode_key("t") == b"\x00\x00\x00\x01t"
    assert state_log.decode_key(state_log.encode_key("tx-1")) == "tx-1"


def test_init_commit_abort_and_retries():
    async def run():
        h = Harness()
        c = h.coordinator
        code, pid, epoch = await c.init_producer_id("tx", 60000)
        assert (code, pid, epoch) == (0, 4000, 0)
        assert await c.add_partitions("tx", pid, epoch, {("t", 0)}) == 0
        assert await c.add_offsets("tx", pid, epoch, "g") == 0
        assert c.txns["tx"].state is TxnState.ONGOING
        assert c.txns["tx"].partitions == {("t", 0), ("__consumer_offsets", 7)}
        assert await c.end_txn("tx", pid, epoch, True) == 0
        await settle()
        assert h.markers == [(4000, 0, True, 3, {("t", 0), ("__consumer_offsets", 7)})]
        assert c.txns["tx"].state is TxnState.COMPLETE_COMMIT and not c.txns["tx"].partitions
        assert await c.end_txn("tx", pid, epoch, True) == 0  # a retry
        assert await c.end_txn("tx", pid, epoch, False) == errors.InvalidTxnStateError.code
        assert await c.add_partitions("tx", pid, epoch, {("t", 1)}) == 0
        assert await c.end_txn("tx", pid, epoch, False) == 0
        await settle()
        assert h.markers[-1][2] is False and c.txns["tx"].state is TxnState.COMPLETE_ABORT
        assert await c.init_producer_id("tx", 60000) == (0, 4000, 1)
    asyncio.run(run())


def test_a_new_instance_fences_the_old_one_and_aborts_its_transaction():
    async def run():
        h = Harness()
        c = h.coordinator
        _, pid, epoch = await c.init_producer_id("tx", 60000)
        assert await c.add_partitions("tx", pid, epoch, {("t", 0)}) == 0
        assert (await c.init_producer_id("tx", 60000))[0] == errors.ConcurrentTransactionsError.code
        await settle()
        assert h.markers == [(pid, epoch + 1, False, 3, {("t", 0)})]  # aborted with the bumped epoch
        code, pid2, epoch2 = await c.init_producer_id("tx", 60000)
        assert (code, pid2, epoch2) == (0, pid, epoch + 2)
        assert await c.add_partitions("tx", pid, epoch, {("t", 1)}) == errors.ProducerFencedError.code
        assert await c.end_txn("tx", pid, epoch, True) == errors.ProducerFencedError.code
        assert await c.add_partitions("tx", 999, epoch2, {("t", 1)}) == errors.InvalidProducerIdMappingError.code
    asyncio.run(run())


def test_timed_out_transactions_are_aborted():
    async def run():
        h = Harness()
        c = h.coordinator
        _, pid, epoch = await c.init_producer_id("tx", 1000)
        await c.add_partitions("tx", pid, epoch, {("t", 0)})
        h.now += 500
        assert c.abort_timed_out() == 0
        h.now += 600
        assert c.abort_timed_out() == 1
        await settle()
        assert c.txns["tx"].state is TxnState.COMPLETE_ABORT and c.txns["tx"].producer_epoch == epoch + 1
        assert await c.end_txn("tx", pid, epoch, True) == errors.ProducerFencedError.code
    asyncio.run(run())


def test_state_is_rebuilt_from_the_log_and_a_prepared_commit_completes():
    async def run():
        h = Harness()
        c = h.coordinator
        _, pid, epoch = await c.init_producer_id("tx", 60000)
        await c.add_partitions("tx", pid, epoch, {("t", 0)})
        h.markers.clear()

        async def never(*args):  # the coordinator dies before its markers are out
            await asyncio.sleep(3600)
        c._send_markers = never
        assert await c.end_txn("tx", pid, epoch, True) == 0
        c.shutdown()
        again = h.reload()  # the next leader of the state partition
        assert again.txns["tx"].state is TxnState.PREPARE_COMMIT
        await settle()
        assert h.markers == [(pid, epoch, True, 4, {("t", 0)})]
        assert again.txns["tx"].state is TxnState.COMPLETE_COMMIT
    asyncio.run(run())


def test_requests_for_ids_this_broker_does_not_own():
    async def run():
        h = Harness(partitions=0)
        assert (await h.coordinator.init_producer_id("tx", 60000))[0] == errors.NotCoordinatorError.code
        h.coordinator.load_partition(0, 1, [])
        assert (await h.coordinator.init_producer_id("tx", 0))[0] == errors.InvalidTransactionTimeoutError.code
        assert (await h.coordinator.init_producer_id("tx", 10**9))[0] == errors.InvalidTransactionTimeoutError.code
    asyncio.run(run())


class FakeTimer:
    def __init__(self) -> None:
        self.due: dict[int, tuple[int, object]] = {}
        self.next = 0

    def add(self, expire_ms, callback):
        self.next += 1
        self.due[self.next] = (expire_ms, callback)
        return self.next

    def cancel(self, handle) -> None:
        self.due.pop(handle, None)

    def fire_until(self, now: int) -> None:
        for handle, (expire, callback) in sorted(self.due.items()):
            if expire <= now:
                del self.due[handle]
                callback()


def test_a_transaction_deadline_on_the_timer_aborts_it_on_time():
    async def run():
        h = Harness()
        timer = h.coordinator.timer = FakeTimer()
        c = h.coordinator
        _, pid, epoch = await c.init_producer_id("tx", 1000)
        await c.add_partitions("tx", pid, epoch, {("t", 0)})
        await c.add_partitions("tx", pid, epoch, {("t", 1)})  # still the same transaction: one deadline
        assert [expire for expire, _ in timer.due.values()] == [h.now + 1001]
        timer.fire_until(h.now + 1000)
        assert c.txns["tx"].state is TxnState.ONGOING
        h.now += 1001
        timer.fire_until(h.now)
        await settle()
        assert c.txns["tx"].state is TxnState.COMPLETE_ABORT and c.txns["tx"].producer_epoch == epoch + 1
        # a transaction that ends in time leaves no deadline behind
        _, pid, epoch = await c.init_producer_id("tx", 1000)
        await c.add_partitions("tx", pid, epoch, {("t", 0)})
        assert await c.end_txn("tx", pid, epoch, True) == 0
        await settle()
        assert timer.due == {}
    asyncio.run(run())


def test_a_fenced_coordinator_records_no_completion():
    """A partition answering TRANSACTION_COORDINATOR_FENCED / INVALID_PRODUCER_EPOCH makes the marker sender
    return False (kbroker/coordinator/transaction/binding.py): the transaction stays prepared here, as Kafka's
    abortSending; the newer coordinator completes it."""
    async def run():
        h = Harness()
        c = h.coordinator
        _, pid, epoch = await c.init_producer_id("tx", 60000)
        await c.add_partitions("tx", pid, epoch, {("t", 0)})

        async def fenced(*args):
            h.markers.append(args)
            return False
        c._send_markers = fenced
        written = len(h.batches[0])
        assert await c.end_txn("tx", pid, epoch, True) == 0
        await settle()
        assert len(h.markers) == 1 and c.txns["tx"].state is TxnState.PREPARE_COMMIT
        assert len(h.batches[0]) == written + 1  # PrepareCommit only, no CompleteCommit
    asyncio.run(run())
