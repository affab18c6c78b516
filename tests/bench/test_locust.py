"""A headless Locust run of bench/load/locustfile.py against a broker: producers and consumers, no failures."""
from __future__ import annotations

import csv
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# not imported here: importing locust monkey-patches the whole process with gevent (subprocess included)
if importlib.util.find_spec("locust") is None:
    pytest.fail("locust is not installed (make deps installs it)", pytrace=False)

REPO = Path(__file__).resolve().parents[2]


def test_headless_locust_run(module_broker, tmp_path):
    locust = shutil.which("locust", path=str(Path(sys.executable).parent)) or shutil.which("locust")
    assert locust, "locust is not installed"
    prefix = tmp_path / "run"
    env = dict(os.environ, KB_TOPIC="locust-test", KB_MESSAGE_SIZE="256", KB_ACKS="all", KB_KEYS="hot",
               KB_GROUP="locust-test", KB_PARTITIONS="4")
    proc = subprocess.run([locust, "-f", str(REPO / "bench/load/locustfile.py"), "--headless", "-u", "4", "-r", "4",
                           "-t", "10s", "--csv", str(prefix), "--host", f"kafka://{module_broker.bootstrap}",
                           "--only-summary"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-5000:]
    with open(f"{prefix}_stats.csv", newline="") as f:
        rows = {(r["Type"], r["Name"]): r for r in csv.DictReader(f)}
    produce = rows[("produce", "locust-test")]
    consume = rows[("consume", "locust-test")]
    assert int(produce["Request Count"]) > 0
    assert int(consume["Request Count"]) > 0
    assert float(consume["Average Content Size"]) > 0, "the consumers received nothing"
    assert int(rows[("", "Aggregated")]["Failure Count"]) == 0, proc.stderr[-5000:]
    with open(f"{prefix}_failures.csv", newline="") as f:
        assert list(csv.DictReader(f)) == []
