"""Kafka's offset checkpoint files (``recovery-point-offset-checkpoint``,
``log-start-offset-checkpoint``, ``replication-offset-checkpoint``, ``cleaner-offset-checkpoint``).

Format, as Kafka writes it: a version line (0), a count line, then one ``topic partition offset``
line per entry. Written to ``<name>.tmp``, fsynced, renamed over the old file, directory fsynced,
so a crash leaves either the old or the new file, never a mix.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path

from .names import TopicPartition

log = logging.getLogger(__name__)

RECOVERY_POINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET = "log-start-offset-checkpoint"
HIGH_WATERMARK = "replication-offset-checkpoint"
CLEANER_OFFSET = "cleaner-offset-checkpoint"  # first dirty offset of each compacted log
VERSION = 0


class MalformedCheckpointError(ValueError):
    pass


def write_checkpoint(path: Path, offsets: dict[TopicPartition, int]) -> None:
    lines = [str(VERSION), str(len(offsets))]
    lines += [f"{tp.topic} {tp.partition} {offset}" for tp, offset in sorted(offsets.items())]
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, ("\n".join(lines) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_checkpoint(path: Path) -> dict[TopicPartition, int]:
    """Entries of a checkpoint file; {} when it does not exist.
    Raises MalformedCheckpointError naming the file and line."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    lines = text.splitlines()

    def bad(lineno: int, why: str) -> MalformedCheckpointError:
        return MalformedCheckpointError(f"{path}:{lineno}: {why}")

    if len(lines) < 2:
        raise bad(len(lines) + 1, "missing version or count line")
    if lines[0].strip() != str(VERSION):
        raise bad(1, f"unsupported version {lines[0].strip()!r}")
    try:
        expected = int(lines[1])
    except ValueError:
        raise bad(2, f"bad entry count {lines[1]!r}") from None
    entries: dict[TopicPartition, int] = {}
    for lineno, line in enumerate(lines[2:], start=3):
        parts = line.split()
        if len(parts) != 3:
            raise bad(lineno, f"expected 'topic partition offset', got {line!r}")
        try:
            entries[TopicPartition(parts[0], int(parts[1]))] = int(parts[2])
        except ValueError:
            raise bad(lineno, f"expected integers in {line!r}") from None
    if len(entries) != expected:
        raise bad(2, f"count says {expected} entries, file has {len(entries)}")
    return entries
