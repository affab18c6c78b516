"""Produce latency and throughput while the log cleaner compacts, with the cleaner in a thread or a child process.

Produce while the log cleaner compacts a big topic: the cleaner in a thread of the broker against the cleaner in a
child process (``KBROKER_LOG_CLEANER=thread|process``), in one run.

    python -m bench.experiments.cleaner [--modes thread,process] [--compacted-mb 200] [--rate 5000]
                                        [--seconds 6] [--rounds 1]

For each mode (the order turned round each round) a fresh broker gets two topics ``compacted-latency`` and
``compacted-max`` of --compacted-mb each of --compacted-value-bytes values over --keys keys (cleanup.policy delete
while they fill, so nothing is cleaned yet; small records, as the cleaner's work is per record) and a topic ``load``.
Then, on ``load``, acks=1, --size byte values, confluent-kafka:

  idle_latency / idle_max     no compaction: send-to-acknowledgement latency at a fixed --rate for --seconds, then
                              as fast as the client sends for --seconds (MB/s of values, counted once acknowledged)
  compacting_latency / _max   the same while the broker compacts ``compacted-latency`` (``compacted-max``), altered
                              to cleanup.policy=compact, min.cleanable.dirty.ratio 0.01; the phase starts once the
                              first ``.cleaned`` file is there

Each line has the phase's figures, the CPU seconds of the broker and of its cleaner processes, and
``overlap``: the share of the phase the cleaning lasted (a figure with overlap < 1 is partly idle). After each
compacting phase a line says how long that cleaning took. The summary compares the modes (medians over the rounds):
compacting / idle per mode, and process / thread. JSON lines on stdout. Figures are comparable within one run only.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from bench.harness.broker_load import BrokerProcess, create_topics, proc_cpu, start_broker
from bench.harness.broker_process import REPO
from bench.harness.latency import paced_produce, percentiles
from bench.harness.results_meta import header

MODE_ENV = "KBROKER_LOG_CLEANER"  # kbroker.log.cleaner_threads.MODE_ENV (bench does not import the broker's modules)
LOAD = "load"


def emit(record: dict) -> None:
    print(json.dumps(record), flush=True)


def log(msg: str) -> None:
    print(f"# {msg}", file=sys.stderr, flush=True)


def producer(bootstrap: str) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5, "batch.size": 1 << 20,
                     "queue.buffering.max.kbytes": 1 << 19, "enable.idempotence": False,
                     "message.timeout.ms": 120_000})


def fill(bootstrap: str, topic: str, mb: int, keys: int, size: int) -> None:
    """``mb`` MB of keyed values: every key written about mb * 1e6 / size / keys times."""
    p = producer(bootstrap)
    value = os.urandom(size)
    failed = [0]

    def on_delivery(err, _msg) -> None:
        if err is not None:
            failed[0] += 1

    for i in range(mb * 1_000_000 // size):
        while True:
            try:
                p.produce(topic, value, key=b"key-%07d" % (i % keys), on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.01)
        if i & 1023 == 0:
            p.poll(0)
    if p.flush(120) or failed[0]:
        raise RuntimeError(f"filling {topic}: {failed[0]} deliveries failed")


def max_rate(bootstrap: str, size: int, seconds: float) -> dict:
    """Send as fast as the client can for ``seconds``; the clock stops at the last acknowledgement."""
    p = producer(bootstrap)
    value = b"v" * size
    acked, failed = [0], [0]

    def on_delivery(err, _msg) -> None:
        if err is None:
            acked[0] += 1
        else:
            failed[0] += 1

    start = time.perf_counter()
    end = start + seconds
    i = 0
    while time.perf_counter() < end:
        try:
            p.produce(LOAD, value, on_delivery=on_delivery)
        except BufferError:
            p.poll(0.005)
            continue
        i += 1
        if i & 1023 == 0:
            p.poll(0)
    left = p.flush(60)
    elapsed = time.perf_counter() - start
    return {"mb_s": round(acked[0] * size / 1e6 / elapsed, 2), "msgs": acked[0], "failed": failed[0] + left,
            "elapsed_s": round(elapsed, 2)}


class CleaningWatch:
    """When the broker's cleaning of ``<topic>-0`` started (its first ``.cleaned`` file) and ended (the topic in
    cleaner-offset-checkpoint), seen by polling the log dir every 20 ms."""

    def __init__(self, logs: Path, topic: str) -> None:
        self.topic = topic
        self.dir = logs / f"{topic}-0"
        self.checkpoint = logs / "cleaner-offset-checkpoint"
        self.started: float | None = None
        self.ended: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.wait(0.02):
            now = time.monotonic()
            if self.started is None and any(p.name.endswith(".cleaned") for p in self.dir.iterdir()):
                self.started = now
            try:
                done = any(line.startswith(f"{self.topic} 0 ") for line in self.checkpoint.read_text().splitlines())
            except OSError:
                done = False
            if done:
                self.started = self.started or now
                self.ended = now
                return

    def overlap(self, t0: float, t1: float) -> float:
        if self.started is None:
            return 0.0
        end = self.ended if self.ended is not None else t1
        return round(max(0.0, min(t1, end) - max(t0, self.started)) / (t1 - t0), 3)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def alter(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()]
    for future in admin.incremental_alter_configs(
            [ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=entries)]).values():
        future.result(30)


def children_cpu(pid: int) -> float:
    """CPU seconds (user + system) of the broker's live child processes: its cleaner processes."""
    total = 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            kids = (task / "children").read_text().split()
        except OSError:
            continue
        for kid in kids:
            try:
                total += sum(proc_cpu(int(kid)))
            except OSError:
                pass
    return total


