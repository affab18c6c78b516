"""Each Kafka-stored commit's own timestamp, read from ``__consumer_offsets`` as Burrow's kafka cluster module
reads it (github.com/linkedin/Burrow, core/internal/consumer/kafka_client.go): OffsetFetch gives only the offset,
and Burrow's STALL (commits that keep coming without moving) needs the time of every commit.

The topic's records, as Kafka 2.8 writes them (GroupMetadataManager), big-endian:

    key   version int16: 0 or 1 an offset commit (group string, topic string, partition int32),
                         2 a group's metadata (ignored here)
    value version int16, then
          v0  offset int64, metadata string, timestamp int64
          v1  offset int64, metadata string, commit_timestamp int64, expire_timestamp int64
          v2  offset int64, metadata string, commit_timestamp int64
          v3  offset int64, leader_epoch int32, metadata string, commit_timestamp int64
    a null value (tombstone) deletes the key's commit

``CommitLog.read`` fetches each partition from where the last call stopped, at most ``max_rounds`` fetches per
call, so a long backlog is read over several samples instead of stalling one.
"""
from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kbroker.log import batches
from kbroker.protocol import API_KEYS
from kbroker.tools.client import Connection, KafkaApiError

OFFSETS_TOPIC = "__consumer_offsets"
FETCH = API_KEYS["Fetch"]
READ_COMMITTED = 1
OFFSET_OUT_OF_RANGE = 1
PARTITION_MAX_BYTES = 1 << 20

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

# (group, topic, partition)
CommitKey = tuple[str, str, int]


@dataclass(frozen=True)
class LoggedCommit:
    offset: int
    timestamp_ms: int


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def unpack(self, fmt: struct.Struct) -> int:
        (value,) = fmt.unpack_from(self.data, self.pos)
        self.pos += fmt.size
        return int(value)

    def string(self) -> str:
        n = self.unpack(_I16)
        if n < 0:
            return ""
        text = self.data[self.pos:self.pos + n]
        if len(text) != n:
            raise struct.error("string runs past the record")
        self.pos += n
        return text.decode()


def decode_offset_key(key: bytes) -> CommitKey | None:
    """The (group, topic, partition) of an offset commit's key; None for any other key (group metadata)."""
    r = _Reader(key)
    if r.unpack(_I16) not in (0, 1):
        return None
    group, topic = r.string(), r.string()
    return group, topic, r.unpack(_I32)


def decode_offset_value(value: bytes) -> LoggedCommit:
    """The offset and commit timestamp of an offset commit's value, v0 to v3; struct.error if unreadable."""
    r = _Reader(value)
    version = r.unpack(_I16)
    if not 0 <= version <= 3:
        raise struct.error(f"unknown offset commit value version {version}")
    offset = r.unpack(_I64)
    if version == 3:
        r.unpack(_I32)  # leader epoch
    r.string()  # metadata
    return LoggedCommit(offset, r.unpack(_I64))


class CommitLog:
    """The newest commit of every (group, topic, partition) seen in ``__consumer_offsets`` so far."""

    def __init__(self, max_rounds: int = 20) -> None:
        self.max_rounds = max_rounds
        self.commits: dict[CommitKey, LoggedCommit] = {}
        self._positions: dict[int, int] = {}  # partition of __consumer_offsets -> next offset to read

    def get(self, group: str, topic: str, partition: int) -> LoggedCommit | None:
        return self.commits.get((group, topic, partition))

    def read(self, conn: Connection, partitions: Iterable[int], log_starts: Mapping[int, int]) -> list[str]:
        """Fetch ``partitions`` (those ``conn``'s broker leads) up to their high watermark or ``max_rounds``
        fetches; ``log_starts`` is where to restart a partition whose position left the log. The failures, one
        line each (a connection failure raises ConnectError)."""
        wanted = sorted(set(partitions))
        problems: list[str] = []
        for _ in range(self.max_rounds):
            if not wanted:
                break
            response = conn.send(FETCH, self._request(wanted), max_version=12)
            if getattr(response, "error_code", 0):
                raise KafkaApiError(response.error_code, context=f"Fetch of {OFFSETS_TOPIC} at {conn.address}")
            behind = []
            for topic in response.responses:
                for p in topic.partitions:
                    problem = self.take(p, log_starts)
                    if problem:
                        problems.append(f"{OFFSETS_TOPIC}-{p.partition_index} at {conn.address}: {problem}")
                    elif self._positions.get(p.partition_index, 0) < p.high_watermark:
                        behind.append(p.partition_index)
            wanted = behind
        return problems

    def _request(self, partitions: list[int]) -> dict[str, Any]:
        return {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 8 * PARTITION_MAX_BYTES,
                "isolation_level": READ_COMMITTED, "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": OFFSETS_TOPIC, "partitions": [
                    {"partition": p, "current_leader_epoch": -1, "fetch_offset": self._positions.get(p, 0),
                     "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": PARTITION_MAX_BYTES}
                    for p in partitions]}],
                "forgotten_topics_data": [], "rack_id": ""}

    def take(self, p: Any, log_starts: Mapping[int, int]) -> str | None:
        """Apply one partition's Fetch answer (its records from the last position on); a problem's text, or None."""
        index = p.partition_index
        if p.error_code == OFFSET_OUT_OF_RANGE:
            start = getattr(p, "log_start_offset", -1)
            self._positions[index] = start if start >= 0 else log_starts.get(index, 0)
            return None
        if p.error_code:
            return str(KafkaApiError(p.error_code))
        position = self._positions.get(index, 0)
        aborted = {a.producer_id: a.first_offset for a in (getattr(p, "aborted_transactions", None) or [])}
        in_aborted: set[int] = set()  # producers inside an aborted transaction here (Kafka's read_committed)
        try:
            for batch in batches.iter_batches(bytes(p.records or b"")):
                h = batch.header
                if h.last_offset < position:
                    continue
                first, position = position, h.last_offset + 1
                if h.is_transactional and aborted.get(h.producer_id, h.base_offset + 1) <= h.base_offset:
                    aborted.pop(h.producer_id)
                    in_aborted.add(h.producer_id)
                if h.is_control:
                    in_aborted.discard(h.producer_id)
                elif not (h.is_transactional and h.producer_id in in_aborted):
                    self._apply(batch, h.base_offset, first)
        except (batches.CorruptBatchError, struct.error, UnicodeDecodeError) as exc:
            return f"unreadable records after offset {position}: {exc}"
        finally:
            self._positions[index] = position
        return None

    def _apply(self, batch: batches.Batch, base_offset: int, first: int) -> None:
        """The batch's commits from offset ``first`` on (a fetch may start inside a batch)."""
        for _, _, delta, _, key, value in batch.records():
            if key is None or base_offset + delta < first:
                continue
            which = decode_offset_key(key)
            if which is None:
                continue
            if value is None:
                self.commits.pop(which, None)
            else:
                self.commits[which] = decode_offset_value(value)
