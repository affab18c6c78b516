"""Incremental fetch sessions (KIP-227).

A client opens a session with (session_id 0, epoch 0) and gets an id; later requests name the
session and the next epoch, list only partitions that changed, and list forgotten ones. The
response of an incremental request holds only partitions with something new: records, an error,
or a changed high watermark, last stable or log start offset. (session_id 0, epoch -1) is a plain
full fetch with no session.

As Kafka's FetchManager: a full request (epoch 0 or -1) naming a session closes that session, known
or not, and epoch 0 opens a new one. Clients rely on it: kafka-python answers a lost connection
by sending (its old id, epoch 0), and must get a new session, not an error it would repeat forever.
Ids are random, so that an id a client kept from before a broker restart does not name another
client's new session.
"""
from __future__ import annotations

import random
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from kbroker import errors
from kbroker.log import TopicPartition
from kbroker.replication.quiet import QuietPartitions, QuietRegistry

INITIAL_EPOCH = 0
FINAL_EPOCH = -1


@dataclass
class SessionPartition:
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    # what the client was last told; a change means the partition goes into the next response
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1


@dataclass
class FetchSession:
    session_id: int
    epoch: int
    partitions: OrderedDict[tuple[str, int], SessionPartition] = field(default_factory=OrderedDict)
    last_used: float = 0.0
    # a follower's session: the partitions its incremental fetches need not read (kbroker.replication.quiet)
    quiet: QuietPartitions | None = None

    def quiet_partitions(self, replica_id: int, registry: QuietRegistry) -> QuietPartitions:
        if self.quiet is None or self.quiet.replica_id != replica_id:
            self.close()
            self.quiet = QuietPartitions(replica_id, registry, (TopicPartition(t, p) for t, p in self.partitions))
        return self.quiet

    def close(self) -> None:
        if self.quiet is not None:
            self.quiet.close()


class FetchSessionCache:
    def __init__(self, max_sessions: int = 1000) -> None:
        self.sessions: dict[int, FetchSession] = {}
        self.max_sessions = max_sessions
        self._random = random.SystemRandom()

    def _new_id(self) -> int:
        while True:
            session_id = self._random.randint(1, 2**31 - 1)
            if session_id not in self.sessions:
                return session_id

    def resolve(self, session_id: int, epoch: int, wanted: list[tuple[str, int, int, int, int]],
                forgotten: list[tuple[str, int]]) -> tuple[FetchSession | None, bool]:
        """Returns (session or None, incremental?). ``wanted``: (topic, partition, fetch offset,
        max bytes, current leader epoch). Raises FetchSessionIdNotFound / InvalidFetchSessionEpoch."""
        now = time.monotonic()
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):  # a full request
            if session_id != 0:
                closed = self.sessions.pop(session_id, None)  # any session it names is closed
                if closed is not None:
                    closed.close()
            if epoch == FINAL_EPOCH:
                return None, False
            new = FetchSession(self._new_id(), 1, last_used=now)
            for t, p, off, mb, le in wanted:
                new.partitions[(t, p)] = SessionPartition(off, mb, le)
            self._evict_if_full()
            self.sessions[new.session_id] = new
            return new, False
        session = self.sessions.get(session_id)
        if session is None:
            raise errors.FetchSessionIdNotFoundError(f"fetch session {session_id} is unknown")
        if epoch != session.epoch:
            raise errors.InvalidFetchSessionEpochError(
                f"fetch session {session_id} expects epoch {session.epoch}, got {epoch}")
        for key in forgotten:
            session.partitions.pop(key, None)
        if session.quiet is not None and forgotten:
            session.quiet.forget([TopicPartition(t, p) for t, p in forgotten])
        for t, p, off, mb, le in wanted:
            entry = session.partitions.get((t, p))
            if entry is None:
                session.partitions[(t, p)] = SessionPartition(off, mb, le)
                if session.quiet is not None:
                    session.quiet.join((TopicPartition(t, p),))
            else:
                entry.fetch_offset, entry.max_bytes, entry.current_leader_epoch = off, mb, le
        session.epoch = 1 if session.epoch == 2**31 - 1 else session.epoch + 1
        session.last_used = now
        return session, True

    def _evict_if_full(self) -> None:
        if len(self.sessions) >= self.max_sessions:
            oldest = min(self.sessions.values(), key=lambda s: s.last_used)
            del self.sessions[oldest.session_id]
            oldest.close()
