"""What the metrics cost the produce path: a broker with metrics on against one with them off, same load.

One broker with ``metrics.enabled=true`` and one with ``metrics.enabled=false`` (the hooks then skip every count and
timing), run side by side, driven in alternation by the same confluent-kafka load, round after round, so drift hits
both.

    python -m bench.experiments.metrics_overhead [--rounds 9] [--messages 100000] [--size 100]

Two load shapes per round, each to a fresh topic of one partition, acks=1:

  batched         linger.ms=5, batches up to 1 MiB: few, large Produce requests (the usual load)
  small_requests  batch.num.messages=10: a Produce request per ten records, the per-request hooks'
                  worst case (request timing costs per request, the byte counters per partition)

A third broker, ``kbroker_off_control``, is configured as "off" is: on this shared 2-core machine single
rounds swing by +-30%, and control against off shows how far two identical brokers differ in the same
run, the floor under which on against off says nothing.

Each phase line has messages/s and the broker's CPU seconds per million messages. The last line is the
summary, per shape, for on against off and for control against off: ``ratio`` = the median over the rounds
of the rate ratio within a round (runs of a round are adjacent in time, so drift cancels best there;
1.0: no cost, below 1: slower), each round's ratio, the median rates, the median broker CPU per million
messages and their ``cpu_ratio`` (the broker's own work, less sensitive to the client's share of the CPU).
The "on" broker also serves GET /metrics, scraped once at the end to check it counted every message.

``--py-spy``: after the rounds, one more phase of each shape (ten times as many messages) on the "on" broker
under py-spy, and the share of
its busy samples spent in the hooks (``kbroker/metrics`` and the lines of the reactor and the produce/fetch
handlers that feed it): what the metrics cost, read off the broker itself rather than off a noisy rate.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path

from confluent_kafka import Producer

from bench.harness.broker_load import FRAME, BrokerProcess, PySpy, create_topics, emit, log, start_broker
from bench.harness.broker_process import REPO, free_port
from bench.harness.results_meta import header

# CONTROL: a second broker without metrics (how far two identical brokers differ in this run)
ON, OFF, CONTROL = "kbroker_on", "kbroker_off", "kbroker_off_control"
SHAPES = {
    "batched": {"linger.ms": 5, "batch.size": 1 << 20, "batch.num.messages": 100_000},
    "small_requests": {"linger.ms": 0, "batch.num.messages": 10},
}


def produce(broker: BrokerProcess, topic: str, shape: dict, messages: int, size: int, timeout: float) -> float:
    """Seconds to get every delivery report in."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "1", "enable.idempotence": False,
                         "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1 << 20,
                         "message.timeout.ms": int(timeout * 1000), **shape})
    value = (b"0123456789abcdef" * (size // 16 + 1))[:size]
    failed = [0]

    def on_delivery(err, _msg) -> None:
        if err is not None:
            failed[0] += 1

    start = time.perf_counter()
    for i in range(messages):
        while True:
            try:
                producer.produce(topic, value, partition=0, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.005)
        if i & 1023 == 0:
            producer.poll(0)
    left = producer.flush(timeout)
    elapsed = time.perf_counter() - start
    if left or failed[0]:
        raise RuntimeError(f"{broker.name}: {left} undelivered, {failed[0]} failed")
    return elapsed


PROFILED = 10  # the profiled phase sends this many times --messages: thousands of busy samples

# where the hooks are: every line of these files that feeds or tests for the metrics
HOOK_FILES = ("kbroker/network/connection.py", "kbroker/network/responses.py",  # a timed answer's queueing
              "kbroker/handlers/produce.py", "kbroker/handlers/fetch.py",
              # the data path's meters live there
              "kbroker/replicas/replica_manager.py", "kbroker/replication/fetch_read.py")
HOOK_LINE = re.compile(r"metrics|\.received|\.dispatched|\.returned|\.ready_at|\.queued|\.sent\b|_sending|fetch_key")


def hook_lines() -> list[tuple[str, int]]:
    out = []
    for rel in HOOK_FILES:
        for number, text in enumerate((REPO / rel).read_text().splitlines(), 1):
            stripped = text.strip()
            if HOOK_LINE.search(stripped) and not stripped.startswith(("#", "from ", "import ")):
                out.append((rel, number))
    return out


def hook_share(path: Path) -> dict:
    """Busy samples of a py-spy raw profile, and those with a hook on their stack."""
    lines = hook_lines()
    busy = hooked = 0
    for row in path.read_text().splitlines():
        stack, _, count = row.rpartition(" ")
        frames = [m for m in (FRAME.match(raw.strip()) for raw in stack.split(";")) if m]
        if not frames or not count.isdigit() or frames[-1]["func"].startswith("EpollSelector.select"):
            continue  # idle: the loop waits for sockets
        busy += int(count)
        if any(m["file"].endswith("kbroker/metrics/registry.py") or m["func"] == "Connection._timed_answers_sent"
               or any(m["file"].endswith(rel) and m["line"] == str(n) for rel, n in lines) for m in frames):
            hooked += int(count)
    return {"busy_samples": busy, "hook_samples": hooked,
            "hooks_pct_of_broker_cpu": round(100 * hooked / busy, 2) if busy else None}


def scrape_messages_in(port: int, topic_prefix: str) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    total = 0
    for line in text.splitlines():
        if line.startswith(f'kafka_server_brokertopicmetrics_messagesin_total{{topic="{topic_prefix}'):
            total += int(float(line.rsplit(" ", 1)[1]))
    return total


def summarize(runs: dict[tuple[str, str], list[tuple[float, float]]], shape: str, a: str, b: str) -> dict:
    """a against b for one shape: the median of the per-round rate ratios, and of the CPU per message."""
    paired = [ra[0] / rb[0] for ra, rb in zip(runs[(shape, a)], runs[(shape, b)], strict=True)]
    cpu_a = statistics.median(c for _, c in runs[(shape, a)])
    cpu_b = statistics.median(c for _, c in runs[(shape, b)])
    return {"ratio": round(statistics.median(paired), 3), "round_ratios": [round(r, 3) for r in paired],
            "messages_per_s": [round(statistics.median(r for r, _ in runs[(shape, x)])) for x in (a, b)],
            "cpu_s_per_million": [round(cpu_a, 3), round(cpu_b, 3)],
            "cpu_ratio": round(cpu_a / cpu_b, 3) if cpu_b else None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--messages", type=int, default=100_000, help="messages per phase")
    parser.add_argument("--size", type=int, default=100, help="value bytes")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds a phase may take")
    parser.add_argument("--py-spy", action="store_true", help="then profile the metrics broker (see above)")
    args = parser.parse_args(argv)
    print(json.dumps(header(__file__, argv)), flush=True)
    profiles: dict[str, dict] = {}
    status_port = free_port()
    with tempfile.TemporaryDirectory(prefix="metrics-overhead-", dir=Path(__file__).resolve().parents[2]) as tmp:
        work = Path(tmp)
        brokers: list[BrokerProcess] = []
        runs: dict[tuple[str, str], list[tuple[float, float]]] = {}
        try:
            for name, extra in ((ON, {"metrics.enabled": "true", "status.listener": f"http://127.0.0.1:{status_port}"}),
                                (OFF, {"metrics.enabled": "false"}), (CONTROL, {"metrics.enabled": "false"})):
                brokers.append(start_broker(name, None, work, extra))
            for round_no in range(args.rounds):
                order = brokers[round_no % 3:] + brokers[:round_no % 3]  # who goes first rotates
                for shape_name, shape in SHAPES.items():
                    for broker in order:
                        topic = f"overhead-{shape_name}-r{round_no}"
                        create_topics(broker, [topic], 1)
                        os.sync()  # the page cache's writeback is paid by whoever writes next: not this run
                        cpu_before = sum(broker.cpu())
                        elapsed = produce(broker, topic, shape, args.messages, args.size, args.timeout)
                        cpu = sum(broker.cpu()) - cpu_before
                        rate = args.messages / elapsed
                        cpu_per_million = cpu / args.messages * 1e6
                        runs.setdefault((shape_name, broker.name), []).append((rate, cpu_per_million))
                        emit({"round": round_no, "shape": shape_name, "broker": broker.name,
                              "messages_per_s": round(rate), "broker_cpu_s_per_million": round(cpu_per_million, 3)})
            if args.py_spy:
                on = brokers[0]
                for shape_name, shape in SHAPES.items():
                    topic = f"overhead-{shape_name}-profiled"
                    create_topics(on, [topic], 1)
                    spy = PySpy(work, on.pid, f"profile-{shape_name}")
                    produce(on, topic, shape, PROFILED * args.messages, args.size, PROFILED * args.timeout)
                    spy.finish()
                    assert spy.path is not None
                    profiles[shape_name] = hook_share(spy.path)
            counted = scrape_messages_in(status_port, "overhead-")
            expected = (args.rounds + PROFILED * args.py_spy) * len(SHAPES) * args.messages
            if counted != expected:
                raise RuntimeError(f"GET /metrics counted {counted} messages in, not {expected}")
        finally:
            for broker in brokers:
                broker.stop()
    summary: dict = {"summary": True, "rounds": args.rounds, "messages": args.messages, "size": args.size}
    for shape_name in SHAPES:
        summary[shape_name] = {"on_vs_off": summarize(runs, shape_name, ON, OFF),
                               "control_vs_off": summarize(runs, shape_name, CONTROL, OFF)}
        if shape_name in profiles:
            summary[shape_name]["on_profiled"] = profiles[shape_name]
    print(json.dumps(summary), flush=True)
    log(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
