"""A 60-second chaos run (bench.reliability.chaos) with every fault kind: nothing acknowledged lost, duplicated or
reordered, replicas equal up to the high watermark, transactions all-or-nothing, group offsets never backwards, the
cluster healed within the stated bound, and every fault kind injected at least once."""
from __future__ import annotations

import io
import json
import os

import pytest

from bench.reliability.chaos.faults import KINDS
from bench.reliability.chaos.run import Options, run

SEED = int(os.environ.get("KBROKER_CHAOS_SEED", "14"))


@pytest.mark.slow  # bench.reliability.chaos starts its own ZooKeeper and brokers
def test_one_minute_of_every_fault_loses_nothing() -> None:
    out = io.StringIO()
    # 6 kinds in 60 s: a shuffled round of every kind comes first (gaps average 2 s); on a slow machine the
    # run goes on past the minute until each kind ran once
    summary = run(Options(minutes=1.0, seed=SEED, interval=2.0, faults=list(KINDS), rate=20.0, every_kind=True), out)
    report = json.dumps(summary, indent=1, default=str) + "\n" + out.getvalue()
    assert "harness_error" not in summary, report
    assert set(summary["faults"]) == set(KINDS), report
    assert not summary["fault_errors"], report
    assert not any("skipped" in line for line in out.getvalue().splitlines() if '"event": "fault"' in line), report
    assert summary["acknowledged"] > 0, report
    for key in ("lost", "offset_mismatch", "duplicated", "reordered", "replica_divergences"):
        assert summary[key] == 0, f"{key}: {report}"
    txn = summary["transactions"]
    assert txn["committed"] > 0 and txn["aborted"] > 0, report
    for key in ("aborted_visible", "committed_incomplete", "unknown_partial", "unrecorded_visible",
                "inputs_processed_twice"):
        assert txn[key] == 0, f"{key}: {report}"
    assert summary["group_offsets"]["offset_regressions"] == 0, report
    assert summary["heal_s"] is not None, report
    assert summary["ok"], report
