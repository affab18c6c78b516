"""``broker.processes`` planning one broker (``1``, or ``auto`` with one log dir) is ``kbroker serve`` as without
host mode: the broker runs in the process itself, unpinned, and the host keys never reach it as unknown configs."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from tests.integration.conftest import BrokerProcess


@pytest.mark.parametrize("processes", ["1", "auto"])
def test_one_planned_broker_runs_in_process(tmp_path: Path, processes: str) -> None:
    broker = BrokerProcess(tmp_path, {"broker.processes": processes, "broker.processes.port.step": "1"})
    broker.start()
    try:
        assert broker.proc is not None
        pid = broker.proc.pid
        assert Path(f"/proc/{pid}/task/{pid}/children").read_text().split() == []
        assert os.sched_getaffinity(pid) == os.sched_getaffinity(0)
        log = broker.log()
        assert f"kbroker 0 serving on {broker.bootstrap}" in log
        assert "unknown config" not in log and "[broker " not in log
        # broker.rack unset in host mode: the server's host name, here the listener's 127.0.0.1 (issue 24 item 2)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        cluster = admin.describe_cluster().result(15)
        assert [node.rack for node in cluster.nodes] == ["127.0.0.1"]
    finally:
        broker.stop_cleanly()
