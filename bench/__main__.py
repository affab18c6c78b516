"""kbroker's benchmark suite: one entry point, the machine's limits first, kbroker and Tansu side by side.

    python -m bench                       # default scenarios, kbroker and Tansu, under 10 minutes
    python -m bench --quick --brokers kbroker
    python -m bench --list                # the scenarios

Each run first measures the machine's limits: sequential disk write (bench.storage.raw_write, page cache,
no fsync), loopback TCP throughput (one connection, 1 MiB sends, the reader discards) and loopback TCP round
trip (64-byte ping-pong). Then, for every broker (a fresh single broker each: bench.throughput.start_broker),
message size and acks, it runs the selected scenarios on fresh topics:

  produce     --messages values (capped at --max-bytes per scenario) as fast as confluent-kafka sends them;
              MB/s and msgs/s, as a fraction of the disk and the TCP limit
  consume     the produce scenario's topic read back from offset 0 (assign, no group); fraction of TCP
  latency     produce at a fixed --rate for --seconds: send-to-acknowledgement p50/p99/p999 (ms);
              the round trip limit divided by p50 as the fraction
  e2e         produce at --rate for --seconds with a consumer in the same process: send-to-receive
              p50/p99/p999 (ms)

Output: JSON lines on stdout and in <out>/bench-<time>.jsonl, a chart <out>/bench-<time>.png, and the
table in --results-md (bench/RESULTS.md). Figures are comparable within one run only.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from bench import storage, throughput

REPO = Path(__file__).resolve().parent.parent
MIB = 1 << 20
SCENARIOS = {
    "produce": "produce throughput (msgs/s, MB/s, fraction of disk and TCP limits)",
    "consume": "consume throughput of the produced topic from offset 0 (fraction of the TCP limit)",
    "latency": "produce latency at a fixed rate: send to acknowledgement, p50/p99/p999",
    "e2e": "end-to-end latency at a fixed rate: send to receive, p50/p99/p999",
}
RECORDS: list[dict] = []


def emit(record: dict) -> None:
    RECORDS.append(record)
    print(json.dumps(record), flush=True)


def progress(i: int, n: int, what: str) -> None:
    width = 30
    done = int(width * i / max(n, 1))
    print(f"\r[{'#' * done}{'.' * (width - done)}] {i}/{n} {what:<60}", end="" if i < n else "\n",
          file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------ limits

def tcp_throughput(total: int) -> float:
    """MB/s through one loopback TCP connection."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    got = [0]

    def drain() -> None:
        conn, _ = srv.accept()
        with conn:
            while True:
                n = len(conn.recv(4 * MIB))
                if not n:
                    return
                got[0] += n

    t = threading.Thread(target=drain)
    t.start()
    buf = os.urandom(MIB)
    with socket.create_connection(srv.getsockname()) as c:
        start = time.perf_counter()
        sent = 0
        while sent < total:
            c.sendall(buf)
            sent += len(buf)
        c.shutdown(socket.SHUT_WR)
        t.join()
        elapsed = time.perf_counter() - start
    srv.close()
    return got[0] / elapsed / 1e6


