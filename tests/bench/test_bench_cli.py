"""`python -m bench --quick` against kbroker alone, single and as a 3-broker cluster (real ZooKeeper): every sweep
produces results without errors, and JSON lines, a PNG and the RESULTS.md tables come out and parse."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # each test runs `python -m bench`, which starts brokers (and ZooKeeper) itself

REPO = Path(__file__).resolve().parents[2]
CLUSTER = "kbroker 3 brokers RF 3"


def run_bench(*argv: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench", *argv], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


def run_bench_module(module: str, *argv: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *argv], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


def test_help_lists_scenarios_sweeps_and_topologies():
    out = run_bench("--help", timeout=60)
    assert out.returncode == 0, out.stderr
    for word in ("produce", "consume", "latency", "e2e", "compression", "partitions", "clients", "cluster"):
        assert word in out.stdout


def test_bad_arguments_fail_with_a_message():
    for argv, words in ((["--sweeps", "nope"], "unknown sweeps"), (["--acks", "2"], "unknown acks"),
                        (["--codecs", "brotli"], "unknown codecs"), (["--client-counts", "0"], "at least 1"),
                        (["--sizes", "1k"], "integers"),
                        (["--brokers", "tansu", "--topologies", "cluster"], "nothing to run")):
        out = run_bench(*argv, timeout=60)
        assert out.returncode == 2 and words in out.stderr, (argv, out.stderr)


def test_quick_run_covers_every_sweep_on_both_topologies(tmp_path):
    md = tmp_path / "RESULTS.md"
    proc = run_bench("--quick", "--brokers", "kbroker", "--out", str(tmp_path), "--results-md", str(md))
    assert proc.returncode == 0, proc.stderr[-5000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    limits = next(r for r in lines if r["kind"] == "limits")
    assert limits["disk_write_mb_s"] > 0 and limits["tcp_mb_s"] > 0 and limits["tcp_rtt_us"] > 0
    results = [r for r in lines if r["kind"] == "result"]
    assert not [r for r in results if "error" in r]
    assert lines[-1]["kind"] == "summary" and lines[-1]["errors"] == 0 and lines[-1]["results"] == len(results)

    def one(target, sweep, scenario, **params):
        found = [r for r in results if r["target"] == target and r["sweep"] == sweep and r["scenario"] == scenario
                 and all(r[k] == v for k, v in params.items())]
        assert len(found) == 1, (target, sweep, scenario, params, found)
        return found[0]

    for target, replication in (("kbroker", 1), (CLUSTER, 3)):
        # base: --quick is 100 B values with acks 0 and 1, every scenario
        for acks in ("0", "1"):
            produced = one(target, "base", "produce", acks=acks, size=100)
            assert produced["messages"] == 2000 and produced["msgs_s"] > 0
            assert abs(produced["frac_disk"] - produced["mb_s"] * replication / limits["disk_write_mb_s"]) < 1e-3
            assert one(target, "base", "consume", acks=acks)["messages"] == 2000
            lat = one(target, "base", "latency", acks=acks)
            assert lat["failed"] == 0 and lat["p50_ms"] <= lat["p99_ms"] <= lat["p999_ms"]
            # 200 msgs/s: every target keeps up, and the pacing figures say so (bench.harness.latency.pacing)
            assert lat["offered_msgs_s"] > 150 and lat["acked_msgs_s"] > 150 and lat["flush_ms"] >= 0
            assert lat["backlog"] is False, lat
            e2e = one(target, "base", "e2e", acks=acks)
            assert e2e["messages"] == 200 and e2e["received_msgs_s"] > 150 and e2e["drain_ms"] >= 0
            assert e2e["backlog"] is False, e2e
        for codec in ("none", "lz4"):
            assert one(target, "compression", "produce", compression=codec)["messages"] == 2000
            assert one(target, "compression", "consume", compression=codec)["messages"] == 2000
        for partitions in (1, 4):
            assert one(target, "partitions", "consume", partitions=partitions)["messages"] == 2000
        for clients in (1, 2):
            assert one(target, "clients", "produce", clients=clients)["messages"] == 2000
            assert one(target, "clients", "consume", clients=clients)["messages"] == 2000
        assert all(r["broker_cpu_s"] >= 0 for r in results if r["target"] == target and "skipped" not in r)
    # security: one kbroker with PLAINTEXT, SSL and SASL_SSL listeners; the cluster has PLAINTEXT only (empty cells)
    for protocol in ("PLAINTEXT", "SSL", "SASL_SSL"):
        assert one("kbroker", "security", "produce", protocol=protocol)["messages"] == 2000
        assert one("kbroker", "security", "consume", protocol=protocol)["messages"] == 2000
    for protocol in ("SSL", "SASL_SSL"):
        assert "skipped" in one(CLUSTER, "security", "produce", protocol=protocol)
    ratios = [r for r in lines if r["kind"] == "security_ratio"]
    assert {(r["scenario"], r["protocol"]) for r in ratios} == {
        (s, p) for s in ("produce", "consume") for p in ("SSL", "SASL_SSL")}
    assert all(r["ratio"] > 0 for r in ratios)

    jsonl = list(tmp_path.glob("bench-*.jsonl"))
    png = list(tmp_path.glob("bench-*.png"))
    assert len(jsonl) == 1 and len(png) == 1
    assert [json.loads(line) for line in jsonl[0].read_text().splitlines()] == lines
    assert png[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = md.read_text()
    for header in ("## Message size and acks", "## Compression codec", "## Partition count", "## Client processes",
                   "## Security protocol"):
        assert header in table
    assert f"| scenario | size (B) | acks | kbroker | {CLUSTER} |" in table
    rows = [line for line in table.splitlines() if line.startswith(("| produce", "| consume", "| latency", "| e2e"))]
    # base 2 acks x 4 scenarios, 2 rows x 2 scenarios in each of the next three sweeps, 3 protocols x 2 in security
    assert len(rows) == 8 + 3 * 4 + 6 and not [row for row in rows if "error" in row or "| - |" in row]
    assert "of PLAINTEXT" in table


def test_tls_decrypt_bench_prints_rates_beside_the_cipher_limit():
    proc = run_bench_module("bench.experiments.tls", "--mib", "4", "--records", "1024,16384")
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    rates = [r for r in lines if r["kind"] == "tls_decrypt"]
    assert [r["record_bytes"] for r in rates] == [1024, 16384]
    assert all(r["mb_s"] > 0 and r["version"].startswith("TLSv1.") for r in rates)
    assert rates[1]["us_per_record"] > rates[0]["us_per_record"]  # bigger records take longer each
    [limit] = [r for r in lines if r["kind"] == "limit"]
    assert limit["mb_s"] is None or limit["mb_s"] > 0


def test_host_sweep_measures_one_and_two_processes(tmp_path):
    """``--sweeps host`` end to end at a small paced load: a run per N on a real ZooKeeper, the CPU of every
    broker split into user and system, the load generator's own CPU, and the ratios to N = 1."""
    proc = run_bench("--sweeps", "host", "--host-processes", "1,2", "--host-rate", "3000", "--host-seconds", "2",
                     "--messages", "3000", "--rounds", "1", "--out", str(tmp_path),
                     "--results-md", str(tmp_path / "RESULTS.md"))
    assert proc.returncode == 0, proc.stderr[-5000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    [warm] = [r for r in lines if r["kind"] == "warm_pages"]
    assert warm["bytes"] >= 2 * (3000 + 3000 * 2) * 1024 and warm["seconds"] >= 0
    paced = {r["processes"]: r for r in lines if r.get("phase") == "paced"}
    assert sorted(paced) == [1, 2] and not [r for r in lines if "error" in r]
    for n, record in paced.items():
        assert record["messages"] == 6000 and record["client_cpu_s"] > 0 and record["sync_before_s"] >= 0
        brokers = sorted(k for k in record["cpu_by_process"] if k.startswith("broker "))
        assert brokers == [f"broker {i}" for i in range(1, n + 1)]
        assert sum(record["partitions_led"].values()) == 8 and sorted(record["partitions_led"]) == brokers
        assert sorted(record["cpu_s_per_m_records_by_broker"]) == brokers
        for key, total in record["cpu_by_process"].items():
            user, system = record["user_system_by_process"][key]
            assert abs(user + system - total) <= 0.011
    assert paced[2]["broker_cpus"]["broker 1"] != paced[2]["broker_cpus"]["broker 2"]
    scaling = {r["processes"]: r for r in lines if r["kind"] == "host_scaling"}
    assert scaling[1]["cpu_per_m_over_n1"] == 1.0 and scaling[2]["paced_cpu_s_per_m_records"] > 0
    if paced[2]["shared"]:  # fewer than 4 cores: the clients share the last broker's core, broker 1's is its own
        assert "alone_cpu_per_m_over_n1" in scaling[2] and "alone_cpu_per_m_over_n1" not in scaling[1]
