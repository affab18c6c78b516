"""kbroker.log.disk_space: a log dir's usable and total bytes are statvfs's, measured off the loop, one measurement
in flight at most, a dir statvfs cannot read left out."""
from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

from kbroker.log.disk_space import DiskSpace, Volume

SLACK = 256 << 20  # free space moves with whatever else writes on this disk meanwhile


def test_measure_reports_statvfs_and_leaves_out_a_missing_dir(tmp_path: Path) -> None:
    space = DiskSpace()
    space.measure([tmp_path, tmp_path / "gone"])
    st = os.statvfs(tmp_path)
    (volume,) = space.volumes().values()
    assert list(space.volumes()) == [tmp_path]
    assert volume.total_bytes == st.f_blocks * st.f_frsize
    assert abs(volume.usable_bytes - st.f_bavail * st.f_frsize) < SLACK
    space.measure([])
    assert space.volumes() == {}


def test_a_measurement_still_running_is_not_started_again(tmp_path: Path) -> None:
    """A hung file system holds one executor thread: while it has not returned, no other one starts."""
    release = threading.Event()
    started: list[list[Path]] = []

    class Held(DiskSpace):
        def measure(self, directories: object) -> None:
            started.append(list(directories))  # type: ignore[call-overload]
            release.wait(30)
            super().measure(started[-1])

    async def run() -> dict[Path, Volume]:
        space = Held()
        first = space.measure_in_thread([tmp_path])
        assert first is not None
        assert space.measure_in_thread([tmp_path]) is None  # the first has not returned: skipped
        release.set()
        await asyncio.wait_for(first, 30)
        second = space.measure_in_thread([tmp_path])  # returned: a new one starts
        assert second is not None
        await asyncio.wait_for(second, 30)
        return space.volumes()

    volumes = asyncio.run(run())
    assert len(started) == 2 and list(volumes) == [tmp_path]
