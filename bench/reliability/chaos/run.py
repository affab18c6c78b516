"""One chaos run: start the cluster, run the workload, inject faults one at a time, heal, check, summarise.

Prints JSON lines: one per fault (``"event": "fault"``), then ``"event": "summary"``; a failing run also prints
its seed and its whole fault timeline (``"event": "timeline"``)."""
from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import NewTopic

from bench.reliability.chaos import checks
from bench.reliability.chaos.cluster import ChaosCluster
from bench.reliability.chaos.faults import FAULTS, KINDS, Schedule
from bench.reliability.chaos.hosts import HostModeCluster
from bench.reliability.chaos.workload import PARTITIONS, PLAIN_TOPICS, TXN_IN, TXN_OUT, Records, Workload

DATA_TOPICS = [*PLAIN_TOPICS, TXN_IN, TXN_OUT]
INTERNAL_TOPICS = ["__consumer_offsets", "__transaction_state"]
HEAL_BOUND_S = 60.0  # after the last fault: every partition led with its full ISR within this


@dataclass
class Options:
    minutes: float = 10.0
    seed: int = 0
    interval: float = 10.0
    faults: list[str] = field(default_factory=lambda: list(KINDS))
    brokers: int = 3
    rate: float = 40.0
    workdir: Path | None = None
    heal_bound_s: float = HEAL_BOUND_S
    every_kind: bool = False  # keep injecting past the end until every kind of ``faults`` ran once
    host_mode: bool = False  # three servers of two broker processes each (bench.reliability.chaos.hosts), not brokers


def _emit(out: TextIO, line: dict[str, Any]) -> None:
    out.write(json.dumps(line, default=str) + "\n")
    out.flush()


def _create_topics(cluster: ChaosCluster) -> None:
    admin = cluster.admin()
    futures = admin.create_topics([NewTopic(t, num_partitions=PARTITIONS, replication_factor=3,
                                            config={"min.insync.replicas": "2"}) for t in DATA_TOPICS],
                                  operation_timeout=60, request_timeout=60)
    for future in futures.values():
        future.result(60)
    # the offsets topic: created on the first FindCoordinator
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "chaos-warm-up"})
    try:
        consumer.committed([TopicPartition(TXN_IN, 0)], timeout=60)
    finally:
        consumer.close()


def _restart_dead(cluster: ChaosCluster) -> list[int]:
    """Brokers that exited on their own (not by a fault's hand) are started again; they are reported."""
    dead = [b for b in cluster.brokers if not b.alive()]
    for broker in dead:
        broker.start()
    return [b.id for b in dead]


