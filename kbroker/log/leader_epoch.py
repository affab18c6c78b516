"""The leader epoch cache of one partition: which leader epoch wrote which offsets.

Each entry (epoch, start offset) says that ``epoch`` wrote the log from ``start offset`` up to the
next entry's start offset (the last one: up to the log end). Followers ask the leader for the end
offset of their latest epoch (OffsetsForLeaderEpoch) to find where their log diverges, and
truncate there instead of at the high watermark, as in Kafka since KIP-101/KIP-279.

Kept in ``<partition dir>/leader-epoch-checkpoint`` in Kafka's format, so a data directory
written by Kafka reads the same: a version line (0), a count line, then one ``epoch start_offset``
line per entry, each ending in ``\\n``. The file is rewritten whole (temporary file, fsync,
rename, directory fsync) on every change; changes happen once per epoch, not per append.

Semantics follow Kafka's LeaderEpochFileCache (2.8): see ``assign`` and ``end_offset_for``.
Not thread-safe: one event loop owns a partition's log.
"""
from __future__ import annotations

import bisect
import logging
from collections.abc import Iterable
from pathlib import Path

from kbroker.log.checkpoint import VERSION, entry_lines, write_durably

log = logging.getLogger(__name__)

CHECKPOINT_NAME = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class MalformedEpochCheckpointError(ValueError):
    pass


def parse_checkpoint(text: str, path: Path | str = CHECKPOINT_NAME) -> list[tuple[int, int]]:
    """Entries of a leader-epoch-checkpoint file's text; raises MalformedEpochCheckpointError.
    An empty file holds no entries (Kafka creates the file empty before its first write)."""
    if text == "":
        return []
    entries: list[tuple[int, int]] = []
    for lineno, (first, second) in entry_lines(text, path, "epoch start_offset", MalformedEpochCheckpointError):
        line = f"{first} {second}"
        try:
            epoch, start = int(first), int(second)
        except ValueError:
            raise MalformedEpochCheckpointError(f"{path}:{lineno}: expected integers in {line!r}") from None
        if epoch < 0 or start < 0:
            raise MalformedEpochCheckpointError(f"{path}:{lineno}: negative epoch or offset in {line!r}")
        if entries and (epoch <= entries[-1][0] or start < entries[-1][1]):
            raise MalformedEpochCheckpointError(f"{path}:{lineno}: entry {line!r} does not follow {entries[-1]} "
                                                "in order")
        entries.append((epoch, start))
    return entries


def format_checkpoint(entries: Iterable[tuple[int, int]]) -> bytes:
    entries = list(entries)
    lines = [str(VERSION), str(len(entries))] + [f"{epoch} {start}" for epoch, start in entries]
    return ("\n".join(lines) + "\n").encode()


