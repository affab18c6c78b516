"""Opening a partition log (Kafka's LogLoader): the segment files found in its directory, leftovers of
an interrupted delete or cleaner swap, index sanity checks, recovery from the recovery point on (cut
at the first damage), and the leader epoch checkpoint reconciled with what survived."""
from __future__ import annotations

import bisect
import itertools
import logging
import os

from kbroker._core.index import CorruptIndexError
from kbroker.log.leader_epoch import CHECKPOINT_NAME as LEADER_EPOCH_CHECKPOINT, LeaderEpochCache
from kbroker.log.local_log import LocalLog
from kbroker.log.names import DELETED_SUFFIX, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX
from kbroker.log.segment import Segment
from kbroker.log.swap import complete_interrupted_swaps

log = logging.getLogger(__name__)


class LogLoader(LocalLog):
    # First offset recovery re-validated (None: no recovery ran); the epoch cache is redone from there.
    _recovered_from: int | None = None

    def _load(self, recover: bool, log_start_offset: int) -> None:
        bases = []
        for entry in os.scandir(self.directory):
            name = entry.name
            if name.endswith(DELETED_SUFFIX) or name.endswith(".tmp"):
                os.unlink(entry.path)  # a delete or write the last run did not finish
        swapped = complete_interrupted_swaps(self.directory)  # a cleaner swap the last run did not finish
        for entry in os.scandir(self.directory):
            name = entry.name
            if name.endswith(LOG_SUFFIX) and name[:-len(LOG_SUFFIX)].isdigit():
                bases.append(int(name[:-len(LOG_SUFFIX)]))
        for entry in os.scandir(self.directory):  # indexes whose segment is gone
            stem, _, suffix = entry.name.rpartition(".")
            if "." + suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX) and stem.isdigit() and int(stem) not in bases:
                os.unlink(entry.path)
        bases.sort()
        now = self._clock()
        for i, base in enumerate(bases):
            self._add_segment(Segment(self.directory, base, self.config, self._appender,
                                      active=i == len(bases) - 1, created_ms=now))
        if not self.segments:
            self._add_segment(Segment(self.directory, log_start_offset, self.config, self._appender,
                                      active=True, created_ms=now))
        for segment in self.segments:
            if segment.base_offset in swapped:
                log.info("%s: rebuilding the indexes of swapped-in segment %s", self.tp, segment.log_path)
                segment.recover()
        self._check_indexes(recover)
        if recover:
            self._recover()
        self.log_end_offset = self.active.next_offset()
        if recover:
            self.flush()

    def _load_leader_epochs(self) -> None:
        """Read ``leader-epoch-checkpoint``. Missing or malformed: rebuilt from every batch header.
        After recovery: entries from the first revalidated segment on are redone from its batches
        (the file may describe bytes recovery cut). Then trimmed to [log start, log end), as Kafka."""
        try:
            cache = self.leader_epochs = LeaderEpochCache(self.directory / LEADER_EPOCH_CHECKPOINT)
            if not cache.loaded:
                cache.rebuild((h.partition_leader_epoch, h.base_offset)
                              for h in self.batch_headers(self.log_start_offset))
            elif self._recovered_from is not None:
                below = [entry for entry in cache.entries if entry[1] < self._recovered_from]
                cache.rebuild(itertools.chain(below, ((h.partition_leader_epoch, h.base_offset)
                                                      for h in self.batch_headers(self._recovered_from))))
            cache.truncate_from_end(self.log_end_offset)
            cache.truncate_from_start(self.log_start_offset)
        except OSError as exc:
            raise self._io_failure(exc) from None

    def _check_indexes(self, recover: bool) -> None:
        """Rebuild the indexes that fail their sanity check. With ``recover`` the segments from the
        recovery point on are skipped: ``_recover`` rebuilds theirs anyway (after a crash the active
        segment's index is at its preallocated size and always fails), and each rebuild is a CRC
        pass over the whole segment."""
        checked = self.segments
        if recover:
            checked = self.segments[:max(0, bisect.bisect_right(self._bases, self.recovery_point) - 1)]
        for segment in checked:
            try:
                segment.offset_index.sanity_check()
                segment.time_index.sanity_check()
            except CorruptIndexError as exc:
                log.warning("%s: rebuilding indexes of %s: %s", self.tp, segment.log_path, exc)
                segment.recover()

    def _recover(self) -> None:
        """Re-validate every segment from the recovery point on; at the first damage cut the
        segment there and drop every later segment (nothing after damage survives)."""
        first = max(0, bisect.bisect_right(self._bases, self.recovery_point) - 1)
        self._recovered_from = self._bases[first]
        for i in range(first, len(self.segments)):
            segment = self.segments[i]
            if segment.recover():
                for later in self.segments[i + 1:]:
                    log.warning("%s: deleting %s, which follows damaged data", self.tp, later.log_path)
                    later.remove_files()
                del self.segments[i + 1:]
                del self._bases[i + 1:]
                segment.make_active()
                break
