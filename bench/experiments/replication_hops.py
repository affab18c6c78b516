"""Where an acks=all write's time goes, hop by hop across a 3-broker cluster.

Starts a local ZooKeeper and three kbroker processes with hop tracing on (``KBROKER_TRACE_HOPS``, see
``kbroker.metrics.hops``), creates a topic with replication factor 3 and min.insync.replicas 2, produces
``--size``-byte records with acks=all and linger.ms=0 at ``--rate`` per second for ``--seconds`` (the latency
scenario's producer), stops the brokers and lines their trace files up by offset. For each write, with E the
leader's log end after it and F the follower whose fetch moved the high watermark to E (the slower of the two):

    append -> answer      the leader's append until its answer to F's parked fetch is built (woken, read)
    answer -> recv        the answer encoded and sent, F reads and decodes it
    recv -> appended      F appends
    appended -> fetch_out F builds and sends its next fetch
    fetch_out -> fetch_in the fetch crosses to the leader, which reads and decodes it
    fetch_in -> hw        the leader records F's position and moves the high watermark
    hw -> acked           the waiting produce completes
    append -> acked       the whole replication round trip at the leader

Prints one JSON line per hop (p50/p99/p999 in ms) and a summary with the producer's own latencies, its
acknowledgement rate and the brokers' CPU per thousand records.

    python -m bench.experiments.replication_hops [--rate 1000] [--seconds 5] [--size 1024] [--tree ../before]
"""
from __future__ import annotations

import argparse
import bisect
import collections
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench.harness import broker_load, latency
from bench.harness.results_meta import REPO, commit, provenance
from bench.harness.targets import start_cluster
from kbroker.metrics.hops import ENV

TOPIC = "hops"
HOPS = (("append", "answer"), ("answer", "recv"), ("recv", "appended"), ("appended", "fetch_out"),
        ("fetch_out", "fetch_in"), ("fetch_in", "hw"), ("hw", "acked"), ("append", "acked"))

Stream = tuple[list[int], list[int]]  # (offsets, ns): one step's events of one broker pair, in time order


def read_traces(directory: Path) -> dict[tuple[int, str, int], Stream]:
    """(broker id, step, peer) -> that stream of events for TOPIC."""
    streams: dict[tuple[int, str, int], Stream] = collections.defaultdict(lambda: ([], []))
    for path in sorted(directory.glob("hops-*.txt")):
        broker = int(path.name.split("-")[1])
        for line in path.read_text().splitlines():
            ns, step, topic, _partition, offset, peer = line.split()
            if topic != TOPIC:
                continue
            offsets, times = streams[(broker, step, int(peer))]
            offsets.append(int(offset))
            times.append(int(ns))
    return streams


def first_at(stream: Stream | None, offset: int, after_ns: int) -> int | None:
    """When the stream first reached ``offset`` (its offsets never fall in a run without leader changes)."""
    if stream is None:
        return None
    offsets, times = stream
    i = bisect.bisect_left(offsets, offset)
    while i < len(times) and times[i] < after_ns:
        i += 1
    return times[i] if i < len(times) else None


def last_before(stream: Stream | None, before_ns: int) -> int | None:
    if stream is None:
        return None
    times = stream[1]
    i = bisect.bisect_right(times, before_ns)
    return times[i - 1] if i else None


def breakdown(streams: dict[tuple[int, str, int], Stream]) -> tuple[dict[str, list[float]], int]:
    """Per hop, the times (ms) of every traced write; and how many writes were traced whole."""
    leader = next(b for (b, step, _), s in streams.items() if step == "append" and s[0])
    followers = sorted({peer for (b, step, peer) in streams if b == leader and step == "fetch_in"})
    appends = streams[(leader, "append", -1)]
    hops: dict[str, list[float]] = {f"{a}->{b}": [] for a, b in HOPS}
    whole = 0
    for end, t_append in zip(*appends):
        stamps_by_follower = []
        for f in followers:
            s: dict[str, int | None] = {"append": t_append}
            s["answer"] = first_at(streams.get((leader, "answer", f)), end, t_append)
            s["appended"] = first_at(streams.get((f, "appended", leader)), end, t_append)
            s["recv"] = last_before(streams.get((f, "recv", leader)), s["appended"]) if s["appended"] else None
            s["fetch_out"] = first_at(streams.get((f, "fetch_out", leader)), end, t_append)
            s["fetch_in"] = first_at(streams.get((leader, "fetch_in", f)), end, t_append)
            stamps_by_follower.append(s)
        hw = first_at(streams.get((leader, "hw", -1)), end, t_append)
        acked = first_at(streams.get((leader, "acked", -1)), end, t_append)
        complete = [s for s in stamps_by_follower if all(v is not None for v in s.values())]
        if len(complete) != len(followers) or hw is None or acked is None:
            continue
        gating = max(complete, key=lambda s: s["fetch_in"] or 0)
        gating["hw"], gating["acked"] = hw, acked
        whole += 1
        for a, b in HOPS:
            ta, tb = gating[a], gating[b]
            assert ta is not None and tb is not None
            hops[f"{a}->{b}"].append((tb - ta) / 1e6)
    return hops, whole


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rate", type=float, default=1000.0)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--tree", type=Path, help="a kbroker source tree other than this one (e.g. a worktree)")
    p.add_argument("--out", type=Path, help="also append the JSON lines to this file")
    p.add_argument("--keep", type=Path, help="copy the brokers' trace files to this directory")
    args = p.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="kbroker-hops-"))
    traces = workdir / "traces"
    os.environ[ENV] = str(traces)
    lines: list[dict[str, object]] = []
    try:
        cluster = start_cluster(workdir, tree=args.tree)
        try:
            broker_load.create_topics(cluster, [TOPIC], 1, replication=3, config={"min.insync.replicas": "2"})
            latency.paced_produce(cluster, TOPIC, "all", args.size, 100, 1)  # leaders, fetchers and sessions settle
            cpu0, wall0 = cluster.cpu_s(), time.monotonic()
            lat, failed = latency.paced_produce(cluster, TOPIC, "all", args.size, args.rate, args.seconds)
            cpu = cluster.cpu_s() - cpu0
            wall = time.monotonic() - wall0
        finally:
            cluster.stop()
        if args.keep is not None:
            shutil.copytree(traces, args.keep, dirs_exist_ok=True)
        hops, whole = breakdown(read_traces(traces))
        meta = provenance(sys.argv)
        for name, values in hops.items():
            lines.append({"kind": "hop", "hop": name, **latency.percentiles([v / 1000 for v in values]), **meta})
        lines.append({"kind": "summary", "rate": args.rate, "seconds": args.seconds, "size": args.size,
                      "tree": str(args.tree or "."), "tree_commit": commit(args.tree or REPO),
                      "acknowledged": len(lat), "failed": failed,
                      "traced_whole": whole, "ack_rate": round(len(lat) / wall, 1),
                      "broker_cpu_s_per_k_records": round(cpu / max(1, len(lat)) * 1000, 3),
                      **{f"client_{k}": v for k, v in latency.percentiles(lat).items()}, **meta})
    finally:
        os.environ.pop(ENV, None)
        shutil.rmtree(workdir, ignore_errors=True)
    for line in lines:
        print(json.dumps(line))
    if args.out is not None:
        with args.out.open("a") as f:
            for line in lines:
                f.write(json.dumps(line) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
