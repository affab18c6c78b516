"""kbroker's benchmark suite: one entry point, the machine's limits first, kbroker and Tansu side by side.

    python -m bench                       # every sweep, single broker and 3-broker cluster, under 10 minutes
    python -m bench --quick --brokers kbroker
    python -m bench --sweeps base --topologies single --sizes 1024 --acks 1,all
    python -m bench --list                # every entry point of bench/ and what it measures; the scenarios, sweeps
    python -m bench --brokers kbroker,kbroker=../before --rounds 3   # this tree against a worktree, alternating

Each run first measures the machine's limits (bench.suite.limits: sequential disk write, loopback TCP throughput and
round trip). Then for every target (kbroker and Tansu as single brokers, kbroker as a 3-broker ZooKeeper-mode
cluster with replication factor 3 and min.insync.replicas 2; each started fresh: bench.harness.targets) it runs the
sweeps, each on fresh topics:

  base         --sizes x --acks, every scenario, --partitions partitions
  compression  --codecs at 1 KiB, acks=1: produce and consume
  partitions   --partition-counts at 1 KiB, acks=1: produce and consume
  clients      --client-counts producer processes, then as many consumer processes, at 1 KiB, acks=1, over
               max(--client-counts) partitions (bench.suite.clients)
  security     produce and consume at 1 KiB, acks=1 over PLAINTEXT, SSL and SASL_SSL (SCRAM-SHA-512), on one
               kbroker with the three listeners (bench.harness.security); Tansu has no TLS, its cells stay empty
  host         (only when named) one server's kbroker serve with broker.processes = N = 1, 2, 4, ... up to its
               cores, on a local ZooKeeper: max MB/s and T(N)/T(1), then the same paced load for every N
               (--host-offered x N=1's max) and broker CPU-seconds per million records over all processes
               (bench.suite.host_sweep, which says how cores are split between brokers and clients)
  controller   (only when named) 3 kbroker brokers on a local ZooKeeper, for every --controller-partitions N:
               create N partitions and N more on top, delete them, a controlled shutdown, a kill -9 and election,
               a controller failover; seconds and the controller's CPU per thousand partitions
               (bench.suite.controller)

The scenarios:

  produce     --messages values (capped at --max-bytes) as fast as confluent-kafka sends them (linger.ms 5,
              batch.size 1 MiB); MB/s and msgs/s, as a fraction of the disk and the TCP limit. With acks=0 the
              clock stops when the broker serves every partition's last message. Before it, twice what every
              replica will write is touched and freed (host_sweep.warm_pages: this VM's fresh pages cost a host
              fault each, and appends to fresh page cache ran at 0.23 GB/s here against 2 GB/s on used pages).
  consume     the produce scenario's topic read back from offset 0 (assign, no group), each partition's offsets
              checked to run 0, 1, 2, ...; fraction of the TCP limit
  latency     produce at a fixed --rate for --seconds: send-to-acknowledgement p50/p99/p999 (ms), the rate
              offered and the acknowledgement rate achieved (msgs/s), how long the flush after the last send
              took, and whether a backlog built up (bench.harness.latency.pacing: the target fell behind the rate, so
              the percentiles measure the client's queue)
  e2e         the same with a consumer in the same process: send-to-receive p50/p99/p999 (ms), the receive
              rate achieved, the wait for the last receipt after the last send, and the backlog flag

--rounds N starts every target afresh N times, the order turned round each round (slow drift of a shared machine
hits every target alike); then each figure's median over the rounds is emitted too (kind "median").

Output: JSON lines on stdout and in <out>/bench-<time>.jsonl (every result carries its sweep, target, scenario,
size, acks, codec, partitions, clients and the brokers' CPU seconds), a chart <out>/bench-<time>.png, and the
tables in --results-md (bench/RESULTS.md). Figures are comparable within one run only.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from bench.harness import broker_load, catalog, latency, results_meta, security, targets
from bench.harness.results_meta import provenance
from bench.harness.values import text_values
from bench.suite import clients, controller, host_sweep, limits, report

REPO = Path(__file__).resolve().parent.parent
MIB = 1 << 20
SCENARIOS = {
    "produce": "produce throughput (msgs/s, MB/s, fraction of disk and TCP limits)",
    "consume": "consume throughput of the produced topic from offset 0 (fraction of the TCP limit)",
    "latency": "produce latency at a fixed rate: send to acknowledgement, p50/p99/p999, ack rate, backlog",
    "e2e": "end-to-end latency at a fixed rate: send to receive, p50/p99/p999, receive rate, backlog",
}
THROUGHPUT = ("produce", "consume")
RECORDS: list[dict] = []


@dataclass(frozen=True)
class Group:
    """Scenarios that share one set of parameters (and one produce topic: consume reads what produce wrote)."""
    sweep: str
    size: int
    acks: str
    compression: str
    partitions: int
    clients: int
    scenarios: tuple[str, ...]
    protocol: str = "PLAINTEXT"


def emit(record: dict) -> None:
    RECORDS.append(record)
    print(json.dumps(record), flush=True)


def progress(i: int, n: int, what: str) -> None:
    width = 30
    done = int(width * i / max(n, 1))
    print(f"\r[{'#' * done}{'.' * (width - done)}] {i}/{n} {what:<70}", end="" if i < n else "\n",
          file=sys.stderr, flush=True)


def plan(args: argparse.Namespace) -> list[Group]:
    picked = tuple(s for s in SCENARIOS if s in args.scenarios)
    tp = tuple(s for s in picked if s in THROUGHPUT)
    groups: list[Group] = []
    if "base" in args.sweeps:
        groups += [Group("base", size, acks, "none", args.partitions, 1, picked)
                   for size in args.sizes for acks in args.acks]
    if "compression" in args.sweeps:
        groups += [Group("compression", 1024, "1", codec, args.partitions, 1, tp) for codec in args.codecs]
    if "partitions" in args.sweeps:
        groups += [Group("partitions", 1024, "1", "none", n, 1, tp) for n in args.partition_counts]
    if "clients" in args.sweeps:
        groups += [Group("clients", 1024, "1", "none", max(args.client_counts), n, tp) for n in args.client_counts]
    if "security" in args.sweeps:
        groups += [Group("security", 1024, "1", "none", args.partitions, 1, tp, protocol)
                   for protocol in security.PROTOCOLS]
    return [g for g in groups if g.scenarios]


def tp_args(args: argparse.Namespace, g: Group, messages: int) -> argparse.Namespace:
    return argparse.Namespace(messages=messages, size=g.size, partitions=g.partitions, linger_ms=5,
                              batch_bytes=MIB, fetch_partition_bytes=MIB, phase_timeout=args.phase_timeout,
                              compression=g.compression, values=text_values(g.size),
                              stall_timeout=args.stall_timeout)


def wait_until_held(target, topic: str, partitions: int, messages: int, timeout: float) -> None:
    """acks=0 gets no acknowledgement: the produce is done when the broker serves each partition's last message.
    Read by fetching at that offset (Tansu 0.6's ListOffsets answered a high watermark of 1 for 2,000 messages)."""
    last = {p: c - 1 for p, c in enumerate(clients.split(messages, partitions)) if c}
    consumer = Consumer({"bootstrap.servers": target.bootstrap, "group.id": "bench-acks0",
                         "enable.auto.commit": False, "auto.offset.reset": "error", "fetch.wait.max.ms": 1,
                         "fetch.error.backoff.ms": 1})
    try:
        consumer.assign([TopicPartition(topic, p, o) for p, o in last.items()])
        deadline = time.monotonic() + timeout
        while last:
            m = consumer.poll(0.01)
            if m is not None and m.error() is None and m.offset() >= last.get(m.partition(), 1 << 62):
                del last[m.partition()]
                consumer.incremental_unassign([TopicPartition(topic, m.partition())])
            elif m is not None and m.error() is not None:  # not there yet (out of range): ask again
                time.sleep(0.001)
                consumer.assign([TopicPartition(topic, p, o) for p, o in last.items()])
            if time.monotonic() > deadline:
                raise RuntimeError(f"acks=0: partitions {sorted(last)} lack their last message after {timeout}s")
    finally:
        consumer.close()


def throughput_figures(r: dict, lim: dict, replication: int, scenario: str) -> dict:
    mb = r["bytes"] / r["elapsed_s"] / 1e6
    out = {"messages": r["messages"], "msgs_s": round(r["messages"] / r["elapsed_s"]), "mb_s": round(mb, 2),
           "elapsed_s": round(r["elapsed_s"], 3)}
    if scenario == "produce":
        out["frac_disk"] = round(mb * replication / lim["disk_write_mb_s"], 4)
    out["frac_tcp"] = round(mb / lim["tcp_mb_s"], 4)
    return out


def run_scenario(args, target, g: Group, scenario: str, topics: dict, lim: dict) -> dict:
    messages = max(1, min(args.messages, args.max_bytes // g.size))
    a = tp_args(args, g, messages)
    if scenario == "produce":
        # What the run will write (every replica's copy) touched once and freed just before: on a VM that hands
        # freed memory back to its host (this one) the page cache would otherwise land on fresh pages, a host fault
        # each, charged to whichever append reaches them first (host_sweep.warm_pages). On bare metal: a second.
        host_sweep.warm_pages(min(2 * messages * g.size * target.replication, host_sweep.available_bytes() // 2))
        started = time.perf_counter()
        if g.sweep == "clients":
            r = clients.run("produce", a, target, topics["produce"], g.acks, g.clients)
        else:
            r = broker_load.produce(a, target, topics["produce"], g.acks)
        if g.acks == "0":
            wait_until_held(target, topics["produce"], g.partitions, messages, args.stall_timeout)
            r["elapsed_s"] = time.perf_counter() - started
        return throughput_figures(r, lim, target.replication, scenario)
    if scenario == "consume":
        if "produce" not in g.scenarios:
            broker_load.produce(a, target, topics["produce"], g.acks if g.acks != "0" else "1")
        if g.sweep == "clients":
            r = clients.run("consume", a, target, topics["produce"], g.acks, g.clients)
        else:
            r = broker_load.consume(a, target, topics["produce"])
        return throughput_figures(r, lim, target.replication, scenario)
    if scenario == "latency":
        paced = latency.paced_run(target, topics["latency"], g.acks, g.size, args.rate, args.seconds)
        return {"rate": args.rate, **paced.figures()}
    return {"rate": args.rate, **latency.end_to_end(target, topics["e2e"], g.acks, g.size, args.rate, args.seconds,
                                                    g.partitions)}


def run_target(args: argparse.Namespace, plain_target, groups: list[Group], lim: dict, step: list,
               total: int) -> None:
    for g in groups:
        base = {"kind": "result", "sweep": g.sweep, "target": plain_target.label, "broker": plain_target.name,
                "topology": plain_target.topology, "size": g.size, "acks": g.acks, "compression": g.compression,
                "partitions": g.partitions, "clients": g.clients, "protocol": g.protocol}
        target = plain_target.via(g.protocol)
        if target is None:  # no such listener (Tansu has no TLS): an empty cell, not an error
            for scenario in g.scenarios:
                step[0] += 1
                emit({**base, "scenario": scenario, "skipped": f"{plain_target.name} has no {g.protocol} listener"})
            continue
        tag = (f"{g.sweep}-s{g.size}-a{g.acks}-{g.compression}-p{g.partitions}-c{g.clients}-{g.protocol}"
               f"-{time.monotonic_ns() % 10**9}")
        topics = {s: f"bench-{s}-{tag}" for s in ("produce", "latency", "e2e")
                  if s in g.scenarios or (s == "produce" and "consume" in g.scenarios)}
        try:
            broker_load.create_topics(target, list(topics.values()), g.partitions, timeout=args.phase_timeout,
                                     replication=target.replication, config=target.topic_config)
        except Exception as exc:
            for scenario in g.scenarios:
                step[0] += 1
                emit({**base, "scenario": scenario, "error": f"topic creation: {type(exc).__name__}: {exc}"})
            continue
        for scenario in g.scenarios:
            step[0] += 1
            progress(step[0], total, f"{target.label} {g.sweep} {scenario} size={g.size} acks={g.acks} "
                                     f"{g.compression} p={g.partitions} c={g.clients}")
            rec = {**base, "scenario": scenario}
            cpu0 = target.cpu_s()
            try:
                rec.update(run_scenario(args, target, g, scenario, topics, lim))
                if rec.get("p50_ms"):
                    rec["frac_rtt"] = round(lim["tcp_rtt_us"] / 1000 / rec["p50_ms"], 4)
            except Exception as exc:  # a broker failing the load is a result, not a crash of the bench
                rec["error"] = f"{type(exc).__name__}: {exc}"
            rec["broker_cpu_s"] = round(target.cpu_s() - cpu0, 2)
            if not target.alive():
                rec.setdefault("error", "a broker process died")
            emit(rec)
        try:
            broker_load.delete_topics(target, list(topics.values()))
        except Exception:
            pass


def csv(value: str, kind=str) -> list:
    return [kind(v.strip()) for v in value.split(",") if v.strip()]


def main(argv: list[str] | None = None) -> int:
    epilog = ("scenarios:\n" + "\n".join(f"  {k:<12} {v}" for k, v in SCENARIOS.items())
              + "\nsweeps:\n" + "\n".join(f"  {k:<12} {v[0]}" for k, v in report.SWEEPS.items())
              + "\ntopologies:\n  single       one broker per --brokers entry\n"
                "  cluster      3 kbroker brokers on a local ZooKeeper, replication factor 3, min.insync.replicas 2")
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0], epilog=epilog,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--list", action="store_true",
                   help="list bench/'s entry points (each with what it measures), this suite's scenarios, sweeps and "
                        "topologies, and exit")
    p.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated (default: all)")
    p.add_argument("--sweeps", default=",".join(report.DEFAULT_SWEEPS),
                   help="comma-separated (default: all but host)")
    p.add_argument("--topologies", default=None, help="single, cluster (default: both)")
    p.add_argument("--brokers", default="kbroker,tansu",
                   help="kbroker, tansu, kbroker=<source tree> (another commit's worktree, run side by side with "
                        "this tree's kbroker; comma-separated)")
    p.add_argument("--rounds", type=int, default=1, help="start and run every target this many times, alternating")
    p.add_argument("--sizes", default="100,1024,10240", help="message sizes in bytes (base sweep)")
    p.add_argument("--acks", default="0,1,all", help="acks values (base sweep)")
    p.add_argument("--partitions", type=int, default=1, help="partitions of the base and compression sweeps")
    p.add_argument("--codecs", default="none,gzip,snappy,lz4,zstd", help="compression sweep")
    p.add_argument("--partition-counts", default="1,10,100,1000", help="partitions sweep")
    p.add_argument("--client-counts", default="1,2,4", help="clients sweep")
    p.add_argument("--messages", type=int, default=600_000, help="messages per throughput scenario")
    p.add_argument("--max-bytes", type=int, default=192 * MIB, help="cap of value bytes per throughput scenario")
    p.add_argument("--rate", type=float, default=1000.0, help="messages/s of the latency scenarios")
    p.add_argument("--seconds", type=float, default=3.0, help="duration of each latency scenario")
    p.add_argument("--limit-bytes", type=int, default=512 * MIB, help="bytes written by the limit measurements")
    p.add_argument("--phase-timeout", type=float, default=120.0, help="seconds a throughput scenario may take")
    p.add_argument("--stall-timeout", type=float, default=10.0,
                   help="seconds without progress after which a consume (or an acks=0 produce's last message) "
                        "is given up as lost")
    p.add_argument("--out", default=str(REPO / "bench" / "results"), help="directory for the JSON lines and PNG")
    p.add_argument("--results-md", default=str(REPO / "bench" / "RESULTS.md"), help="the tables of the latest run")
    p.add_argument("--host-processes", default=None,
                   help="host sweep: broker process counts (default 1, 2, 4, ... up to the broker cores)")
    p.add_argument("--host-partitions", type=int, default=8, help="host sweep: partitions of its topic")
    p.add_argument("--host-replication", type=int, default=1, help="host sweep: replication factor")
    p.add_argument("--host-acks", default="1", help="host sweep: acks")
    p.add_argument("--host-offered", type=float, default=0.5,
                   help="host sweep: the paced load, a fraction of N=1's max msgs/s in the first round")
    p.add_argument("--host-rate", type=float, default=0.0,
                   help="host sweep: the paced load in msgs/s (default: --host-offered x N=1's max)")
    p.add_argument("--host-client-cpus", default=None, metavar="CPULIST",
                   help="host sweep: pin the producer processes to these cores (default: see bench.suite.host_sweep)")
    p.add_argument("--host-seconds", type=float, default=15.0, help="host sweep: seconds of the paced load")
    p.add_argument("--host-clients", type=int, default=0,
                   help="host sweep: producer processes (default: 1 when clients share the brokers' cores, else "
                        "one per client core)")
    p.add_argument("--host-profile", default=None, metavar="DIR",
                   help="host sweep: py-spy record every broker during the paced phase, stacks into DIR")
    p.add_argument("--controller-partitions", default="100,1000",
                   help="controller sweep: partitions per batch, in topics of 4 with replication factor 3")
    p.add_argument("--controller-step-timeout", type=float, default=900.0,
                   help="controller sweep: seconds one step may take before it is an error")
    p.add_argument("--quick", action="store_true", help="tiny sizes for a smoke test (seconds, not minutes)")
    args = p.parse_args(argv)
    if args.list:
        print("entry points (each with its docstring's first line):\n" + catalog.listing() + "\n" + epilog)
        return 0
    if args.quick:
        args.sizes, args.acks, args.messages, args.rate, args.seconds = "100", "0,1", 2000, 200.0, 1.0
        args.codecs, args.partition_counts, args.client_counts = "none,lz4", "1,4", "1,2"
        args.limit_bytes = 16 * MIB
        args.host_seconds = 3.0
    try:
        args.sizes = csv(args.sizes, int)
        args.partition_counts = csv(args.partition_counts, int)
        args.client_counts = csv(args.client_counts, int)
        args.controller_partitions = csv(args.controller_partitions, int)
    except ValueError as exc:
        p.error(f"sizes and counts are comma-separated integers: {exc}")
    args.acks, args.codecs = csv(args.acks), csv(args.codecs)
    args.scenarios, args.sweeps = csv(args.scenarios), csv(args.sweeps)
    topologies = csv(args.topologies or ",".join(targets.TOPOLOGIES))
    try:
        trees = dict(broker_load.parse_broker(b) for b in csv(args.brokers))
    except ValueError as exc:
        p.error(str(exc))
    brokers = list(trees)
    for what, given, known in (("scenarios", args.scenarios, SCENARIOS), ("sweeps", args.sweeps, report.SWEEPS),
                               ("topologies", topologies, targets.TOPOLOGIES),
                               ("acks", args.acks, ("0", "1", "all", "-1")),
                               ("codecs", args.codecs, ("none", "gzip", "snappy", "lz4", "zstd"))):
        unknown = [v for v in given if v not in known]
        if unknown:
            p.error(f"unknown {what} {unknown}; choose from {', '.join(known)}")
    if any(n < 1 for n in args.sizes + args.partition_counts + args.client_counts + args.controller_partitions):
        p.error("sizes, partition counts and client counts are at least 1")
    groups = plan(args)
    pairs = [(b, t) for t in topologies for b in brokers if t == "single" or b.startswith("kbroker")]
    runs = [run for r in range(max(args.rounds, 1)) for run in (pairs if r % 2 == 0 else pairs[::-1])]
    if not groups:
        runs = []
    host = "host" in args.sweeps
    if host:
        try:
            host_sweep.process_counts(len(host_sweep.core_split(sorted(os.sched_getaffinity(0)))[0]),
                                      args.host_processes)
        except ValueError as exc:
            p.error(str(exc))
    ctrl = "controller" in args.sweeps
    if not runs and not host and not ctrl:
        p.error("nothing to run: the scenarios, sweeps, topologies and brokers leave no benchmark")
    command = " ".join(["python -m bench", *(argv if argv is not None else sys.argv[1:])])

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    workdir = Path(tempfile.mkdtemp(prefix="kbroker-bench-", dir=REPO))
    started = time.monotonic()
    columns: list[str] = []
    try:
        lim = limits.measure(workdir, args.limit_bytes, 200 if args.quick else 2000)
        emit(lim)
        per_run = sum(len(g.scenarios) for g in groups)
        total = per_run * len(runs)
        step = [0]
        for name, topology in runs:
            try:
                target = targets.start(name, topology, workdir, secure="security" in args.sweeps, tree=trees[name])
            except Exception as exc:
                emit({"kind": "result", "broker": name, "topology": topology, "scenario": "start",
                      "error": f"{type(exc).__name__}: {exc}"})
                step[0] += per_run
                continue
            if target.label not in columns:
                columns.append(target.label)
            try:
                run_target(args, target, groups, lim, step, total)
            finally:
                target.stop()
        if host:
            host_sweep.run(args, workdir, emit)
        if ctrl:
            controller.run(args.controller_partitions, workdir, emit, args.controller_step_timeout)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    elapsed = time.monotonic() - started
    results = [r for r in RECORDS if r.get("kind") == "result" and "sweep" in r
               and r["sweep"] not in ("host", "controller")]
    # host: its medians are host_sweep's own; controller: steps, not scenarios (a table of their own)
    host_results = [r for r in RECORDS if r.get("sweep") in ("host", "controller")]
    for ratio in report.security_ratios(results):
        emit(ratio)
    if args.rounds > 1:  # the tables and the chart show each cell's median over the rounds
        results = report.medians(results)
        for median in results:
            emit(median)
    emit({"kind": "summary", "elapsed_s": round(elapsed, 1), "results": len(results) + len(host_results),
          "errors": sum(1 for r in RECORDS if "error" in r), **provenance(sys.argv),
          "trees": {name: results_meta.commit(tree) for name, tree in trees.items() if tree is not None}})
    jsonl = out / f"bench-{stamp}.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    report.write_chart(out / f"bench-{stamp}.png", results, columns)
    report.write_markdown(Path(args.results_md), lim, results + host_results, columns, command, elapsed)
    print(f"# wrote {jsonl}, {out / f'bench-{stamp}.png'}, {args.results_md}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
