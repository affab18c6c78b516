"""`python -m bench --quick` against kbroker alone: JSON lines, a PNG and a RESULTS.md table come out and parse."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_help_lists_scenarios():
    out = subprocess.run([sys.executable, "-m", "bench", "--help"], cwd=REPO, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    for scenario in ("produce", "consume", "latency", "e2e"):
        assert scenario in out.stdout


def test_quick_run_writes_json_png_and_table(tmp_path):
    md = tmp_path / "RESULTS.md"
    proc = subprocess.run([sys.executable, "-m", "bench", "--quick", "--brokers", "kbroker", "--out", str(tmp_path),
                           "--results-md", str(md)], cwd=REPO, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-5000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    limits = next(r for r in lines if r["kind"] == "limits")
    assert limits["disk_write_mb_s"] > 0 and limits["tcp_mb_s"] > 0 and limits["tcp_rtt_us"] > 0
    results = {r["scenario"]: r for r in lines if r["kind"] == "result"}
    assert set(results) == {"produce", "consume", "latency", "e2e"}
    assert not [r for r in results.values() if "error" in r]
    assert results["produce"]["msgs_s"] > 0 and 0 < results["produce"]["frac_disk"]
    assert results["consume"]["messages"] == results["produce"]["messages"]
    assert results["latency"]["p50_ms"] <= results["latency"]["p99_ms"] <= results["latency"]["p999_ms"]
    assert results["e2e"]["messages"] > 0
    assert lines[-1]["kind"] == "summary" and lines[-1]["errors"] == 0
    jsonl = list(tmp_path.glob("bench-*.jsonl"))
    png = list(tmp_path.glob("bench-*.png"))
    assert len(jsonl) == 1 and len(png) == 1
    assert [json.loads(line) for line in jsonl[0].read_text().splitlines()] == lines
    assert png[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = md.read_text()
    assert "| scenario | size (B) | acks | kbroker |" in table
    assert sum(1 for line in table.splitlines() if line.startswith("| produce") or line.startswith("| consume")
               or line.startswith("| latency") or line.startswith("| e2e")) == 4
