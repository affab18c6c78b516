"""Replication cost: acks=1 and acks=all produce on a 3-broker cluster beside one kbroker and one Tansu broker.

Side by side in one run: produce throughput with acks=1 and acks=all on a 3-broker kbroker cluster (real ZooKeeper,
replication factor 3, min.insync.replicas=2), next to one kbroker broker and one Tansu broker (no replication: Tansu
0.6 has no ZooKeeper-mode cluster), and the machine's sequential write rate measured first.

All three replicas share this machine's disk and its 2 cores, so a replicated byte costs three
writes and three processes' CPU: the cluster's ceiling is a third of the single broker's.
Figures are JSON lines; the summary line carries ``acks_all_over_acks_1`` for the cluster.

    .venv/bin/python -m bench.suite.cluster [--messages N] [--size BYTES] [--rounds R]
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from bench.harness import broker_load
from bench.harness.broker_load import consume, emit, log, produce
from bench.harness.results_meta import header
from bench.harness.targets import Target, start_cluster, start_single
from bench.suite import storage

MIB = 1 << 20


KEYS = {("kbroker", "cluster"): "kbroker_3x_rf3", ("kbroker", "single"): "kbroker_1x", ("tansu", "single"): "tansu"}


def key(target: Target) -> str:
    return KEYS[(target.name, target.topology)]


def create_topic(target: Target, topic: str, partitions: int) -> None:
    broker_load.create_topics(target, [topic], partitions, replication=target.replication,
                             config={"min.insync.replicas": str(min(2, target.replication))})


def measure(args: argparse.Namespace, handle: Target, round_no: int) -> list[dict]:
    out = []
    for acks in ("1", "all"):
        topic = f"bench-r{round_no}-acks{acks}"
        create_topic(handle, topic, args.partitions)
        cpu0 = handle.cpu_s()
        record = {"broker": key(handle), "phase": "produce", "acks": acks, "round": round_no,
                  "replication_factor": handle.replication, "messages": args.messages, "size": args.size}
        try:
            measured = produce(args, handle, topic, acks)
            record.update(msgs_s=round(measured["messages"] / measured["elapsed_s"], 1),
                          mb_s=round(measured["bytes"] / measured["elapsed_s"] / 1e6, 1),
                          elapsed_s=round(measured["elapsed_s"], 3), broker_cpu_s=round(handle.cpu_s() - cpu0, 2))
        except Exception as exc:
            record["error"] = f"{type(exc).__name__}: {exc}"
        emit(record)
        out.append(record)
        if acks == "all" and "error" not in record:
            cpu0 = handle.cpu_s()
            consumed = {"broker": key(handle), "phase": "consume", "round": round_no,
                        "replication_factor": handle.replication}
            try:
                measured = consume(args, handle, topic)
                consumed.update(msgs_s=round(measured["messages"] / measured["elapsed_s"], 1),
                                mb_s=round(measured["bytes"] / measured["elapsed_s"] / 1e6, 1),
                                broker_cpu_s=round(handle.cpu_s() - cpu0, 2))
            except Exception as exc:
                consumed["error"] = f"{type(exc).__name__}: {exc}"
            emit(consumed)
            out.append(consumed)
    return out


def best(records: list[dict], name: str, phase: str, acks: str | None = None) -> float | None:
    found = [r["msgs_s"] for r in records if r["broker"] == name and r["phase"] == phase and "msgs_s" in r
             and (acks is None or r.get("acks") == acks)]
    return max(found) if found else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--linger-ms", type=int, default=5)
    parser.add_argument("--batch-bytes", type=int, default=MIB)
    parser.add_argument("--fetch-partition-bytes", type=int, default=MIB)
    parser.add_argument("--phase-timeout", type=float, default=300.0)
    parser.add_argument("--no-tansu", action="store_true", help="leave Tansu out")
    args = parser.parse_args(argv)
    emit(header(__file__, argv))
    workdir = Path(tempfile.mkdtemp(prefix="kbroker-bench-cluster-"))
    records: list[dict] = []
    handles: list[Target] = []
    try:
        raw = storage.raw_write(workdir, 256 * MIB, MIB)
        emit({"measure": "disk_seq_write_mb_s", "value": round(raw, 1)})
        cluster = start_cluster(workdir)
        handles.append(cluster)
        single = start_single("kbroker", workdir)
        handles.append(single)
        tansu = None
        if not args.no_tansu:
            tansu = start_single("tansu", workdir)
            handles.append(tansu)
        for round_no in range(args.rounds):
            log(f"round {round_no + 1}/{args.rounds}")
            records += measure(args, cluster, round_no)
            records += measure(args, single, round_no)
            if tansu is not None:
                records += measure(args, tansu, round_no)
        summary: dict = {"summary": True, "messages": args.messages, "size": args.size,
                         "partitions": args.partitions, "disk_seq_write_mb_s": round(raw, 1)}
        for handle in handles:
            for acks in ("1", "all"):
                summary[f"{key(handle)}_acks_{acks}_msgs_s"] = best(records, key(handle), "produce", acks)
            summary[f"{key(handle)}_consume_msgs_s"] = best(records, key(handle), "consume")
        a1, aall = summary.get("kbroker_3x_rf3_acks_1_msgs_s"), summary.get("kbroker_3x_rf3_acks_all_msgs_s")
        if a1 and aall:
            summary["acks_all_over_acks_1"] = round(aall / a1, 3)
            # three replicas write every byte on this one disk: a third of it is the cluster's limit
            summary["cluster_acks_all_fraction_of_disk_third"] = round(aall * args.size / 1e6 / (raw / 3), 3)
        emit(summary)
    finally:
        for handle in handles:
            handle.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
