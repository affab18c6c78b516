"""The cleaner's swap on disk: how cleaned segment files replace the old ones, durably, and how
the next start finishes a swap a crash interrupted (Kafka's rules in Log.loadSegments).

The order (``SegmentSwaps.replace_segments``, a part of every ``PartitionLog``, drives it):
``<base>.log.cleaned`` and its indexes are renamed ``.swap`` (indexes first, so a ``.log.swap`` means
complete data); the old segments are renamed ``.deleted``; the ``.swap`` files get their final names.
Each step is made durable with a directory fsync before the next.
"""
from __future__ import annotations

import logging
import mmap
import os
from collections.abc import Callable
from pathlib import Path

from kbroker._core import records
from kbroker.crashpoints import crash_point
from kbroker.log.local_log import LocalLog
from kbroker.log.names import CLEANED_SUFFIX, LOG_SUFFIX, SWAP_SUFFIX, segment_paths
from kbroker.log.segment import Segment

log = logging.getLogger(__name__)


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def rename_segment_files(directory: Path, source: tuple[Path, Path, Path], target: tuple[Path, Path, Path],
                         step: Callable[[str], None], name: str) -> None:
    """Rename a segment's (log, offset index, time index) files ``source`` -> ``target``, the log
    file last, then fsync ``directory``. ``step(name + "-partial")`` runs after the first rename
    and ``step(name)`` at the end (crash tests stop there)."""
    for i in (1, 2, 0):
        os.rename(source[i], target[i])
        if i == 1:
            step(f"{name}-partial")
    fsync_dir(directory)
    step(name)


def remove_segment_files(directory: Path, base_offset: int, suffix: str = "", indexes_only: bool = False) -> None:
    """Unlink the files of the segment at ``base_offset`` (with ``suffix``); missing ones are fine."""
    paths = segment_paths(directory, base_offset, suffix)
    for path in paths[1:] if indexes_only else paths:
        path.unlink(missing_ok=True)


def complete_interrupted_swaps(directory: Path) -> set[int]:
    """At log load, before segments are opened: ``*.cleaned`` files are deleted (the swap had not
    begun); for each ``<base>.log.swap`` (its data was complete and synced before it got that
    name) every segment whose base offset lies in [base, next offset of the swap) is deleted and
    the swap renamed to ``<base>.log``; index ``.swap`` files are deleted (the indexes of swapped
    segments are rebuilt). Returns the base offsets of swapped-in segments, whose indexes the
    caller must rebuild."""
    swaps: list[int] = []
    leftovers: list[str] = []
    for entry in os.scandir(directory):
        name = entry.name
        if name.endswith(CLEANED_SUFFIX):
            os.unlink(entry.path)
        elif name.endswith(LOG_SUFFIX + SWAP_SUFFIX) and name.split(".", 1)[0].isdigit():
            swaps.append(int(name.split(".", 1)[0]))
        elif name.endswith(SWAP_SUFFIX):
            leftovers.append(entry.path)
    for path in leftovers:
        os.unlink(path)  # index swaps: rebuilt below or belonging to a swap that never completed
    if not swaps:
        return set()
    bases = sorted(int(e.name[:-len(LOG_SUFFIX)]) for e in os.scandir(directory)
                   if e.name.endswith(LOG_SUFFIX) and e.name[:-len(LOG_SUFFIX)].isdigit())
    for base in sorted(swaps):
        swap_log = segment_paths(directory, base, SWAP_SUFFIX)[0]
        next_offset = base
        size = swap_log.stat().st_size
        if size:
            with (open(swap_log, "rb") as f, mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ) as mm,
                  memoryview(mm) as view):
                headers, _, _ = records.scan_batches(view, verify_crc=False)
            if headers:
                next_offset = headers[-1].last_offset + 1
        for old in bases:
            if old == base or base <= old < next_offset:
                remove_segment_files(directory, old)
                log.info("%s: completing an interrupted cleaner swap: segment %d replaced", directory, old)
        remove_segment_files(directory, base, indexes_only=True)
        os.rename(swap_log, segment_paths(directory, base)[0])
    fsync_dir(directory)
    return set(swaps)


class SegmentSwaps(LocalLog):
    """The partition log's side of the swap: finding the segments the cleaner read, and replacing them."""

    def find_segments(self, old: list[Segment], sizes: list[int]) -> int | None:
        """Index of ``old`` in this log if those very segments are still there, consecutive,
        inactive and of these sizes; None otherwise (truncated, deleted or rolled away)."""
        first = next((i for i, seg in enumerate(self.segments) if seg is old[0]), None)
        if first is None or first + len(old) >= len(self.segments):
            return None
        current = self.segments[first:first + len(old)]
        if (any(a is not b for a, b in zip(current, old))
                or any(seg.active or seg.size != size for seg, size in zip(old, sizes))):
            return None
        return first

    def replace_segments(self, old: list[Segment], sizes: list[int],
                         fault: Callable[[str], None] | None = None) -> bool:
        """Swap the cleaner's ``<base>.log.cleaned`` (+ indexes, base = ``old[0]``'s) in for the
        consecutive inactive segments ``old``, whose sizes must still be ``sizes``; False (nothing
        done) when the log changed since. Kafka's order, each step made durable (directory fsync)
        before the next: cleaned -> .swap (indexes, then the log file: a ``.log.swap`` means
        complete data); old segments -> .deleted (removed after file.delete.delay.ms); .swap ->
        final names. ``complete_interrupted_swaps`` finishes whatever a crash interrupted.
        ``fault(step)`` is called after each step (crash tests)."""
        self._check_online()
        first = self.find_segments(old, sizes)
        if first is None:
            return False
        base = old[0].base_offset
        cleaned, swap, final = (segment_paths(self.directory, base, suffix)
                                for suffix in (CLEANED_SUFFIX, SWAP_SUFFIX, ""))
        step = fault or (lambda name: crash_point(f"swap.{name}"))
        try:
            step("cleaned")
            rename_segment_files(self.directory, cleaned, swap, step, "swap")
            now = self._clock()
            for n, segment in enumerate(old):
                segment.mark_deleted()
                self._pending_deletes.append((now + self.config.file_delete_delay_ms, segment))
                if n == 0:
                    step("deleted-partial")
            fsync_dir(self.directory)
            step("deleted")
            rename_segment_files(self.directory, swap, final, step, "final")
            segment = Segment(self.directory, base, self.config, self._appender, active=False,
                              created_ms=old[0].created_ms)
        except OSError as exc:
            raise self._io_failure(exc) from None
        self.segments[first:first + len(old)] = [segment]
        self._bases[first:first + len(old)] = [base]
        log.info("%s: cleaned segments %s swapped in as %s (%d bytes, was %d)", self.tp,
                 [s.base_offset for s in old], final[0].name, segment.size, sum(sizes))
        return True