def tcp_round_trip(n: int) -> float:
    """Median µs of a 64-byte loopback ping-pong."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def echo() -> None:
        conn, _ = srv.accept()
        with conn:
            while True:
                data = conn.recv(64)
                if not data:
                    return
                conn.sendall(data)

    t = threading.Thread(target=echo)
    t.start()
    times = []
    with socket.create_connection(srv.getsockname()) as c:
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        msg = b"x" * 64
        for _ in range(n):
            start = time.perf_counter()
            c.sendall(msg)
            got = 0
            while got < 64:
                got += len(c.recv(64 - got))
            times.append(time.perf_counter() - start)
    t.join()
    srv.close()
    return statistics.median(times) * 1e6


def limits(args: argparse.Namespace, workdir: Path) -> dict:
    rec = {"kind": "limits",
           "disk_write_mb_s": round(storage.raw_write(workdir, args.limit_bytes, MIB), 1),
           "tcp_mb_s": round(tcp_throughput(args.limit_bytes * 2), 1),
           "tcp_rtt_us": round(tcp_round_trip(2000 if not args.quick else 200), 1)}
    emit(rec)
    return rec


# ------------------------------------------------------------------------------------------------ scenarios

def percentiles(values: list[float]) -> dict:
    if not values:
        return {"p50_ms": None, "p99_ms": None, "p999_ms": None}
    v = sorted(values)

    def q(f: float) -> float:
        return round(v[min(len(v) - 1, int(f * len(v)))] * 1000, 3)

    return {"p50_ms": q(0.50), "p99_ms": q(0.99), "p999_ms": q(0.999)}


def paced_produce(broker, topic: str, acks: str, size: int, rate: float, seconds: float, on_send=None) -> tuple:
    """Send at a fixed rate; returns (acknowledgement latencies in s, failures)."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": acks, "linger.ms": 0,
                         "enable.idempotence": False})
    lat: list[float] = []
    failed = [0]
    pad = b"\0" * max(0, size - 8)
    n = int(rate * seconds)
    start = time.perf_counter()
    for i in range(n):
        due = start + i / rate
        while True:
            now = time.perf_counter()
            if now >= due:
                break
            producer.poll(min(due - now, 0.01))
        sent = time.perf_counter()

        def on_delivery(err, msg, sent=sent) -> None:
            if err is not None:
                failed[0] += 1
            else:
                lat.append(time.perf_counter() - sent)

        producer.produce(topic, struct.pack(">d", sent) + pad, on_delivery=on_delivery)
        producer.poll(0)
    left = producer.flush(30)
    return lat, failed[0] + left


def end_to_end(broker, topic: str, acks: str, size: int, rate: float, seconds: float) -> dict:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"bench-e2e-{time.monotonic_ns()}",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 5, "enable.partition.eof": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    received: list[float] = []
    stop = threading.Event()
    errors: list[str] = []

    def run() -> None:
        while not stop.is_set():
            # poll() returns at the first record (consume(n, timeout) would wait for n records or the timeout)
            m = consumer.poll(0.05)
            batch = [m] if m is not None else []
            for m in batch:
                now = time.perf_counter()
                if m.error() is not None:
                    if m.error().code() != KafkaError._PARTITION_EOF:
                        errors.append(str(m.error()))
                    continue
                received.append(now - struct.unpack(">d", m.value()[:8])[0])

    t = threading.Thread(target=run)
    t.start()
    try:
        _, failed = paced_produce(broker, topic, acks, size, rate, seconds)
        expected = int(rate * seconds) - failed
        deadline = time.monotonic() + 30
        while len(received) < expected and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        t.join()
        consumer.close()
    return {"messages": len(received), "failed": failed, "errors": errors[:3], **percentiles(received)}


def tp_args(args: argparse.Namespace, size: int, messages: int):
    return argparse.Namespace(messages=messages, size=size, partitions=args.partitions, linger_ms=5,
                              batch_bytes=MIB, fetch_partition_bytes=MIB, phase_timeout=args.phase_timeout)