def phase(args: argparse.Namespace, broker: BrokerProcess, mode: str, name: str,
          watch: CleaningWatch | None) -> dict:
    os.sync()
    cpu0, kids0 = sum(proc_cpu(broker.pid)), children_cpu(broker.pid)
    t0 = time.monotonic()
    if name.endswith("latency"):
        lat, failed = paced_produce(broker, LOAD, "1", args.size, args.rate, args.seconds)
        figures = {"rate": args.rate, "acked": len(lat), "failed": failed, **percentiles(lat)}
    else:
        figures = max_rate(broker.bootstrap, args.size, args.seconds)
    t1 = time.monotonic()
    record = {"bench": "cleaner", "mode": mode, "phase": name, **figures,
              "broker_cpu_s": round(sum(proc_cpu(broker.pid)) - cpu0, 2),
              "cleaner_process_cpu_s": round(children_cpu(broker.pid) - kids0, 2),
              "overlap": watch.overlap(t0, t1) if watch is not None else 0.0}
    emit(record)
    return record


def compacting_phase(args: argparse.Namespace, broker: BrokerProcess, mode: str, name: str, logs: Path) -> list[dict]:
    """Start cleaning the phase's own compacted topic, run the phase once the cleaning runs, wait for its end."""
    topic = f"compacted-{name.rsplit('_', 1)[1]}"
    watch = CleaningWatch(logs, topic)
    try:
        alter(broker.bootstrap, topic, {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"})
        deadline = time.monotonic() + 60
        while watch.started is None and time.monotonic() < deadline:
            time.sleep(0.02)
        if watch.started is None:
            raise RuntimeError(f"the cleaning of {topic} did not start within 60 s")
        record = phase(args, broker, mode, name, watch)
        deadline = time.monotonic() + 600
        while watch.ended is None and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        watch.stop()
    took = (watch.ended - watch.started) if watch.ended is not None and watch.started is not None else None
    size = sum(f.stat().st_size for f in watch.dir.glob("*.log"))
    cleaning = {"bench": "cleaner", "mode": mode, "phase": f"cleaning_{topic}",
                "cleaning_s": round(took, 2) if took else None,
                "cleaned_mb_s": round(args.compacted_mb / took, 1) if took else None,
                "log_mb_after": round(size / 1e6, 1)}
    emit(cleaning)
    return [record, cleaning]


def run_mode(args: argparse.Namespace, mode: str, workdir: Path) -> list[dict]:
    os.environ[MODE_ENV] = mode
    name = f"kbroker-{mode}"
    logs = workdir / (name + "-logs")
    extra = {"log.cleaner.backoff.ms": "100", "log.cleaner.dedupe.buffer.size": str(512 << 20)}
    broker = start_broker(name, None, workdir, extra)
    records: list[dict] = []
    try:
        create_topics(broker, [LOAD], 1)
        compacted = ["compacted-latency", "compacted-max"]
        create_topics(broker, compacted, 1, config={"cleanup.policy": "delete",
                                                    "segment.bytes": str(args.segment_mb << 20)})
        for topic in compacted:
            log(f"{mode}: filling {topic} with {args.compacted_mb} MB")
            fill(broker.bootstrap, topic, args.compacted_mb, args.keys, args.compacted_value_bytes)
        for p in ("idle_latency", "idle_max"):
            records.append(phase(args, broker, mode, p, None))
        for p in ("compacting_latency", "compacting_max"):
            records += compacting_phase(args, broker, mode, p, logs)
    finally:
        broker.stop()
    return records


def summary(records: list[dict], modes: list[str]) -> dict:
    out: dict = {"bench": "cleaner", "kind": "summary"}
    for mode in modes:
        for p in ("idle_latency", "idle_max", "compacting_latency", "compacting_max"):
            rows = [r for r in records if r["mode"] == mode and r["phase"] == p]
            if not rows:
                continue
            for key in ("p50_ms", "p99_ms") if p.endswith("latency") else ("mb_s",):
                values = [r[key] for r in rows if r.get(key) is not None]
                if values:
                    out[f"{mode}.{p}.{key}"] = statistics.median(values)
        idle, busy = out.get(f"{mode}.idle_max.mb_s"), out.get(f"{mode}.compacting_max.mb_s")
        if idle and busy:
            out[f"{mode}.compacting_over_idle_mb_s"] = round(busy / idle, 3)
        cleaning = [r["cleaning_s"] for r in records if r["mode"] == mode and r["phase"].startswith("cleaning")
                    and r.get("cleaning_s")]
        if cleaning:
            out[f"{mode}.cleaning_s"] = statistics.median(cleaning)
    if "thread" in modes and "process" in modes:
        for key in ("compacting_max.mb_s", "compacting_latency.p50_ms", "compacting_latency.p99_ms", "idle_max.mb_s"):
            a, b = out.get(f"thread.{key}"), out.get(f"process.{key}")
            if a and b:
                out[f"process_over_thread.{key}"] = round(b / a, 3)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modes", default="thread,process", help="comma-separated: thread, process")
    parser.add_argument("--compacted-mb", type=int, default=200, help="MB of values in each compacted topic")
    parser.add_argument("--compacted-value-bytes", type=int, default=100, help="bytes per value in them")
    parser.add_argument("--segment-mb", type=int, default=64, help="segment.bytes of the compacted topics (MiB)")
    parser.add_argument("--keys", type=int, default=20_000, help="distinct keys in the compacted topic")
    parser.add_argument("--size", type=int, default=1024, help="bytes per value")
    parser.add_argument("--rate", type=float, default=5000, help="messages/s of the latency phases")
    parser.add_argument("--seconds", type=float, default=6.0, help="length of each phase")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--log-dir", default=None, help="parent of the brokers' log dirs (default: the repo's disk)")
    args = parser.parse_args(argv)
    print(json.dumps(header(__file__, argv)), flush=True)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or any(m not in ("thread", "process") for m in modes):
        parser.error(f"--modes: thread and/or process, got {args.modes!r}")
    workdir = Path(tempfile.mkdtemp(prefix="kbroker-cleaner-bench-", dir=Path(args.log_dir or REPO).resolve()))
    records: list[dict] = []
    try:
        for round_no in range(args.rounds):
            order = modes if round_no % 2 == 0 else modes[::-1]
            for mode in order:
                records += run_mode(args, mode, workdir)
                shutil.rmtree(workdir / f"kbroker-{mode}-logs", ignore_errors=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    emit(summary(records, modes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
