"""Replication cost, side by side in one run: produce throughput with acks=1 and acks=all on a
3-broker kbroker cluster (real ZooKeeper, replication factor 3, min.insync.replicas=2), next to
one kbroker broker and one Tansu broker (no replication: Tansu 0.6 has no ZooKeeper-mode
cluster), and the machine's sequential write rate measured first.

All three replicas share this machine's disk and its 2 cores, so a replicated byte costs three
writes and three processes' CPU: the cluster's ceiling is a third of the single broker's.
Figures are JSON lines; the summary line carries ``acks_all_over_acks_1`` for the cluster.

    .venv/bin/python -m bench.cluster [--messages N] [--size BYTES] [--rounds R]
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from bench import storage, throughput
from bench.throughput import BrokerProcess, consume, emit, free_port, log, produce
from kazoo_bridge.local_server import ZooKeeperServer

MIB = 1 << 20


class ClusterHandle:
    """What throughput.produce/consume need of a broker, for several: bootstrap and alive()."""

    def __init__(self, name: str, brokers: list[BrokerProcess]) -> None:
        self.name = name
        self.brokers = brokers
        self.bootstrap = ",".join(b.bootstrap for b in brokers)

    def alive(self) -> bool:
        return all(b.alive() for b in self.brokers)

    def cpu_s(self) -> float:
        return sum(sum(b.cpu()) for b in self.brokers)


def kbroker_argv(port: int, logs: Path, extra: dict[str, str]) -> list[str]:
    argv = [str(Path(sys.executable).parent / "kbroker"), "serve",
            "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}", "--override", f"log.dirs={logs}",
            "--override", "group.initial.rebalance.delay.ms=0"]
    for key, value in extra.items():
        argv += ["--override", f"{key}={value}"]
    return argv


def start_cluster(workdir: Path, zookeeper: ZooKeeperServer) -> ClusterHandle:
    env = dict(os.environ, KBROKER_LOG_LEVEL=os.environ.get("KBROKER_LOG_LEVEL", "WARNING"))
    brokers = []
    for broker_id in (1, 2, 3):
        port = free_port()
        argv = kbroker_argv(port, workdir / f"cluster-{broker_id}", {
            "broker.id": str(broker_id), "zookeeper.connect": f"{zookeeper.hosts}/kbench",
            "offsets.topic.replication.factor": "3"})
        broker = BrokerProcess(f"kbroker-{broker_id}", argv, port, workdir, env)
        broker.start()
        brokers.append(broker)
    return ClusterHandle("kbroker_3x_rf3", brokers)


def start_single(name: str, workdir: Path) -> ClusterHandle:
    return ClusterHandle(name if name != "kbroker" else "kbroker_1x", [throughput.start_broker(name, None, workdir)])


def create_topic(handle: ClusterHandle, topic: str, partitions: int, replication: int) -> None:
    admin = AdminClient({"bootstrap.servers": handle.bootstrap})
    future = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=replication,
                                           config={"min.insync.replicas": str(min(2, replication))})])[topic]
    future.result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # every partition led and, with replicas, its ISR complete
        md = admin.list_topics(topic, timeout=10).topics[topic]
        if len(md.partitions) == partitions and all(p.leader >= 0 and len(p.isrs) == replication
                                                    for p in md.partitions.values()):
            return
        time.sleep(0.2)
    raise RuntimeError(f"{topic}: partitions not led with a full ISR within 30 s")


def measure(args: argparse.Namespace, handle: ClusterHandle, replication: int, round_no: int) -> list[dict]:
    out = []
    for acks in ("1", "all"):
        topic = f"bench-r{round_no}-acks{acks}"
        create_topic(handle, topic, args.partitions, replication)
        cpu0 = handle.cpu_s()
        record = {"broker": handle.name, "phase": "produce", "acks": acks, "round": round_no,
                  "replication_factor": replication, "messages": args.messages, "size": args.size}
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
            consumed = {"broker": handle.name, "phase": "consume", "round": round_no,
                        "replication_factor": replication}
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
    workdir = Path(tempfile.mkdtemp(prefix="kbroker-bench-cluster-"))
    records: list[dict] = []
    handles: list[ClusterHandle] = []
    zookeeper = None
    try:
        raw = storage.raw_write(workdir, 256 * MIB, MIB)
        emit({"measure": "disk_seq_write_mb_s", "value": round(raw, 1)})
        zookeeper = ZooKeeperServer(workdir / "zookeeper")
        zookeeper.start()
        cluster = start_cluster(workdir, zookeeper)
        handles.append(cluster)
        single = start_single("kbroker", workdir)
        handles.append(single)
        tansu = None
        if not args.no_tansu:
            tansu = start_single("tansu", workdir)
            handles.append(tansu)
        for round_no in range(args.rounds):
            log(f"round {round_no + 1}/{args.rounds}")
            records += measure(args, cluster, 3, round_no)
            records += measure(args, single, 1, round_no)
            if tansu is not None:
                records += measure(args, tansu, 1, round_no)
        summary: dict = {"summary": True, "messages": args.messages, "size": args.size,
                         "partitions": args.partitions, "disk_seq_write_mb_s": round(raw, 1)}
        for handle in handles:
            for acks in ("1", "all"):
                summary[f"{handle.name}_acks_{acks}_msgs_s"] = best(records, handle.name, "produce", acks)
            summary[f"{handle.name}_consume_msgs_s"] = best(records, handle.name, "consume")
        a1, aall = summary.get("kbroker_3x_rf3_acks_1_msgs_s"), summary.get("kbroker_3x_rf3_acks_all_msgs_s")
        if a1 and aall:
            summary["acks_all_over_acks_1"] = round(aall / a1, 3)
            # three replicas write every byte on this one disk: a third of it is the cluster's limit
            summary["cluster_acks_all_fraction_of_disk_third"] = round(aall * args.size / 1e6 / (raw / 3), 3)
        emit(summary)
    finally:
        for handle in handles:
            for broker in handle.brokers:
                broker.stop()
        if zookeeper is not None:
            zookeeper.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
