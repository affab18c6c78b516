"""Idempotent-producer state of one partition: Kafka's sequence checks (KIP-98).

Per producer id: its epoch and the last 5 batches (first/last sequence, first/last offset). A batch
is accepted when its first sequence follows the last one (INT32_MAX wraps to 0); a retry of one of
the last 5 batches is a duplicate, acknowledged with its original offsets and not written again;
anything else is OUT_OF_ORDER_SEQUENCE_NUMBER; an older epoch is INVALID_PRODUCER_EPOCH. A broker
with no state for a producer accepts any sequence, as Kafka 2.8 does.

Transactions (KIP-98): a producer's first transactional batch opens its transaction at that
offset; the commit or abort marker closes it. The first offset of the oldest open transaction
bounds the last stable offset (what read_committed consumers may see); aborted transactions are
remembered (producer id, first offset, marker offset) so that Fetch can tell read_committed
consumers which batches to skip (Kafka's .txnindex, held in memory here).

When a log is opened (see Partition) the state comes from its latest producer snapshot
(``producer_snapshot``, Kafka's format: one batch per producer) with the windows refilled from the
log below it (``restore_windows``) and the batches after it replayed; without one, from every batch
header.
"""
from __future__ import annotations

import collections
from collections.abc import Iterable
from dataclasses import dataclass, field

from kbroker import errors
from kbroker._core import records

INT32_MAX = (1 << 31) - 1
MAX_CACHED_BATCHES = 5


@dataclass(frozen=True)
class BatchMetadata:
    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass
class ProducerEntry:
    epoch: int
    coordinator_epoch: int = -1  # of the last marker that closed one of its transactions here
    batches: collections.deque[BatchMetadata] = field(
        default_factory=lambda: collections.deque(maxlen=MAX_CACHED_BATCHES))

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else -1

    def duplicate_of(self, first_sequence: int, last_sequence: int) -> BatchMetadata | None:
        for batch in self.batches:
            if batch.first_sequence == first_sequence and batch.last_sequence == last_sequence:
                return batch
        return None


def next_sequence(sequence: int) -> int:
    return 0 if sequence == INT32_MAX else sequence + 1


@dataclass(frozen=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int  # the abort marker's offset


class ProducerStateManager:
    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}
        self.ongoing: dict[int, int] = {}  # producer id -> first offset of its open transaction
        self.aborted: list[AbortedTxn] = []  # in marker order

    # -- transactions ------------------------------------------------------------------------

    def begin(self, producer_id: int, first_offset: int) -> None:
        """A transactional batch at ``first_offset``: opens the producer's transaction if none is."""
        self.ongoing.setdefault(producer_id, first_offset)

    def complete(self, producer_id: int, epoch: int, marker_offset: int, commit: bool,
                 coordinator_epoch: int = -1) -> None:
        """A commit/abort marker at ``marker_offset`` closes the producer's transaction."""
        first = self.ongoing.pop(producer_id, None)
        if not commit and first is not None:
            self.aborted.append(AbortedTxn(producer_id, first, marker_offset))
        entry = self.producers.get(producer_id)
        if entry is None or epoch > entry.epoch:
            entry = self.producers[producer_id] = ProducerEntry(epoch, entry.coordinator_epoch if entry else -1)
        entry.coordinator_epoch = max(entry.coordinator_epoch, coordinator_epoch)

    def check_marker_epoch(self, producer_id: int, epoch: int, coordinator_epoch: int = -1) -> None:
        """As Kafka's appendEndTxnMarker: a marker of an older producer epoch is refused, and so is one
        from a transaction coordinator older than the one whose marker came last (a coordinator that
        lost its __transaction_state partition and has not noticed)."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if epoch < entry.epoch:
            raise errors.InvalidProducerEpochError(
                f"marker of producer {producer_id} has epoch {epoch}, older than the current {entry.epoch}")
        if coordinator_epoch < entry.coordinator_epoch:
            raise errors.TransactionCoordinatorFencedError(
                f"marker of producer {producer_id} from coordinator epoch {coordinator_epoch}, older than "
                f"{entry.coordinator_epoch}")

    def first_unstable_offset(self) -> int | None:
        return min(self.ongoing.values()) if self.ongoing else None

    def aborted_between(self, start: int, end: int) -> list[AbortedTxn]:
        """Aborted transactions a read of [start, end) may meet (Kafka's collectAbortedTxns:
        marker at or after ``start``, first offset before ``end``)."""
        return [a for a in self.aborted if a.last_offset >= start and a.first_offset < end]

    def check(self, producer_id: int, epoch: int, first_sequence: int, last_sequence: int) -> BatchMetadata | None:
        """Raise the Kafka error for a batch that must be refused; return the cached batch for a
        duplicate; None when the batch is to be appended."""
        if producer_id < 0:
            return None
        entry = self.producers.get(producer_id)
        if entry is None:
            return None
        if epoch < entry.epoch:
            raise errors.InvalidProducerEpochError(
                f"producer {producer_id} has epoch {epoch}, older than the current {entry.epoch}")
        if epoch > entry.epoch:
            if first_sequence != 0:
                raise errors.OutOfOrderSequenceNumberError(f"producer {producer_id} bumped its epoch to {epoch} "
                                                           f"but starts at sequence {first_sequence}, not 0")
            return None
        duplicate = entry.duplicate_of(first_sequence, last_sequence)
        if duplicate is not None:
            return duplicate
        if entry.batches and first_sequence != next_sequence(entry.last_sequence):
            raise errors.OutOfOrderSequenceNumberError(
                f"producer {producer_id} epoch {epoch}: expected sequence {next_sequence(entry.last_sequence)}, "
                f"got {first_sequence}")
        return None

    def update(self, producer_id: int, epoch: int, first_sequence: int, last_sequence: int,
               first_offset: int, last_offset: int, timestamp: int) -> None:
        if producer_id < 0:
            return
        entry = self.producers.get(producer_id)
        if entry is None or epoch != entry.epoch:  # a new epoch starts its sequences over; markers' fence stays
            entry = self.producers[producer_id] = ProducerEntry(epoch, entry.coordinator_epoch if entry else -1)
        entry.batches.append(BatchMetadata(first_sequence, last_sequence, first_offset, last_offset, timestamp))

    def restore_windows(self, earlier: Iterable[records.BatchHeader]) -> None:
        """Refill the windows of a state just read from a snapshot, which keeps one batch per producer (Kafka's
        format): ``earlier`` are the headers of batches stored below the snapshot's offset, in log order. A
        producer takes back those of its epoch whose sequences run without a gap up to its snapshot batch,
        MAX_CACHED_BATCHES in all, so that a retry in flight at a crash stays a duplicate after the restart
        instead of OUT_OF_ORDER_SEQUENCE_NUMBER (fatal to an idempotent producer)."""
        found: dict[int, list[BatchMetadata]] = {}
        for h in earlier:
            entry = self.producers.get(h.producer_id)
            if (entry is not None and len(entry.batches) == 1 and entry.epoch == h.producer_epoch
                    and not h.is_control and h.last_offset < entry.batches[0].first_offset):
                found.setdefault(h.producer_id, []).append(BatchMetadata(
                    h.base_sequence, h.last_sequence, h.base_offset, h.last_offset, h.max_timestamp))
        for producer_id, batches in found.items():
            entry = self.producers[producer_id]
            window = [entry.batches[0]]
            for batch in reversed(batches):
                if len(window) == MAX_CACHED_BATCHES or next_sequence(batch.last_sequence) != window[0].first_sequence:
                    break
                window.insert(0, batch)
            entry.batches.clear()
            entry.batches.extend(window)
