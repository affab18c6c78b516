"""What `kbroker ui` costs at 1,000 consumer groups x 10 partitions on one broker: page answer times, CPU, history size.

One real broker process (embedded store, no ZooKeeper, a status listener for ``/metrics``), one topic of
``--partitions`` partitions with some records in each, and ``--groups`` Kafka-stored groups that each commit offsets
on every partition (OffsetCommit as a standalone client, generation -1, through kbroker's own admin client: no live
consumers). Every fourth group lags (it committed behind the log end and never moves); the others keep up: while the
UI runs, a record is produced to each partition and those groups commit the new log end once per ``--interval``.
Then ``kbroker ui`` runs as its own process against the broker, its history in a temporary directory, and:

* CPU: its user+system CPU (from /proc/<pid>/stat) over ``--cpu-seconds`` from the end of round
  ``--warm-rounds`` on (by then each group's window of 10 commits, which the history keeps, is full: what follows is
  the steady state), with no page requests but one open server-sent-events stream (which tells when each round
  lands): CPU per minute and per sampling round;
* pages: ``--requests`` GETs of each page and its JSON twin (``/``, ``/groups``, ``/groups/<group>``, ``/topics``,
  ``/topics/<topic>``, ``/brokers``, ``/api/...``, ``/metrics``), one at a time: median and max answer time, bytes;
* history: the file's bytes in use (SQLite pages less free pages) and on disk after the run; its growth per
  sampling round over the CPU window (in total and per table, from SQLite's dbstat where it is compiled in), and
  the samples' growth (every table but the commits, which the UI's maintenance trims to each partition's last 10
  every 5 minutes whatever their age) projected to a day of raw samples at this interval and at 30 s.

    python -m bench.experiments.ui_scale [--groups 1000] [--partitions 10] [--interval 10] [--cpu-seconds 120]
                                         [--warm-rounds 12] [--requests 10] [--out FILE]

JSON lines on stdout (the provenance header first); ``--out`` writes the same lines to a file.
"""
from __future__ import annotations

import argparse
import json
import re
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from bench.harness.broker_load import BrokerProcess, create_topics, log, proc_cpu, start_broker
from bench.harness.broker_process import REPO, free_port, launch, terminate, wait_serving
from bench.harness.results_meta import header
from kbroker.tools.client import AdminClient, TopicPartition
from kbroker.tools.group_reset import commit_offsets

TOPIC = "ui-scale"
ANNOUNCED = re.compile(rb"kbroker ui: watching \S+ on (http://127\.0\.0\.1:\d+/)")
LAG_EVERY = 4  # every fourth group lags and stands still
DAY_S = 86400
COMMIT_TABLES = ("commits", "group_partition")  # trimmed by count, not age


def group_name(i: int) -> str:
    return f"ui-scale-group-{i:04d}"


def lagging(i: int) -> bool:
    return i % LAG_EVERY == 0


def lagging_offsets(ends: dict[int, int], i: int) -> dict[int, int]:
    """Where lagging group ``i`` commits: behind each log end by a lag that differs between groups and partitions
    (never below 0)."""
    return {p: max(0, end - (1 + (i * 7 + p * 13) % 200)) for p, end in ends.items()}


def summary(values: list[float]) -> dict[str, float]:
    return {"median_ms": round(statistics.median(values) * 1000, 2), "max_ms": round(max(values) * 1000, 2)}


def projected(bytes_per_round: float, interval_s: float) -> float:
    """MB a day of raw samples takes at one round per ``interval_s``."""
    return round(bytes_per_round * DAY_S / interval_s / 1e6, 1)


class Activity:
    """The groups that keep up: each ``interval`` s one record to every partition, then those groups commit the new
    log ends (on a thread of its own, so the UI's rounds see moving log ends and commits)."""

    def __init__(self, broker: BrokerProcess, partitions: int, groups: int, interval: float) -> None:
        self.broker, self.partitions, self.groups, self.interval = broker, partitions, groups, interval
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="ui-scale-activity", daemon=True)
        self.rounds = 0
        self.failure: str | None = None

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(60)

    def _run(self) -> None:
        producer = Producer({"bootstrap.servers": self.broker.bootstrap, "linger.ms": 5})
        try:
            with AdminClient(self.broker.bootstrap) as admin:
                while not self.stopping.wait(self.interval):
                    ends = produce(producer, self.partitions, 1)
                    for i in range(self.groups):
                        if self.stopping.is_set():
                            return
                        if not lagging(i):
                            commit_offsets(admin, group_name(i), {TopicPartition(TOPIC, p): e for p, e in ends.items()})
                    self.rounds += 1
        except Exception as exc:  # reported in the results: the figures were taken with less activity
            self.failure = f"{type(exc).__name__}: {exc}"


