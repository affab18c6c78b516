"""What leaves a partition log from its start: retention by time and size, DeleteRecords' log start
offset, and the delayed removal of deleted segment files (a fetch may still be sending from them)."""
from __future__ import annotations

import logging
from collections.abc import Callable

from kbroker import errors
from kbroker.log.local_log import LocalLog
from kbroker.log.segment import Segment

log = logging.getLogger(__name__)


class LogRetention(LocalLog):
    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: raise the log start offset to ``offset`` (<= high watermark), drop whole
        segments below it. Returns the new log start offset."""
        if offset > self.high_watermark:
            raise errors.OffsetOutOfRangeError(
                f"{self.tp}: cannot delete records before {offset}, above the high watermark {self.high_watermark}")
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            self._delete_segments(lambda seg, nxt: nxt is not None and nxt.base_offset <= self.log_start_offset,
                                  "below the log start offset")
            self._truncate_epochs_from_start()
        return self.log_start_offset

    def delete_old_segments(self, now: int | None = None) -> int:
        """Retention: whole segments past ``retention.ms`` or beyond ``retention.bytes``, and those
        below the log start offset. Only data below the high watermark is eligible."""
        now = self._clock() if now is None else now
        deleted = self._delete_segments(
            lambda seg, nxt: nxt is not None and nxt.base_offset <= self.log_start_offset, "below the log start offset")
        if not self.config.delete:
            return deleted  # cleanup.policy=compact: only the log start offset deletes segments
        if self.config.retention_ms >= 0:
            deleted += self._delete_segments(
                lambda seg, nxt: now - seg.largest_timestamp() > self.config.retention_ms,
                f"past retention.ms={self.config.retention_ms}")
        if self.config.retention_bytes >= 0:
            excess = self.size_bytes - self.config.retention_bytes

            def beyond_size(seg: Segment, nxt: Segment | None) -> bool:
                nonlocal excess
                if excess - seg.size >= 0:
                    excess -= seg.size
                    return True
                return False

            deleted += self._delete_segments(beyond_size, f"beyond retention.bytes={self.config.retention_bytes}")
        return deleted

    def _delete_segments(self, predicate: Callable[[Segment, Segment | None], bool], reason: str) -> int:
        doomed = []
        for i, segment in enumerate(self.segments):
            nxt = self.segments[i + 1] if i + 1 < len(self.segments) else None
            upper = nxt.base_offset if nxt is not None else self.log_end_offset
            if nxt is None and segment.size == 0:
                break
            if self.high_watermark >= upper and predicate(segment, nxt):
                doomed.append(segment)
            else:
                break
        if not doomed:
            return 0
        if len(doomed) == len(self.segments):
            self.roll()  # keep an active segment to append to
        now = self._clock()
        for segment in doomed:
            log.info("%s: deleting segment %s (%s)", self.tp, segment.log_path, reason)
            segment.mark_deleted()
            self._pending_deletes.append((now + self.config.file_delete_delay_ms, segment))
        del self.segments[:len(doomed)]
        del self._bases[:len(doomed)]
        self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
        self._truncate_epochs_from_start()
        self.remove_deleted_files(now)
        return len(doomed)

    def remove_deleted_files(self, now: int) -> None:
        """Close and unlink segments marked deleted once ``file.delete.delay.ms`` has passed (a
        fetch may still be sending from them until then)."""
        keep = []
        for due, segment in self._pending_deletes:
            if due <= now:
                segment.remove_files()
            else:
                keep.append((due, segment))
        self._pending_deletes = keep
