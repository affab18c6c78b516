"""The quiet partitions of a follower's fetch session: what its incremental fetches need not read again.

A follower's fetch session (KIP-227) holds every partition it follows from this leader, thousands on a large
cluster, and each incremental Fetch names only those whose fetch offset moved. Kafka's leader still reads every
partition of the session at every fetch (``IncrementalFetchContext.foreachPartition``); here that cost about
5 µs a partition, 10 ms per fetch at 2,000, and with acks=all a follower fetches after every append.

A partition is quiet for the session when its last read found the follower in the ISR at the log end (the high
watermark there too) with nothing to send. Read again, it would answer nothing new until something it depends on
moves (the leadership and epoch, log end, high watermark, last stable offset, log start offset, log online, ISR),
and the incremental answer would leave it out (``kbroker.handlers.fetch``). So the session's fetches read only the
partitions they name and those awake (not quiet); a quiet one wakes when it moves: ``ReplicaManager.on_append``
(every append, high watermark move, leadership or ISR change, log moved or offline) tells the ``QuietRegistry``,
which wakes it in every session resting on it and checks the session's parked fetch (watched under the session
itself), which then reads it. What ``on_append`` does not see (a log start offset raised by retention or
DeleteRecords) a sweep finds: each fetch compares a few quiet partitions with what they were.

What a skipped read would still have done is record the follower caught up at this fetch (Kafka's
``updateFollowerFetchState``). The session is the clock for that: the follower's state rests on the session
(``FollowerState.rest_on``) and counts as caught up at its last fetch, until the partition wakes.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable

from kbroker.log import TopicPartition
from kbroker.protocol import message_types as msg
from kbroker.replication.partition import Partition

# (topic, partition, fetch offset, partition max bytes, current leader epoch): a session partition as a fetch reads it
Entry = tuple[str, int, int, int, int]
# What a quiet partition's read depends on, as it was (see the module's docstring).
_State = tuple[object, ...]
SWEEP = 32  # quiet partitions compared with what they were, per fetch


def _state(partition: Partition, fetch_offset: int) -> _State:
    plog = partition.log
    # the log end first: what moves most often, so a moved partition is told apart at the first element
    return (plog.log_end_offset, fetch_offset, plog.high_watermark, partition, partition.leader_id,
            partition.leader_epoch, partition.producer_state.first_unstable_offset(), plog.log_start_offset,
            plog.offline, partition.isr)


class QuietRegistry:
    """The sessions resting on each partition led here (one per replica manager)."""

    def __init__(self, check: Callable[[QuietPartitions], None]) -> None:
        self._check = check  # the purgatory's check: a session's parked fetch watches the session
        self._resting: dict[TopicPartition, set[QuietPartitions]] = {}

    def rest(self, tp: TopicPartition, session: QuietPartitions) -> None:
        resting = self._resting.get(tp)
        if resting is None:
            self._resting[tp] = {session}
        else:
            resting.add(session)

    def unrest(self, tp: TopicPartition, session: QuietPartitions) -> None:
        resting = self._resting.get(tp)
        if resting is not None:
            resting.discard(session)
            if not resting:
                del self._resting[tp]

    def moved(self, tp: TopicPartition) -> None:
        """Something a read of ``tp`` depends on may have moved: every session resting on it wakes it."""
        resting = self._resting.pop(tp, None)
        if resting is not None:
            for session in resting:
                session.woken(tp)
                self._check(session)

    def __len__(self) -> int:
        return len(self._resting)


class QuietPartitions:
    """One follower's fetch session's quiet partitions, those awake, and its clock (``last_fetch_ms``)."""

    def __init__(self, replica_id: int, registry: QuietRegistry, partitions: Iterable[TopicPartition]) -> None:
        self.replica_id = replica_id
        self.registry = registry
        self.last_fetch_ms = 0
        self._quiet: dict[TopicPartition, tuple[_State, Entry]] = {}
        self.awake: set[TopicPartition] = set(partitions)  # the session's partitions that are not quiet
        self._moved: dict[TopicPartition, Entry] = {}  # woken since the session's last fetch arrived
        self._sweep: list[TopicPartition] = []

    def __len__(self) -> int:
        return len(self._quiet)

    def join(self, tps: Iterable[TopicPartition]) -> None:
        """New partitions of the session: awake until a read finds them quiet."""
        self.awake.update(tps)

    def forget(self, tps: Iterable[TopicPartition]) -> None:
        """The session no longer holds ``tps``: its fetches stop standing for fetches of them."""
        for tp in tps:
            self._wake(tp)
            self.awake.discard(tp)
            self._moved.pop(tp, None)

    def close(self) -> None:
        """The session ended: nothing rests on it any more."""
        self.forget(list(self._quiet))

    def fetched(self, now_ms: int, lookup: Callable[[TopicPartition], Partition | None]) -> None:
        """A fetch of the session arrived (what woke before it is awake, and read by it): a few quiet partitions
        are compared with what they were (those that moved are for ``take_moved``), and the partitions still
        resting on the session are caught up as of now."""
        self._moved.clear()
        if not self._sweep:
            self._sweep = list(self._quiet)
        for _ in range(min(SWEEP, len(self._sweep))):
            tp = self._sweep.pop()
            was = self._quiet.get(tp)
            if was is not None:
                partition = lookup(tp)
                if partition is None or was[0] != _state(partition, was[1][2]):
                    self.woken(tp)
        self.last_fetch_ms = now_ms

    def still_quiet(self, tp: TopicPartition, fetch_offset: int, partition: Partition | None) -> bool:
        """Would a read of ``tp`` (named by a fetch) from ``fetch_offset`` answer nothing new? Once not, it wakes."""
        was = self._quiet.get(tp)
        if was is None:
            return False
        if partition is not None and was[0] == _state(partition, fetch_offset):
            return True
        self.woken(tp)
        return False

    def note(self, entry: Entry, tp: TopicPartition, partition: Partition,
             out: msg.FetchResponse_PartitionData) -> None:
        """A read of ``entry`` answered ``out``: quiet from now on if it found the follower with nothing to fetch."""
        plog = partition.log
        offset = entry[2]
        state = partition.followers.get(self.replica_id)
        if (out["records"] or out["error_code"] or state is None or offset != plog.log_end_offset
                or plog.high_watermark != offset or self.replica_id not in partition.isr
                or (tp not in self.awake and tp not in self._quiet)):  # forgotten meanwhile
            self._wake(tp)
            return
        self._quiet[tp] = (_state(partition, offset), entry)
        self.awake.discard(tp)
        self.registry.rest(tp, self)
        state.rest_on(self)

    def woken(self, tp: TopicPartition) -> None:
        """``tp`` moved: awake, and read by the next fetch (or by the parked one, ``take_moved``)."""
        entry = self._wake(tp)
        if entry is not None:
            self._moved[tp] = entry

    def take_moved(self) -> list[Entry]:
        """The partitions woken since the session's fetch arrived (while it was parked, or by the sweep): it reads
        them from now on."""
        moved = list(self._moved.values())
        self._moved.clear()
        return moved

    def _wake(self, tp: TopicPartition) -> Entry | None:
        was = self._quiet.pop(tp, None)
        if was is None:
            return None
        self.awake.add(tp)
        self.registry.unrest(tp, self)
        partition = was[0][3]
        assert isinstance(partition, Partition)
        state = partition.followers.get(self.replica_id)
        if state is not None:
            state.wake(self)
        return was[1]
