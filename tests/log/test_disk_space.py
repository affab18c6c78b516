"""kbroker.log.disk_space: a log dir's usable and total bytes are statvfs's, measured off the loop, one measurement
in flight at most, a dir statvfs cannot read left out; /metrics publishes each online dir's, not an offline one's."""
from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from kbroker.log import LogManager
from kbroker.log.disk_space import DiskSpace, Volume
from kbroker.metrics import render
from kbroker.status.metrics import log_dir_volumes

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


def test_metrics_publish_each_online_dir_and_leave_out_an_offline_one(tmp_path: Path) -> None:
    manager = LogManager([tmp_path / "a", tmp_path / "b"], cleaner_thread=False)
    manager.startup()
    try:
        assert set(manager.disk_space.volumes()) == {(tmp_path / "a").resolve(), (tmp_path / "b").resolve()}
        text = render(log_dir_volumes(manager)).decode()
        parsed = {(s.name, s.labels["logdirectory"]): s.value
                  for f in text_string_to_metric_families(text) for s in f.samples}
        st = os.statvfs(tmp_path)
        for name in ("a", "b"):
            path = str((tmp_path / name).resolve())
            assert parsed[("kafka_log_logmanager_totalbytes", path)] == st.f_blocks * st.f_frsize
            assert abs(parsed[("kafka_log_logmanager_usablebytes", path)] - st.f_bavail * st.f_frsize) < SLACK
        manager.mark_dir_offline((tmp_path / "b").resolve(), OSError(5, "Input/output error"))
        text = render(log_dir_volumes(manager)).decode()
        assert {s.labels["logdirectory"] for f in text_string_to_metric_families(text) for s in f.samples} == {
            str((tmp_path / "a").resolve())}
    finally:
        manager.shutdown()
