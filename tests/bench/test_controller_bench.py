"""bench.suite.controller on a real ZooKeeper and 3 real kbroker processes, with N = 8 partitions (2 topics of 4): every
step prints its line with a positive duration and the controller's CPU, after a provenance line. A functional test of
the bench, not a timing assertion."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
STEPS = ["create", "create-on-top", "delete", "recreate", "controlled-shutdown", "rejoin", "kill-9", "rejoin",
         "controller-failover"]


@pytest.mark.slow  # the bench starts a ZooKeeper and brokers in its own process
def test_every_step_reports_seconds_and_controller_cpu(tmp_path: Path) -> None:
    out = tmp_path / "controller.jsonl"
    proc = subprocess.run([sys.executable, "-m", "bench.suite.controller", "--partitions", "8", "--step-timeout",
                           "120", "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [json.loads(line) for line in out.read_text().splitlines()] == lines  # --out holds the same lines

    provenance = lines[0]
    assert provenance["kind"] == "provenance"
    assert provenance["command"].startswith("python -m bench.suite.controller --partitions 8")
    assert provenance["commit"] and provenance["commit"] != "unknown" and provenance["date"].startswith("20")

    results = lines[1:]
    assert [r["step"] for r in results] == STEPS
    for r in results:
        assert "error" not in r, r
        assert r["partitions"] == 8 and r["topics"] == 2 and r["sweep"] == "controller"
        assert r["seconds"] > 0 and r["seconds_per_k"] > 0, r
        assert r["step_partitions"] > 0 and r["controller_cpu_s"] >= 0 and "controller_cpu_s_per_k" in r, r
    by_step = {r["step"]: r for r in results}
    assert by_step["delete"]["step_partitions"] == 16 and by_step["delete"]["zookeeper_s"] > 0
    shutdown = by_step["controlled-shutdown"]
    assert shutdown["exit_code"] == 0 and shutdown["broker"] != shutdown["controller"]
    killed = by_step["kill-9"]
    # the leaders move once ZooKeeper expires the killed broker's session, never before
    assert killed["broker"] != killed["controller"] and 0 < killed["expiry_s"] <= killed["seconds"]
    failover = by_step["controller-failover"]
    assert failover["new_controller"] not in (None, failover["broker"]) and failover["controller"] == \
        failover["new_controller"]
    assert 0 < failover["elected_s"] <= failover["seconds"] and failover["leaders_s"] > 0


def test_bad_partition_counts_fail_with_a_message() -> None:
    proc = subprocess.run([sys.executable, "-m", "bench.suite.controller", "--partitions", "0"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "at least 1" in proc.stderr


def test_the_suite_runs_the_controller_sweep_only_when_named() -> None:
    proc = subprocess.run([sys.executable, "-m", "bench", "--help"], cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and "--controller-partitions" in proc.stdout and "controller" in proc.stdout
    from bench.suite import report
    assert "controller" in report.SWEEPS and "controller" not in report.DEFAULT_SWEEPS