def run_scenarios(args: argparse.Namespace, broker, lim: dict, step: list, total: int) -> None:
    for size in args.sizes:
        for acks in args.acks:
            base = {"kind": "result", "broker": broker.name, "size": size, "acks": acks,
                    "partitions": args.partitions}
            tag = f"s{size}-a{acks}-{time.monotonic_ns() % 10**9}"
            topics = {s: f"bench-{s}-{tag}" for s in ("produce", "latency", "e2e")}
            try:
                throughput.create_topics(broker, list(topics.values()), args.partitions)
            except Exception as exc:
                emit({**base, "scenario": "setup", "error": f"{type(exc).__name__}: {exc}"})
                step[0] += len(args.scenarios)
                continue
            messages = max(1, min(args.messages, args.max_bytes // size))
            for scenario in args.scenarios:
                step[0] += 1
                progress(step[0], total, f"{broker.name} {scenario} size={size} acks={acks}")
                rec = {**base, "scenario": scenario}
                try:
                    if scenario == "produce":
                        r = throughput.produce(tp_args(args, size, messages), broker, topics["produce"], acks)
                        mb = r["bytes"] / r["elapsed_s"] / 1e6
                        rec.update(messages=r["messages"], msgs_s=round(r["messages"] / r["elapsed_s"]),
                                   mb_s=round(mb, 2), frac_disk=round(mb / lim["disk_write_mb_s"], 4),
                                   frac_tcp=round(mb / lim["tcp_mb_s"], 4))
                    elif scenario == "consume":
                        if "produce" not in args.scenarios:
                            throughput.produce(tp_args(args, size, messages), broker, topics["produce"], acks)
                        r = throughput.consume(tp_args(args, size, messages), broker, topics["produce"])
                        mb = r["bytes"] / r["elapsed_s"] / 1e6
                        rec.update(messages=r["messages"], msgs_s=round(r["messages"] / r["elapsed_s"]),
                                   mb_s=round(mb, 2), frac_tcp=round(mb / lim["tcp_mb_s"], 4))
                    elif scenario == "latency":
                        lat, failed = paced_produce(broker, topics["latency"], acks, size, args.rate, args.seconds)
                        rec.update(rate=args.rate, messages=len(lat), failed=failed, **percentiles(lat))
                    elif scenario == "e2e":
                        if acks == "0":
                            continue
                        rec.update(rate=args.rate, **end_to_end(broker, topics["e2e"], acks, size, args.rate,
                                                                args.seconds))
                    if rec.get("p50_ms"):
                        rec["frac_rtt"] = round(lim["tcp_rtt_us"] / 1000 / rec["p50_ms"], 4)
                except Exception as exc:
                    rec["error"] = f"{type(exc).__name__}: {exc}"
                emit(rec)
            try:
                throughput.delete_topics(broker, list(topics.values()))
            except Exception:
                pass


# ------------------------------------------------------------------------------------------------ outputs

def figure(r: dict) -> str:
    if "error" in r:
        return "error"
    if r["scenario"] in ("produce", "consume"):
        frac = r.get("frac_disk", r.get("frac_tcp"))
        return f"{r['mb_s']} MB/s ({r['msgs_s']}/s, {frac:.1%} of {'disk' if 'frac_disk' in r else 'TCP'})"
    if r.get("p50_ms") is None:
        return "-"
    return f"{r['p50_ms']} / {r['p99_ms']} / {r['p999_ms']} ms"


def write_markdown(path: Path, lim: dict, results: list[dict], brokers: list[str], command: str) -> None:
    keys = sorted({(r["scenario"], r["size"], r["acks"]) for r in results},
                  key=lambda k: (list(SCENARIOS).index(k[0]) if k[0] in SCENARIOS else 9, k[1], k[2]))
    by = {(r["broker"], r["scenario"], r["size"], r["acks"]): r for r in results}
    lines = ["# Benchmark results", "",
             f"Written by `{command}` on {time.strftime('%Y-%m-%d %H:%M:%S %Z')}; the latest run only. "
             "Throughput: MB/s of values (msgs/s, fraction of the disk write limit for produce and of the "
             "loopback TCP limit for consume). Latency: p50 / p99 / p999 at a fixed rate.", "",
             f"Machine limits: sequential disk write {lim['disk_write_mb_s']} MB/s, loopback TCP "
             f"{lim['tcp_mb_s']} MB/s, loopback round trip {lim['tcp_rtt_us']} µs.", "",
             "| scenario | size (B) | acks | " + " | ".join(brokers) + " |",
             "|---|---|---|" + "---|" * len(brokers)]
    for s, size, acks in keys:
        cells = [figure(by[(b, s, size, acks)]) if (b, s, size, acks) in by else "-" for b in brokers]
        lines.append(f"| {s} | {size} | {acks} | " + " | ".join(cells) + " |")
    path.write_text("\n".join(lines) + "\n")


def write_chart(path: Path, results: list[dict], brokers: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 5))
    for ax, scenarios, field, ylabel in ((ax1, ("produce", "consume"), "mb_s", "MB/s"),
                                         (ax2, ("latency", "e2e"), "p99_ms", "p99 latency (ms)")):
        labels = sorted({(r["scenario"], r["size"], r["acks"]) for r in results if r["scenario"] in scenarios})
        width = 0.8 / max(len(brokers), 1)
        for i, b in enumerate(brokers):
            vals = []
            for lab in labels:
                r = next((r for r in results if (r["scenario"], r["size"], r["acks"]) == lab and r["broker"] == b),
                         {})
                vals.append(r.get(field) or 0)
            ax.bar([x + i * width for x in range(len(labels))], vals, width, label=b)
        ax.set_xticks([x + width * (len(brokers) - 1) / 2 for x in range(len(labels))])
        ax.set_xticklabels([f"{s}\n{size}B a={a}" for s, size, a in labels], fontsize=7)
        ax.set_ylabel(ylabel)
        ax.legend()
    fig.suptitle("kbroker benchmark (single broker)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ------------------------------------------------------------------------------------------------ main

def main(argv: list[str] | None = None) -> int:
    epilog = "scenarios:\n" + "\n".join(f"  {k:<9} {v}" for k, v in SCENARIOS.items())
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0], epilog=epilog,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--list", action="store_true", help="list the scenarios and exit")
    p.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated (default: all)")
    p.add_argument("--brokers", default="kbroker,tansu", help="kbroker, tansu (comma-separated)")
    p.add_argument("--sizes", default="100,1024,10240", help="message sizes in bytes")
    p.add_argument("--acks", default="1,all", help="acks values (0, 1, all)")
    p.add_argument("--partitions", type=int, default=1)
    p.add_argument("--messages", type=int, default=200_000, help="messages per throughput scenario")
    p.add_argument("--max-bytes", type=int, default=64 * MIB, help="cap of value bytes per throughput scenario")
    p.add_argument("--rate", type=float, default=1000.0, help="messages/s of the latency scenarios")
    p.add_argument("--seconds", type=float, default=3.0, help="duration of each latency scenario")
    p.add_argument("--limit-bytes", type=int, default=512 * MIB, help="bytes written by the limit measurements")
    p.add_argument("--phase-timeout", type=float, default=120.0)
    p.add_argument("--out", default=str(REPO / "bench" / "results"), help="directory for the JSON lines and PNG")
    p.add_argument("--results-md", default=str(REPO / "bench" / "RESULTS.md"), help="the table of the latest run")
    p.add_argument("--quick", action="store_true", help="tiny sizes for a smoke test (seconds, not minutes)")
    args = p.parse_args(argv)
    if args.list:
        print(epilog)
        return 0
    if args.quick:
        args.sizes, args.acks, args.messages, args.rate, args.seconds = "100", "1", 2000, 200.0, 1.0
        args.limit_bytes = 16 * MIB
    args.sizes = [int(s) for s in args.sizes.split(",")]
    args.acks = [a.strip() for a in args.acks.split(",")]
    args.scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    unknown = [s for s in args.scenarios if s not in SCENARIOS]
    if unknown:
        p.error(f"unknown scenarios {unknown}; see --list")
    brokers = [b.strip() for b in args.brokers.split(",") if b.strip()]
    command = " ".join(["python -m bench", *(argv if argv is not None else sys.argv[1:])])

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    workdir = Path(tempfile.mkdtemp(prefix="kbroker-bench-", dir=REPO))
    started = time.monotonic()
    try:
        lim = limits(args, workdir)
        total = len(brokers) * len(args.sizes) * len(args.acks) * len(args.scenarios)
        step = [0]
        for name in brokers:
            try:
                broker = throughput.start_broker(name, None, workdir)
            except Exception as exc:
                emit({"kind": "result", "broker": name, "scenario": "start", "error": f"{type(exc).__name__}: {exc}"})
                step[0] += len(args.sizes) * len(args.acks) * len(args.scenarios)
                continue
            try:
                run_scenarios(args, broker, lim, step, total)
            finally:
                broker.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    results = [r for r in RECORDS if r.get("kind") == "result" and "size" in r]
    emit({"kind": "summary", "elapsed_s": round(time.monotonic() - started, 1), "results": len(results),
          "errors": sum(1 for r in RECORDS if "error" in r)})
    jsonl = out / f"bench-{stamp}.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    write_chart(out / f"bench-{stamp}.png", results, brokers)
    write_markdown(Path(args.results_md), lim, results, brokers, command)
    print(f"# wrote {jsonl}, {out / f'bench-{stamp}.png'}, {args.results_md}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