class LeaderEpochCache:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.entries: list[tuple[int, int]] = []
        # False when the file was missing or unreadable: the owner then rebuilds from the log.
        self.loaded = False
        self._written = False  # by this cache (or read from disk)
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return
        except (OSError, UnicodeDecodeError) as exc:
            log.warning("cannot read %s, starting with an empty leader epoch cache: %s", self.path, exc)
            return
        try:
            self.entries = parse_checkpoint(text, self.path)
        except MalformedEpochCheckpointError as exc:
            log.warning("malformed leader epoch checkpoint, starting with an empty cache: %s", exc)
            return
        self.loaded = self._written = True

    def __repr__(self) -> str:
        return f"LeaderEpochCache({self.path}, {self.entries})"

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else UNDEFINED_EPOCH

    @property
    def latest_start_offset(self) -> int:
        return self.entries[-1][1] if self.entries else UNDEFINED_EPOCH_OFFSET

    @property
    def earliest_start_offset(self) -> int:
        return self.entries[0][1] if self.entries else UNDEFINED_EPOCH_OFFSET

    # -- changes -----------------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; returns whether the cache changed
        (the file is rewritten then). As Kafka: a negative epoch or offset is ignored (Kafka's
        callers skip batches without an epoch); the latest epoch again at the same or a later
        offset changes nothing; otherwise every entry from the end whose epoch is >= ``epoch`` or
        whose start offset is >= ``start_offset`` is removed first, so the entries stay strictly
        ascending in both and describe the log as it now is (a lower epoch appended after higher
        ones means the later entries no longer describe the log)."""
        if not self._assign(epoch, start_offset):
            return False
        self._write()
        return True

    def _assign(self, epoch: int, start_offset: int) -> bool:
        if epoch < 0 or start_offset < 0:
            return False
        if self.entries:
            last_epoch, last_start = self.entries[-1]
            if epoch == last_epoch and start_offset >= last_start:
                return False
        removed = []
        while self.entries and (self.entries[-1][0] >= epoch or self.entries[-1][1] >= start_offset):
            removed.append(self.entries.pop())
        if len(removed) > 1 or (removed and removed[0][1] != start_offset):
            # Removing one entry that starts at the same offset is routine (an epoch that wrote nothing).
            log.warning("%s: new entry (%d, %d) removed conflicting entries %s",
                        self.path, epoch, start_offset, removed[::-1])
        self.entries.append((epoch, start_offset))
        return True

    def truncate_from_end(self, end_offset: int) -> bool:
        """Remove every entry starting at or after ``end_offset`` (the log was truncated there)."""
        if end_offset < 0 or not self.entries or self.entries[-1][1] < end_offset:
            return False
        while self.entries and self.entries[-1][1] >= end_offset:
            self.entries.pop()
        self._write()
        return True

    def truncate_from_start(self, start_offset: int) -> bool:
        """The log now starts at ``start_offset``: entries starting at or before it are removed,
        except that the last of them is kept with its start moved up to ``start_offset`` (its
        epoch still wrote the offsets from there)."""
        i = bisect.bisect_right(self.entries, start_offset, key=lambda entry: entry[1])
        if i == 0:
            return False
        epoch = self.entries[i - 1][0]
        new = [(epoch, start_offset)] + self.entries[i:]
        if new == self.entries:
            return False
        self.entries = new
        self._write()
        return True

    def clear(self) -> None:
        """Remove every entry (and write the empty file)."""
        self.entries = []
        self._write()

    def rebuild(self, pairs: Iterable[tuple[int, int]]) -> None:
        """Reset from (partition_leader_epoch, base_offset) of every batch in offset order;
        batches without an epoch (< 0) are skipped. Writes the file once (nothing for a new log)."""
        self.entries = []
        for epoch, base_offset in pairs:
            self._assign(epoch, base_offset)
        if self.entries or self.path.exists():
            # a new log has nothing to write (no file reads as empty): its first epoch writes the file
            self._write()
        self.loaded = True

    # -- queries -----------------------------------------------------------------------------

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch: (the largest epoch <= ``epoch``, the offset where it ended).

        As Kafka's endOffsetFor: (-1, -1) for the undefined epoch; the latest epoch ends at the
        log end offset; otherwise the end is the start of the first epoch above ``epoch`` (none
        above: (-1, -1)). An ``epoch`` below every cached one answers (``epoch``, start of the
        first cached epoch): that data is gone, and the follower truncates to where the leader's
        known history begins."""
        if epoch == UNDEFINED_EPOCH:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if self.entries and self.entries[-1][0] == epoch:
            return epoch, log_end_offset
        i = bisect.bisect_right(self.entries, epoch, key=lambda entry: entry[0])  # first entry above
        if i == len(self.entries):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        higher_start = self.entries[i][1]
        if i == 0:
            return epoch, higher_start
        return self.entries[i - 1][0], higher_start

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch that wrote ``offset`` as far as the cache knows (-1 when before every entry)."""
        i = bisect.bisect_right(self.entries, offset, key=lambda entry: entry[1])
        return self.entries[i - 1][0] if i else UNDEFINED_EPOCH

    # -- file --------------------------------------------------------------------------------

    def _write(self) -> None:
        # The first entry of a log that never had the file (a new replica's first epoch) is written without
        # fsyncs (two per write: 1,000 new partitions spent most of a LeaderAndIsr's second on them): a crash
        # leaves no file or an empty one, and the log loader rebuilds a missing or malformed file from the
        # batches' epochs, which is what a lost entry described (an epoch that wrote nothing is no entry then,
        # as in Kafka's rebuild). Every later write is durable.
        first = not self._written and len(self.entries) <= 1
        write_durably(self.path, format_checkpoint(self.entries), sync=not first)
        self._written = True
