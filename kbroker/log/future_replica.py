"""A future replica: the copy of a partition's log that AlterReplicaLogDirs makes in another log dir of
the same broker, before it replaces the current log (Kafka's future log).

On disk, Kafka's names: the copy lives in ``<topic>-<partition>.<uuid>-future`` beside the target dir's
other logs; once it has caught up, the current log is renamed ``<topic>-<partition>.<uuid>-delete`` (the
same uuid, so the two name one move) and the copy takes the plain name. At start the log manager
resolves whatever a crash left (``resolve``): before the swap the copy is resumed, after it the move is
completed, so exactly one current log exists.

The copy itself: the owner's thread (the event loop) takes a ``plan`` of byte ranges of the current
log's segments, each with a duplicated descriptor (so that a roll, retention or a swap closing the
original cannot pull the file away), and a worker thread ``copy`` reads them and appends the whole
batches to the future log, which nothing else touches meanwhile.
"""
from __future__ import annotations

import os
import re
import shutil
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

from kbroker._core import records
from kbroker.crashpoints import crash_point
from kbroker.log.names import TopicPartition, validate_topic_name
from kbroker.log.partition_log import PartitionLog

FUTURE_SUFFIX = "-future"
DELETE_SUFFIX = "-delete"
ROUND_BYTES = 256 << 20  # planned at a time: the rest waits for the next round
COPY_CHUNK = 1 << 20  # read and appended at a time: the worker holds the GIL while it validates and writes one

_MOVING_RE = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)\.(?P<uid>[0-9a-f]{32})(?P<suffix>-future|-delete)$")


def new_uid() -> str:
    return uuid.uuid4().hex


def future_dir_name(tp: TopicPartition, uid: str) -> str:
    return f"{tp}.{uid}{FUTURE_SUFFIX}"


def delete_dir_name(tp: TopicPartition, uid: str) -> str:
    return f"{tp}.{uid}{DELETE_SUFFIX}"


@dataclass(frozen=True)
class MovingDir:
    """A ``-future`` or ``-delete`` directory."""
    tp: TopicPartition
    uid: str
    future: bool  # False: a ``-delete``
    path: Path


def parse_moving_dir(path: Path) -> MovingDir | None:
    found = _MOVING_RE.match(path.name)
    if found is None:
        return None
    try:
        validate_topic_name(found["topic"])
    except ValueError:
        return None
    tp = TopicPartition(found["topic"], int(found["partition"]))
    return MovingDir(tp, found["uid"], found["suffix"] == FUTURE_SUFFIX, path)


def uid_of(directory: Path) -> str:
    found = _MOVING_RE.match(directory.name)
    return found["uid"] if found is not None else new_uid()


# -- the copy ---------------------------------------------------------------------------------------


@dataclass
class CopyRange:
    fd: int        # a duplicate, owned by the range: closed by ``copy`` (or ``close_ranges``)
    start: int
    end: int


def plan(current: PartitionLog, offset: int, limit: int | None = None) -> list[CopyRange]:
    """What the future log lacks from ``offset`` (its log end) to the current log's written end: the rest
    of the segment holding ``offset``, then the later segments, up to about ``limit`` bytes (a round holds
    one descriptor per segment). Owner's thread only. Empty when caught up; raises OffsetOutOfRangeError
    below the current log start."""
    first = current.read(offset, 1, min_one_batch=True)
    if first is None:
        return []
    left = ROUND_BYTES if limit is None else limit
    ranges = []
    started = False
    for segment in current.segments:
        if not started:
            if segment.fd != first.fd:
                continue
            started, start = True, first.position
        else:
            start = 0
        if segment.size > start:
            ranges.append(CopyRange(os.dup(segment.fd), start, segment.size))
            left -= segment.size - start
            if left <= 0:
                break
    return ranges


def close_ranges(ranges: list[CopyRange]) -> None:
    for r in ranges:
        if r.fd >= 0:
            os.close(r.fd)
            r.fd = -1


def pending_bytes(ranges: list[CopyRange]) -> int:
    return sum(r.end - r.start for r in ranges)


def copy(future: PartitionLog, ranges: list[CopyRange], chunk: int = COPY_CHUNK,
         stop: threading.Event | None = None) -> int:
    """Append the whole batches of ``ranges`` to ``future`` (gaps of a compacted log kept); the bytes
    copied. Runs on a worker thread while the owner leaves ``future`` alone. A range cut short (the
    current log was truncated meanwhile) ends early; the owner then truncates the copy to match."""
    copied = 0
    try:
        for r in ranges:
            position, carry = r.start, b""
            while position < r.end and not (stop is not None and stop.is_set()):
                data = os.pread(r.fd, min(chunk, r.end - position), position)
                if not data:
                    break
                position += len(data)
                buf = carry + data if carry else data
                _, whole, status = records.scan_batches(buf, verify_crc=False)
                if status == 2:
                    raise OSError(f"{future.tp}: a corrupt batch frame in the current log at byte {position}")
                if whole:
                    future.append_as_follower(memoryview(buf)[:whole], allow_gaps=True)
                    copied += whole
                    crash_point("future.copied")
                carry = buf[whole:]
    finally:
        close_ranges(ranges)
    return copied


def remove_dir(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
