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

from kbroker import crashpoints
from kbroker.log.names import TopicPartition

log = logging.getLogger(__name__)

RECOVERY_POINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET = "log-start-offset-checkpoint"
HIGH_WATERMARK = "replication-offset-checkpoint"
CLEANER_OFFSET = "cleaner-offset-checkpoint"  # first dirty offset of each compacted log
VERSION = 0


class MalformedCheckpointError(ValueError):
    pass


def write_durably(path: Path, data: bytes, *, sync: bool = True) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old or the new file: write ``<name>.tmp``,
    fsync it, rename it over ``path``, fsync the directory (the new name must be durable before anything
    that trusts the file). ``sync=False`` skips both fsyncs, for a file whose loss the reader recovers from
    (a crash may leave no file, or an empty one, never another file's bytes)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        if crashpoints.ARMED:
            crashpoints.crash_point(f"checkpoint.{path.name}.tmp_torn",
                                    lambda rng: os.write(fd, crashpoints.torn_prefix(data, rng)))
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    if crashpoints.ARMED:
        crashpoints.crash_point(f"checkpoint.{path.name}.before_rename")
    os.replace(tmp, path)
    if crashpoints.ARMED:
        crashpoints.crash_point(f"checkpoint.{path.name}.before_dir_fsync")
    if not sync:
        return
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def entry_lines(text: str, path: Path | str, fields: str, error: type[ValueError]) -> list[tuple[int, list[str]]]:
    """The entries of a Kafka checkpoint file's text (version 0 line, count line, one entry per line):
    (line number, the line's ``len(fields.split())`` words) each. Raises ``error`` naming the file and line."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()

    def bad(lineno: int, why: str) -> ValueError:
        return error(f"{path}:{lineno}: {why}")

    if len(lines) < 2:
        raise bad(len(lines) + 1, "missing version or count line")
    if lines[0].strip() != str(VERSION):
        raise bad(1, f"unsupported version {lines[0].strip()!r}")
    try:
        expected = int(lines[1])
    except ValueError:
        raise bad(2, f"bad entry count {lines[1]!r}") from None
    if len(lines) - 2 != expected:
        raise bad(2, f"count says {expected} entries, file has {len(lines) - 2} lines")
    width = len(fields.split())
    out = []
    for lineno, line in enumerate(lines[2:], start=3):
        parts = line.split()
        if len(parts) != width:
            raise bad(lineno, f"expected '{fields}', got {line!r}")
        out.append((lineno, parts))
    return out


def write_checkpoint(path: Path, offsets: dict[TopicPartition, int]) -> None:
    lines = [str(VERSION), str(len(offsets))]
    lines += [f"{tp.topic} {tp.partition} {offset}" for tp, offset in sorted(offsets.items())]
    write_durably(path, ("\n".join(lines) + "\n").encode())


def read_checkpoint(path: Path) -> dict[TopicPartition, int]:
    """Entries of a checkpoint file; {} when it does not exist.
    Raises MalformedCheckpointError naming the file and line."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    entries: dict[TopicPartition, int] = {}
    for lineno, (topic, partition, offset) in entry_lines(text, path, "topic partition offset",
                                                           MalformedCheckpointError):
        try:
            tp = TopicPartition(topic, int(partition))
            value = int(offset)
        except ValueError:
            raise MalformedCheckpointError(f"{path}:{lineno}: expected integers in {topic} {partition} {offset!r}") \
                from None
        if tp in entries:
            raise MalformedCheckpointError(f"{path}:{lineno}: {tp} appears twice")
        entries[tp] = value
    return entries
