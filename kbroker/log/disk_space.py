"""Each online log dir's file system, usable and total bytes (``os.statvfs``), for ``/metrics``.

Kafka 2.8 has no such figure: KIP-827 (Kafka 3.3) added TotalBytes and UsableBytes to DescribeLogDirs v4, with no
JMX gauge, and kbroker keeps DescribeLogDirs at 2.8's versions. The status endpoint publishes them instead
(``kbroker.status.metrics``). statvfs is one syscall, but a hung file system (a dead NFS mount, say) would hold
it: the broker's housekeeping measures in a thread, at most one measurement in flight, and a scrape reads the last
figures without touching the disk.
"""
from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

# How often housekeeping measures (seconds): free space moves slowly next to a scrape interval.
MEASURE_INTERVAL_S = 5.0


@dataclass(frozen=True)
class Volume:
    usable_bytes: int  # what a non-root process may still write (f_bavail), as Java's File.getUsableSpace
    total_bytes: int


class DiskSpace:
    """The last measurement of each log dir; ``volumes()`` never blocks."""

    def __init__(self) -> None:
        self._volumes: dict[Path, Volume] = {}
        self._pending: asyncio.Future[None] | None = None

    def volumes(self) -> dict[Path, Volume]:
        return self._volumes

    def measure(self, directories: Iterable[Path]) -> None:
        """Blocking: statvfs of each directory; one that fails is left out (its dir is failing or gone)."""
        found: dict[Path, Volume] = {}
        for directory in directories:
            try:
                st = os.statvfs(directory)
            except OSError as exc:
                log.warning("statvfs of log dir %s failed: %s", directory, exc)
                continue
            found[directory] = Volume(usable_bytes=st.f_bavail * st.f_frsize, total_bytes=st.f_blocks * st.f_frsize)
        self._volumes = found  # one assignment: a scrape sees the old figures or the new ones

    def measure_in_thread(self, directories: Iterable[Path]) -> asyncio.Future[None] | None:
        """Start a measurement in the loop's default executor unless the last one has not returned (a hung file
        system holds one thread, not one more each period); None when skipped."""
        if self._pending is not None and not self._pending.done():
            return None
        self._pending = asyncio.get_running_loop().run_in_executor(None, self.measure, list(directories))
        return self._pending