def produce(producer: Producer, partitions: int, per_partition: int) -> dict[int, int]:
    """``per_partition`` records to each partition; each partition's log end after them."""
    ends: dict[int, int] = {}
    failures: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(str(err))
        else:
            ends[msg.partition()] = max(ends.get(msg.partition(), 0), msg.offset() + 1)
    for _ in range(per_partition):
        for p in range(partitions):
            producer.produce(TOPIC, b"x" * 100, partition=p, on_delivery=delivered)
            producer.poll(0)
    producer.flush(60)
    if failures or len(ends) != partitions:
        raise RuntimeError(f"producing failed: {failures[:3]}")
    return ends


def commit_groups(bootstrap: str, groups: int, ends: dict[int, int]) -> float:
    """Every group commits on every partition; seconds it took."""
    started = time.monotonic()
    with AdminClient(bootstrap) as admin:
        for i in range(groups):
            offsets = lagging_offsets(ends, i) if lagging(i) else ends
            commit_offsets(admin, group_name(i), {TopicPartition(TOPIC, p): o for p, o in offsets.items()})
    return time.monotonic() - started


class Rounds:
    """The UI's server-sent events: when each sampling round landed, with the UI's CPU seconds at that moment."""

    def __init__(self, url: str, pid: int) -> None:
        self.url, self.pid = url, pid
        self.landed: list[tuple[int, float, float]] = []  # (seq, monotonic s, cpu s)
        self.changed = threading.Condition()
        threading.Thread(target=self._listen, name="ui-scale-events", daemon=True).start()

    def _listen(self) -> None:
        try:
            with urllib.request.urlopen(self.url + "api/events", timeout=600) as stream:
                for raw in stream:
                    line = raw.decode().strip()
                    if line.startswith("data:"):
                        seq = json.loads(line[5:])["seq"]
                        now, cpu = time.monotonic(), sum(proc_cpu(self.pid))
                        with self.changed:
                            self.landed.append((seq, now, cpu))
                            self.changed.notify_all()
        except OSError:
            pass  # the UI stopped

    def wait_for(self, count: int, timeout: float) -> None:
        with self.changed:
            if not self.changed.wait_for(lambda: len(self.landed) >= count, timeout):
                raise RuntimeError(f"{count} sampling rounds did not land within {timeout} s")


def timed_get(url: str) -> tuple[float, int]:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as answer:
        body = answer.read()
        if answer.status != 200:
            raise RuntimeError(f"{url}: HTTP {answer.status}")
    return time.perf_counter() - started, len(body)


def pages(group: str) -> list[str]:
    paths = ["", "groups", f"groups/{group}", "topics", f"topics/{TOPIC}", "brokers"]
    return [*paths, *(f"api/{p}" for p in paths), "metrics"]


def table_bytes(path: Path) -> dict[str, int]:
    """Bytes of each table's pages (dbstat); {} when this SQLite has no dbstat."""
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
            return {name: int(size) for name, size in db.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name")}
    except sqlite3.OperationalError:
        return {}


def history_bytes(path: Path) -> dict[str, int]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        page = db.execute("PRAGMA page_size").fetchone()[0]
        used = (db.execute("PRAGMA page_count").fetchone()[0] - db.execute("PRAGMA freelist_count").fetchone()[0])
    on_disk = sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())
    return {"used": used * page, "on_disk": on_disk}