def run(options: Options, out: TextIO = sys.stdout) -> dict[str, Any]:
    """The whole run; returns the summary (``summary["ok"]`` is the verdict)."""
    workdir = Path(tempfile.mkdtemp(prefix="kbroker-chaos-", dir=options.workdir))
    # the work dir (broker output, ZooKeeper) is kept when the run fails, removed when it passes
    cluster = HostModeCluster(workdir) if options.host_mode else ChaosCluster(workdir, options.brokers)
    timeline: list[dict[str, Any]] = []
    summary: dict[str, Any] = {"event": "summary", "seed": options.seed, "minutes": options.minutes,
                               "interval_s": options.interval, "brokers": len(cluster.brokers),
                               "settings": {"replication.factor": 3, "min.insync.replicas": 2,
                                            "unclean.leader.election.enable": False,
                                            "zookeeper.session.timeout.ms": 6000,
                                            "producers": "idempotent, acks=all"}}
    if options.host_mode:
        summary["host_mode"] = {server.host: [p.id for p in server.processes] for server in cluster.servers}
    try:
        cluster.start()
        _create_topics(cluster)
        records = Records()
        workload = Workload(cluster.bootstrap, records, options.rate, workdir / "txn-client.log")
        workload.start()
        schedule = Schedule(options.faults, options.interval, options.seed)
        started = time.monotonic()
        end = started + options.minutes * 60
        time.sleep(min(5.0, options.interval))
        seen: set[str] = set()
        # until the end; with ``every_kind``, on past it until each kind has been injected once
        while time.monotonic() < end or (options.every_kind and not seen >= set(options.faults)):
            gap = schedule.next_gap()
            if time.monotonic() < end:
                time.sleep(max(0.0, min(gap, end - time.monotonic())))
            if time.monotonic() >= end and not (options.every_kind and not seen >= set(options.faults)):
                break
            kind = schedule.next_kind()
            seen.add(kind)
            t0 = time.monotonic()
            try:
                detail = FAULTS[kind](cluster, schedule.rng)
            except Exception as exc:  # a fault that could not complete is part of the record, not the end
                detail = {"error": f"{type(exc).__name__}: {exc}"}
            restarted = _restart_dead(cluster)
            entry = {"event": "fault", "n": len(timeline) + 1, "kind": kind, "at_s": round(t0 - started, 1),
                     "took_s": round(time.monotonic() - t0, 1), **detail}
            if restarted:
                entry["restarted_after_exit"] = restarted
            timeline.append(entry)
            _emit(out, entry)
        faults_end = time.monotonic()
        heal_s, why = cluster.wait_healthy(DATA_TOPICS + INTERNAL_TOPICS, options.heal_bound_s)
        summary["heal_s"] = round(heal_s, 1) if heal_s is not None else None
        summary["heal_bound_s"] = options.heal_bound_s
        if heal_s is None:
            summary["not_healed"] = why
            _restart_dead(cluster)
            heal_s, why = cluster.wait_healthy(DATA_TOPICS + INTERNAL_TOPICS, 120)  # still check the data
        time.sleep(3)  # a few acks after healing, so the last window closes
        stuck = workload.stop()
        if stuck:
            summary["workload_threads_stuck"] = stuck
        summary["faults"] = dict(Counter(e["kind"] for e in timeline))
        summary["fault_errors"] = [e for e in timeline if "error" in e]
        summary["client_errors"] = dict(records.errors)
        acks = checks.check_acks(cluster.bootstrap, records, started)
        summary.update({k: acks[k] for k in ("acknowledged", "send_failures", "lost", "offset_mismatch",
                                              "duplicated", "reordered", "log_records")})
        replicas = checks.check_replicas(cluster.bootstrap, {b.id: b.log_dir for b in cluster.brokers},
                                         DATA_TOPICS)
        summary["replica_divergences"] = replicas["replica_divergences"]
        summary["partitions_compared"] = replicas["partitions_compared"]
        summary["unavailability"] = checks.unavailability(records, started, faults_end)
        summary["transactions"] = checks.check_transactions(cluster.bootstrap, records)
        last_txn = max(records.txn_started, default=started)
        summary["transactions"]["last_began_s"] = round(last_txn - started, 1)
        summary["group_offsets"] = checks.check_group_offsets(records)
        summary["examples"] = (acks["examples"] + replicas["examples"] + summary["transactions"].pop("examples")
                               + summary["group_offsets"].pop("examples"))[:20]
        txn = summary["transactions"]
        failures = [name for name, bad in (
            ("lost", acks["lost"]), ("offset_mismatch", acks["offset_mismatch"]),
            ("duplicated", acks["duplicated"]), ("reordered", acks["reordered"]),
            ("replica_divergences", replicas["replica_divergences"]),
            ("aborted_visible", txn["aborted_visible"]), ("committed_incomplete", txn["committed_incomplete"]),
            ("unknown_partial", txn["unknown_partial"]), ("unrecorded_visible", txn["unrecorded_visible"]),
            ("inputs_processed_twice", txn["inputs_processed_twice"]),
            ("offset_regressions", summary["group_offsets"]["offset_regressions"]),
            ("not_healed", 1 if summary["heal_s"] is None else 0),
            ("no_acks", 1 if acks["acknowledged"] == 0 else 0),
            ("workload_stuck", len(stuck))) if bad]
        summary["failures"] = failures
    except Exception:
        summary["failures"] = ["harness_error"]
        summary["harness_error"] = traceback.format_exc()
        summary["broker_tails"] = {b.id: b.tail() for b in cluster.brokers}
    finally:
        cluster.stop(keep_logs=bool(summary.get("failures", True)))
    summary["ok"] = not summary["failures"]
    if not summary["ok"]:
        _emit(out, {"event": "timeline", "seed": options.seed, "faults": timeline})
        summary["workdir"] = str(workdir)
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    _emit(out, summary)
    return summary
