"""``kbroker host-plan --with-properties``: the plan as JSON with each broker's rendered server.properties, which
the Ansible role installs for its per-broker systemd units (issue 24 item 4), so the deployment never derives ids,
ports or dirs itself."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from kbroker.config.broker import parse_properties
from kbroker.host.plan import Topology, plan_host


def _values(text: str) -> dict[str, str]:
    return {key: value for key, (value, _) in parse_properties(text).items()}


def test_json_carries_each_brokers_rendered_properties(tmp_path: Path) -> None:
    dirs = [str(tmp_path / f"d{i}") for i in range(2)]
    props = tmp_path / "server.properties"
    props.write_text(f"broker.id=7\nbroker.processes=auto\nbroker.processes.port.step=10\n"
                     f"zookeeper.connect=127.0.0.1:1/x\nlog.dirs={','.join(dirs)}\n"
                     "listeners=PLAINTEXT://127.0.0.1:19092\nstatus.listener=http://127.0.0.1:19093\n")
    result = subprocess.run([sys.executable, "-m", "kbroker.cli", "host-plan", str(props), "--with-properties"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    count = min(len(os.sched_getaffinity(0)), 2)
    assert plan["broker.processes"] == count and len(plan["processes"]) == count
    expected = plan_host(_values(props.read_text()), Topology.of_this_host())
    for i, process in enumerate(plan["processes"]):
        text = process["server.properties"]
        assert text == expected.render(i)
        rendered = _values(text)
        assert rendered["broker.id"] == str(7 + i) == str(process["broker.id"])
        assert rendered["listeners"] == f"PLAINTEXT://127.0.0.1:{19092 + 10 * i}" == process["listeners"]
        assert rendered["status.listener"] == f"http://127.0.0.1:{19093 + 10 * i}"
        assert rendered["log.dirs"].split(",") == process["log.dirs"]
        assert not any(key.startswith("broker.processes") for key in rendered)
    # the other keys are the host's, unchanged, in every broker's file
    assert all("zookeeper.connect=127.0.0.1:1/x\n" in p["server.properties"] for p in plan["processes"])
    # without it, --json stays the plan alone
    bare = subprocess.run([sys.executable, "-m", "kbroker.cli", "host-plan", str(props), "--json"],
                          capture_output=True, text=True, check=True).stdout
    assert all("server.properties" not in p for p in json.loads(bare)["processes"])