def run(args: argparse.Namespace, emit: Any) -> None:
    with tempfile.TemporaryDirectory(prefix="ui-scale-", dir=REPO) as tmp:
        work = Path(tmp)
        status_port = free_port()
        broker = start_broker("kbroker", None, work, {"status.listener": f"http://127.0.0.1:{status_port}"})
        ui_proc = None
        activity = None
        try:
            create_topics(broker, [TOPIC], args.partitions)
            producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
            ends = produce(producer, args.partitions, args.records)
            commit_s = commit_groups(broker.bootstrap, args.groups, ends)
            log(f"{args.groups} groups committed on {args.partitions} partitions in {commit_s:.1f} s")
            activity = Activity(broker, args.partitions, args.groups, args.interval)
            activity.start()
            history = work / "history.sqlite"
            out = work / "ui.out"
            ui_proc = launch([sys.executable, "-m", "kbroker.cli", "ui", "--bootstrap-server", broker.bootstrap,
                              "--broker-metrics", f"http://127.0.0.1:{status_port}/metrics",
                              "--listen", "127.0.0.1:0", "--interval", str(args.interval), "--history", str(history)],
                             out, env=None)
            found: list[str] = []

            def listening() -> bool:
                match = ANNOUNCED.search(out.read_bytes())
                if match:
                    found.append(match.group(1).decode())
                return match is not None
            if wait_serving(ui_proc, listening, 60, 0.1) != "serving":
                raise RuntimeError(f"kbroker ui did not start: {out.read_text()[-2000:]}")
            url = found[0]
            rounds = Rounds(url, ui_proc.pid)
            rounds.wait_for(1, 300)
            first_seq, t0, cpu0 = rounds.landed[0]
            start = max(1, args.warm_rounds)
            rounds.wait_for(start + 1, args.interval * start * 10 + 300)  # the window starts as a round lands
            _, t0, cpu0 = rounds.landed[start]
            used0, tables0 = history_bytes(history)["used"], table_bytes(history)
            deadline = t0 + args.cpu_seconds
            while time.monotonic() < deadline:
                count = len(rounds.landed)
                rounds.wait_for(count + 1, args.interval * 10 + 300)
            _, t1, cpu1 = rounds.landed[-1]
            n = len(rounds.landed) - 1 - start
            used1, tables1 = history_bytes(history)["used"], table_bytes(history)
            window = rounds.landed[start:]
            gaps = [b[1] - a[1] for a, b in zip(window, window[1:])]
            cpu_rounds = [b[2] - a[2] for a, b in zip(window, window[1:])]
            emit({"kind": "result", "measure": "ui_cpu", "groups": args.groups, "partitions": args.partitions,
                  "interval_s": args.interval, "window_s": round(t1 - t0, 1), "rounds": n,
                  "cpu_s": round(cpu1 - cpu0, 2), "cpu_s_per_minute": round((cpu1 - cpu0) / (t1 - t0) * 60, 2),
                  "cpu_s_per_round_median": round(statistics.median(cpu_rounds), 3),
                  "cpu_s_per_round_max": round(max(cpu_rounds), 3),
                  "seconds_between_rounds_median": round(statistics.median(gaps), 2),
                  "warm_rounds": start, "first_round_seq": first_seq})
            group = group_name(1)
            for path in pages(group):
                times, size = [], 0
                for _ in range(args.requests):
                    seconds, size = timed_get(url + path)
                    times.append(seconds)
                emit({"kind": "result", "measure": "page", "path": "/" + path, "requests": args.requests,
                      "bytes": size, **summary(times)})
            landed = len(rounds.landed)
            ui_cpu_total = sum(proc_cpu(ui_proc.pid))
            activity.stop()
            terminate(ui_proc, 30)
            ui_proc = None
            sizes = history_bytes(history)
            # the growth over the CPU window's rounds: the first round also wrote the schema and the names
            per_round = (used1 - used0) / n
            by_table = {name: round((size - tables0.get(name, 0)) / n) for name, size in sorted(tables1.items())
                        if size != tables0.get(name, 0)}
            samples = sum(v for k, v in by_table.items() if k not in COMMIT_TABLES) if by_table else per_round
            emit({"kind": "result", "measure": "history", "rounds": landed, "bytes_used": sizes["used"],
                  "bytes_on_disk": sizes["on_disk"], "bytes_per_round": round(per_round),
                  "bytes_per_round_by_table": by_table, "sample_bytes_per_round": round(samples),
                  "sample_mb_per_day_raw_at_interval": projected(samples, args.interval),
                  "sample_mb_per_day_raw_at_30s": projected(samples, 30.0), "ui_cpu_s_total": round(ui_cpu_total, 2),
                  "activity_rounds": activity.rounds, "activity_failure": activity.failure,
                  "commit_setup_s": round(commit_s, 1)})
        finally:
            if activity is not None:
                activity.stop()
            if ui_proc is not None:
                terminate(ui_proc, 30)
            broker.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.experiments.ui_scale", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--groups", type=int, default=1000)
    p.add_argument("--partitions", type=int, default=10)
    p.add_argument("--records", type=int, default=1000, help="records produced to each partition before the commits")
    p.add_argument("--interval", type=float, default=10.0, help="kbroker ui's --interval, seconds")
    p.add_argument("--cpu-seconds", type=float, default=120.0, help="the CPU window, seconds (whole rounds)")
    p.add_argument("--warm-rounds", type=int, default=12, help="sampling rounds before the CPU window")
    p.add_argument("--requests", type=int, default=10, help="GETs of each page")
    p.add_argument("--out", type=Path, default=None, help="also write the JSON lines to this file")
    args = p.parse_args(argv)
    if args.groups < 2 or args.partitions < 1 or args.requests < 1 or args.cpu_seconds < args.interval:
        p.error("at least 2 groups, 1 partition, 1 request, and a CPU window of at least one interval")
    lines: list[str] = []

    def emit(record: dict[str, Any]) -> None:
        line = json.dumps(record)
        lines.append(line)
        print(line, flush=True)
        if args.out is not None:
            args.out.write_text("".join(f"{x}\n" for x in lines))
    emit(header(__file__, argv))
    run(args, emit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
