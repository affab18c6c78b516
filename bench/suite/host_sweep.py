"""The host sweep (``python -m bench --sweeps host``, issue 24 item 6): one server's ``kbroker serve`` with
``broker.processes`` = N = 1, 2, 4, ... up to the cores it may use, each run on a fresh ZooKeeper chroot of one
local ZooKeeper (kazoo_bridge's runner, as bench.suite.cluster), one topic of ``--host-partitions`` partitions and
replication factor ``--host-replication`` (default 1, so N = 1 is one broker with nothing to replicate).

Two phases per N, both 1 KiB text values (bench.harness.values), acks ``--host-acks``:

  max     every client process sends ``--messages`` values as fast as it can: MB/s, and T(N)/T(1), the scaling
          table a many-core server prints;
  paced   the same offered load for every N, ``--host-rate`` msgs/s or else ``--host-offered`` (default 0.5) x
          N = 1's max msgs/s of the first round, for ``--host-seconds``: broker CPU-seconds per million records,
          the efficiency figure. CPU per record falls as batches grow with the rate, so a run that did not carry
          the offered load (under 95 % of it: ``"carried"``) is marked ``"not_carried"`` and left out of the
          ratios (on a machine whose clients share the brokers' cores the max, and so the derived rate, is noisy:
          give ``--host-rate``).

Memory: before the first run the sweep writes and frees twice what one run writes (``warm_pages``), and it deletes
each run's logs once the run is stopped, so every run's page cache lands on recently used pages: on a VM that
returns freed memory to its host (this one), fresh pages cost a host fault each, and the runs that reached them
measured 2-3x the CPU per record of the others, whichever N they were.

The paced load generator is confluent-kafka with one produce_batch call per 5 ms step and delivery reports for
failures only, so that its own CPU (``client_cpu_s``, every thread of its process) is mostly librdkafka's.

Broker CPU is read from /proc/<pid>/stat (user + system) of the ``kbroker serve`` process and every descendant:
with N = 1 that process is the broker itself (host mode runs one broker in process); with N > 1 it is the
supervisor (which only relays its children's log lines) and the N brokers, all counted, and with either the
brokers' own children (the log cleaner's worker processes).

Cores: the plan takes the cores it is started with (sched_setaffinity of the ``kbroker serve`` process, which the
plan splits between the brokers). With 4 or more cores a quarter of them (at least 1) is kept for the load
generator and its client processes are pinned there, the brokers get the rest, so N goes up to nproc - nproc // 4;
with fewer cores (this 2-core machine) the brokers get every core, N goes up to nproc, and the clients are pinned
to the last core, which they share with the last broker (the record says ``"shared": true``): a pinned broker
sharing its core with the load generator costs more CPU per record than one alone (25 % more user time at
240k msgs/s here, measured with everything else equal), and confined
to one core that cost falls on one broker rather than on all (``--host-client-cpus`` pins them elsewhere). Every
record carries the CPU sets the brokers and the clients actually ran on.

Rounds (``--rounds``) start every N afresh, the order of N reversed every other round; the ratios are taken from
each figure's median over the rounds.
"""
from __future__ import annotations

import argparse
import mmap
import multiprocessing
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from bench.harness import broker_load
from bench.harness.broker_process import HOST, accepts, launch, neighbouring_free_ports, terminate, wait_serving
from bench.harness.values import text_values
from bench.suite import clients as clients_module
from kazoo_bridge.local_server import ZooKeeperServer
from kbroker.host.plan import format_cpulist, parse_cpulist

SIZE = 1024
TICK_S = 0.005  # the paced producer's step: it sends what is due every 5 ms
CARRIED = 0.95  # a paced run below this share of the offered rate is not comparable


def core_split(cores: list[int]) -> tuple[list[int], list[int], bool]:
    """(broker cores, client cores, shared): a quarter of 4+ cores for the clients; with fewer, the brokers get
    every core and the clients the last one (so they disturb one broker's core, not every broker's)."""
    if len(cores) < 4:
        return list(cores), list(cores[-1:]), True
    clients = max(1, len(cores) // 4)
    return list(cores[:-clients]), list(cores[-clients:]), False


def process_counts(broker_cores: int, asked: str | None) -> list[int]:
    """N = 1, 2, 4, ... and the number of broker cores itself (or the comma-separated counts asked for)."""
    if asked:
        counts = sorted({int(v) for v in asked.split(",") if v.strip()})
        if not counts or counts[0] < 1 or counts[-1] > broker_cores:
            raise ValueError(f"--host-processes: counts between 1 and {broker_cores} (the broker cores), got {asked}")
        return counts
    counts = [1]
    while counts[-1] * 2 <= broker_cores:
        counts.append(counts[-1] * 2)
    return counts if counts[-1] == broker_cores else [*counts, broker_cores]


def _descendants(pid: int) -> list[int]:
    out = [pid]
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for child in map(int, children):
            out += _descendants(child)
    return out


def _user_system(pid: int) -> tuple[float, float]:
    try:
        return broker_load.proc_cpu(pid)
    except (OSError, IndexError):
        return 0.0, 0.0


def _allowed(pid: int) -> str:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Cpus_allowed_list:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def _broker_id(pid: int) -> int | None:
    """A host-mode child's broker id, from its properties file (broker-<id>.properties) on its command line."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    for arg in argv:
        name = Path(arg.decode(errors="replace")).name
        if name.startswith("broker-") and name.endswith(".properties"):
            return int(name[len("broker-"):-len(".properties")])
    return None


class HostServer:
    """``kbroker serve`` with ``broker.processes=N`` on ``cores``, ZooKeeper mode, N log dirs."""

    def __init__(self, processes: int, cores: list[int], workdir: Path, zookeeper: str, first_id: int = 1) -> None:
        self.processes = processes
        self.cores = cores
        self.port = neighbouring_free_ports(HOST, processes)
        self.first_id = first_id
        self.bootstrap = ",".join(f"{HOST}:{self.port + i}" for i in range(processes))
        self.out_path = workdir / f"host-{processes}.out"
        self.settings = {
            "broker.processes": str(processes), "broker.id": str(first_id),
            "listeners": f"PLAINTEXT://{HOST}:{self.port}",
            "log.dirs": ",".join(str(workdir / f"host-{processes}-disk{i}") for i in range(processes)),
            "zookeeper.connect": zookeeper, "group.initial.rebalance.delay.ms": "0",
            "offsets.topic.replication.factor": "1", "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1"}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 90.0) -> None:
        argv = [str(Path(sys.executable).parent / "kbroker"), "serve"]
        for key, value in self.settings.items():
            argv += ["--override", f"{key}={value}"]
        env = dict(os.environ, KBROKER_LOG_LEVEL=os.environ.get("KBROKER_LOG_LEVEL", "WARNING"))
        cores = set(self.cores)
        self.proc = launch(argv, self.out_path, env=env, preexec_fn=lambda: os.sched_setaffinity(0, cores))
        deadline = time.monotonic() + timeout
        for i in range(self.processes):
            outcome = wait_serving(self.proc, lambda i=i: accepts(HOST, self.port + i),
                                   max(1.0, deadline - time.monotonic()), 0.1)
            if outcome != "serving":
                raise RuntimeError(f"broker.processes={self.processes}: process {i} {outcome}: {self.tail()}")
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        while len(admin.list_topics(timeout=30).brokers) < self.processes:
            if time.monotonic() > deadline:
                raise RuntimeError(f"broker.processes={self.processes}: not every broker registered: {self.tail()}")
            time.sleep(0.2)

    @property
    def name(self) -> str:
        return f"kbroker host N={self.processes}"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def pids(self) -> list[int]:
        return _descendants(self.proc.pid) if self.alive() and self.proc is not None else []

    def user_system_by_process(self) -> dict[str, tuple[float, float]]:
        """(user, system) CPU seconds of the serve process and its descendants, keyed "broker <id>" (N = 1: the
        serve process is the broker), "supervisor", or "brokers' children" (anything else)."""
        out: dict[str, tuple[float, float]] = {}
        for pid in self.pids():
            broker_id = _broker_id(pid)
            if broker_id is not None:
                key = f"broker {broker_id}"
            elif self.proc is not None and pid == self.proc.pid:
                key = "supervisor" if self.processes > 1 else f"broker {self.first_id}"
            else:
                key = "brokers' children"  # the log cleaner's worker processes (kbroker.log.cleaner_worker)
            user, system = _user_system(pid)
            had = out.get(key, (0.0, 0.0))
            out[key] = (had[0] + user, had[1] + system)
        return out

    def cpu_sets(self) -> dict[str, str]:
        out = {}
        for pid in self.pids():
            broker_id = _broker_id(pid)
            if broker_id is not None or self.processes == 1:
                out[f"broker {broker_id if broker_id is not None else self.first_id}"] = _allowed(pid)
        return out

    def tail(self, lines: int = 6) -> str:
        try:
            return " | ".join(self.out_path.read_text(errors="replace").strip().splitlines()[-lines:])
        except OSError:
            return ""

    def discard_logs(self) -> None:
        """Delete the log dirs of a stopped run: its page cache goes back to the free pages the next run writes
        into (see ``warm_pages``)."""
        for directory in self.settings["log.dirs"].split(","):
            shutil.rmtree(directory, ignore_errors=True)

    def stop(self) -> None:
        if self.proc is not None:
            try:
                terminate(self.proc, 150)
            except subprocess.TimeoutExpired:
                for pid in self.pids():
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass


def leaders(server: HostServer, topic: str) -> dict[str, int]:
    """How many of the topic's partitions each broker leads, keyed as ``user_system_by_process``."""
    metadata = AdminClient({"bootstrap.servers": server.bootstrap}).list_topics(topic, timeout=30)
    counts: dict[str, int] = {}
    for partition in metadata.topics[topic].partitions.values():
        counts[f"broker {partition.leader}"] = counts.get(f"broker {partition.leader}", 0) + 1
    return counts


def by_broker(record: dict[str, Any], led: dict[str, int], partitions: int) -> dict[str, float]:
    """CPU seconds per million records of each broker's own share: the paced load goes round-robin over the
    partitions, so a broker leading k of them took k / partitions of the records."""
    out = {}
    for key, count in led.items():
        records = record["messages"] * count / partitions
        if key in record["cpu_by_process"] and records:
            out[key] = round(record["cpu_by_process"][key] / records * 1e6, 3)
    return out


def available_bytes() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def warm_pages(nbytes: int) -> float:
    """Write ``nbytes`` of anonymous memory once and free it; returns the seconds it took.

    A VM that hands the memory its guest freed back to the host (free page reporting, as this one does) makes
    the guest's first write to such a page a host fault: measured here, 0.38 GB/s and 5.6x the CPU once the
    pages freed recently were used up. A broker's appends fill fresh page-cache pages, so a run that reached
    those pages was charged 2-3x the CPU per record of the same run on recently used ones, whichever N it was.
    Touching what a run writes before the first run, and deleting each run's logs after it (which frees its
    page cache), keeps every run on recently used pages. On bare metal this costs a second and changes nothing."""
    started = time.perf_counter()
    chunk = bytes(1 << 20)
    if nbytes < len(chunk):
        return 0.0
    with mmap.mmap(-1, nbytes) as area:
        for offset in range(0, nbytes - len(chunk) + 1, len(chunk)):
            area[offset:offset + len(chunk)] = chunk
    return time.perf_counter() - started


# -- the load generator -------------------------------------------------------------------------------------


def _producer(bootstrap: str, acks: str, timeout_s: float) -> Producer:
    # Delivery reports for failures only: the load generator shares a core with a broker here (see the module
    # docstring), and a Python call per delivered record is CPU taken from that broker.
    return Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5, "batch.size": 1 << 20,
                     "batch.num.messages": 10_000, "queue.buffering.max.messages": 1_000_000,
                     "queue.buffering.max.kbytes": 1 << 20, "message.timeout.ms": int(timeout_s * 1000),
                     "enable.idempotence": False, "delivery.report.only.error": True})


def _cycle(values: list[bytes], partitions: int) -> list[dict]:
    """One lap of (value, partition) as produce_batch's message dicts, built once and reused: value i of the
    pool to partition i mod partitions, a lap being a multiple of both so that it repeats seamlessly."""
    lap = len(values)
    while lap % partitions:
        lap += len(values)
    return [{"value": values[i % len(values)], "partition": i % partitions} for i in range(lap)]


def paced(bootstrap: str, topic: str, acks: str, partitions: int, rate: float, seconds: float,
          timeout_s: float) -> dict:
    """Send ``rate`` values per second for ``seconds`` (what is due every 5 ms, round-robin over the partitions,
    one produce_batch call per step so that the load generator's own CPU stays small); the clock stops when
    every delivery report is in. Also returns the client's CPU seconds (every thread of this process)."""
    producer = _producer(bootstrap, acks, timeout_s)
    lap = _cycle(text_values(SIZE), partitions)
    total = int(rate * seconds)
    failed = [0]

    def on_delivery(err, msg) -> None:  # failures only (delivery.report.only.error)
        if err is not None:
            failed[0] += 1

    cpu0 = time.process_time()
    start = time.perf_counter()
    sent = 0
    while sent < total:
        due = min(total, int((time.perf_counter() - start) * rate) + 1)
        while sent < due:
            at = sent % len(lap)
            step = lap[at:at + min(due - sent, len(lap) - at)]
            try:
                queued = producer.produce_batch(topic, step, on_delivery=on_delivery)
            except BufferError:
                queued = 0
            if queued < len(step):  # the queue was full: what it refused (marked "_error") goes once it drains
                marked = [m for m in step if m.pop("_error", None) is not None]  # unmarked: the lap is reused
                refused = marked if queued else step
                for message in refused:
                    while True:
                        try:
                            producer.produce(topic, message["value"], partition=message["partition"],
                                             on_delivery=on_delivery)
                            break
                        except BufferError:
                            producer.poll(0.001)
            sent += len(step)
        producer.poll(0)
        pause = start + sent / rate - time.perf_counter()
        if pause > 0:
            time.sleep(min(pause, TICK_S))
    left = producer.flush(timeout_s)
    elapsed = time.perf_counter() - start
    if left or failed[0]:
        raise RuntimeError(f"{left} undelivered and {failed[0]} failed of {total}")
    return {"elapsed_s": elapsed, "messages": total, "bytes": total * SIZE,
            "client_cpu_s": time.process_time() - cpu0}


def _worker(mode: str, args: argparse.Namespace, bootstrap: str, topic: str, share: float, cores: list[int],
            barrier, results) -> None:
    os.sched_setaffinity(0, set(cores))
    try:
        barrier.wait(60)
        if mode == "max":
            broker = argparse.Namespace(bootstrap=bootstrap, alive=lambda: True)
            tp = argparse.Namespace(messages=int(share), size=SIZE, partitions=args.host_partitions, linger_ms=5,
                                    batch_bytes=1 << 20, phase_timeout=args.phase_timeout,
                                    values=text_values(SIZE), compression="none")
            measured = broker_load.produce(tp, broker, topic, args.host_acks)
        else:
            measured = paced(bootstrap, topic, args.host_acks, args.host_partitions, share, args.host_seconds,
                             args.phase_timeout)
        results.put(measured)
    except BaseException as exc:  # reported to the parent: one failing client fails the phase
        results.put({"error": f"{type(exc).__name__}: {exc}"})


def run_clients(mode: str, args: argparse.Namespace, server: HostServer, topic: str, total: float,
                cores: list[int], clients: int, profile: Path | None = None) -> dict:
    """``clients`` producer processes pinned to ``cores``, ``total`` messages (max) or msgs/s (paced) split
    between them; the broker CPU is read at the barrier and once every client is done. ``profile``: a py-spy
    record of every broker process (its self and inclusive costs in the result, the stacks in that dir)."""
    # The previous phase's dirty pages are written back first, so that no phase pays for another's writeback
    # (the record keeps how long that took: 0.0-0.1 s here, where the disk keeps up).
    synced = time.perf_counter()
    os.sync()
    synced = time.perf_counter() - synced
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(clients + 1)
    results = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(mode, args, server.bootstrap, topic, total / clients, cores, barrier,
                                               results), daemon=True) for _ in range(clients)]
    for proc in procs:
        proc.start()
    spies = {}
    if profile is not None:
        profile.mkdir(parents=True, exist_ok=True)
        spies = {pid: broker_load.PySpy(profile, pid, f"{topic}-{mode}-pid{pid}") for pid in server.pids()
                 if _broker_id(pid) is not None or server.processes == 1}
    got: list[dict] = []
    try:
        barrier.wait(120)
        by0, t0 = server.user_system_by_process(), time.perf_counter()
        deadline = time.monotonic() + args.phase_timeout + 60
        while len(got) < clients:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{clients - len(got)} of {clients} clients did not finish")
            try:
                got.append(results.get(timeout=1.0))
            except Exception:  # queue.Empty
                if not any(p.is_alive() for p in procs) and results.empty():
                    raise RuntimeError("clients exited without a result") from None
        elapsed = time.perf_counter() - t0
        by1 = server.user_system_by_process()
        profiles = {f"broker {_broker_id(pid) or server.first_id}": spy.finish() for pid, spy in spies.items()}
    finally:
        clients_module.reap(procs)
    clients_module.refuse_failed(got, clients, "clients")
    messages = sum(r["messages"] for r in got)
    split = {k: (v[0] - by0.get(k, (0.0, 0.0))[0], v[1] - by0.get(k, (0.0, 0.0))[1]) for k, v in sorted(by1.items())}
    by_process = {k: round(user + system, 2) for k, (user, system) in split.items()}
    client_cpu = [r["client_cpu_s"] for r in got if "client_cpu_s" in r]
    return {"elapsed_s": elapsed, "messages": messages, "bytes": sum(r["bytes"] for r in got),
            **({"client_cpu_s": sum(client_cpu)} if client_cpu else {}), "sync_before_s": synced,
            "broker_cpu_s": sum(user + system for user, system in split.values()), "cpu_by_process": by_process,
            "user_system_by_process": {k: [round(user, 2), round(system, 2)] for k, (user, system) in split.items()},
            **({"profiles": profiles} if profiles else {})}


# -- the sweep ------------------------------------------------------------------------------------------------


def _figures(measured: dict) -> dict:
    return {"messages": measured["messages"], "elapsed_s": round(measured["elapsed_s"], 3),
            "msgs_s": round(measured["messages"] / measured["elapsed_s"]),
            "mb_s": round(measured["bytes"] / measured["elapsed_s"] / 1e6, 2),
            "broker_cpu_s": round(measured["broker_cpu_s"], 2),
            "cpu_s_per_m_records": round(measured["broker_cpu_s"] / measured["messages"] * 1e6, 2),
            "cpu_by_process": measured["cpu_by_process"], "user_system_by_process": measured["user_system_by_process"],
            **({"client_cpu_s": round(measured["client_cpu_s"], 2)} if "client_cpu_s" in measured else {}),
            "sync_before_s": round(measured["sync_before_s"], 2),
            **({"profiles": measured["profiles"]} if "profiles" in measured else {})}


def run(args: argparse.Namespace, workdir: Path, emit: Callable[[dict], None]) -> list[dict]:
    """Every round, every N: start, measure max then paced, stop. Returns the records, ratios included."""
    cores = sorted(os.sched_getaffinity(0))
    broker_cores, client_cores, shared = core_split(cores)
    if args.host_client_cpus:  # the load generator's cores as asked (the brokers keep theirs)
        client_cores = parse_cpulist(args.host_client_cpus)
        shared = bool(set(client_cores) & set(broker_cores))
    counts = process_counts(len(broker_cores), args.host_processes)
    clients = args.host_clients or (1 if shared else len(client_cores))
    base = {"kind": "result", "sweep": "host", "target": "kbroker host mode", "size": SIZE, "acks": args.host_acks,
            "partitions": args.host_partitions, "replication": args.host_replication, "clients": clients,
            "nproc": len(cores), "broker_cores": format_cpulist(broker_cores),
            "client_cpus": format_cpulist(client_cores), "shared": shared}
    zookeeper = ZooKeeperServer(workdir / "host-zookeeper")
    zookeeper.start()
    records: list[dict] = []
    offered: float | None = args.host_rate or None
    # What one run writes at most (the max phase, then the paced one at the offered rate or, before that is known,
    # at about half of one broker's max here), twice over, within half the memory available: see warm_pages.
    run_bytes = (min(args.messages, args.max_bytes // SIZE) + int((offered or 300_000) * args.host_seconds)) * SIZE
    warm = min(2 * run_bytes, available_bytes() // 2)
    emit({"kind": "warm_pages", "bytes": warm, "seconds": round(warm_pages(warm), 2)})
    try:
        for round_no in range(max(args.rounds, 1)):
            for n in counts if round_no % 2 == 0 else counts[::-1]:
                rundir = workdir / f"host-r{round_no}-n{n}"
                rundir.mkdir(parents=True)
                server = HostServer(n, broker_cores, rundir, f"{zookeeper.hosts}/kbhost-r{round_no}-n{n}")
                head = {**base, "processes": n, "round": round_no}
                try:
                    server.start()
                    head["broker_cpus"] = server.cpu_sets()
                    topic = f"host-r{round_no}-n{n}"
                    broker_load.create_topics(server, [topic], args.host_partitions, timeout=args.phase_timeout,
                                             replication=args.host_replication)
                    messages = max(1, min(args.messages, args.max_bytes // SIZE))
                    top = {**head, "scenario": "produce", "phase": "max",
                           **_figures(run_clients("max", args, server, topic, messages, client_cores, clients))}
                    emit(top)
                    records.append(top)
                    if offered is None:  # N = 1 of the first round sets the load every N gets
                        offered = round(top["msgs_s"] * args.host_offered)
                    rec = {**head, "scenario": "paced", "phase": "paced", "offered_msgs_s": offered,
                           **_figures(run_clients("paced", args, server, topic, offered, client_cores, clients,
                                                   Path(args.host_profile) if args.host_profile else None))}
                    rec["carried"] = round(rec["msgs_s"] / offered, 3)
                    led = leaders(server, topic)
                    rec["partitions_led"] = led
                    rec["cpu_s_per_m_records_by_broker"] = by_broker(rec, led, args.host_partitions)
                    if rec["carried"] < CARRIED:
                        rec["not_carried"] = True
                    emit(rec)
                    records.append(rec)
                except Exception as exc:  # a failed N is a result, not the end of the sweep
                    failed = {**head, "scenario": "produce", "error": f"{type(exc).__name__}: {exc}"}
                    emit(failed)
                    records.append(failed)
                finally:
                    server.stop()
                    server.discard_logs()
    finally:
        zookeeper.stop()
    for ratio in ratios(records):
        emit(ratio)
        records.append(ratio)
    return records


def _median(records: list[dict], n: int, phase: str, key: str) -> float | None:
    values = [r[key] for r in records if r.get("processes") == n and r.get("phase") == phase and key in r
              and not r.get("not_carried")]
    return statistics.median(values) if values else None


def _alone_median(records: list[dict], n: int) -> float | None:
    """Where the clients share cores with brokers: the median, over the rounds, of the CPU per million records
    of the brokers whose cores the clients do not use (what splitting costs without the load generator on the
    broker's core, as on a server with cores for it)."""
    values = []
    for r in records:
        if r.get("processes") != n or r.get("phase") != "paced" or r.get("not_carried"):
            continue
        clients = set(parse_cpulist(r["client_cpus"]))
        alone = [v for key, v in r.get("cpu_s_per_m_records_by_broker", {}).items()
                 if not clients & set(parse_cpulist(r["broker_cpus"].get(key, "")))]
        if alone:
            values.append(statistics.mean(alone))
    return statistics.median(values) if values else None


def ratios(records: list[dict]) -> list[dict]:
    """Per N: the medians over the rounds of max MB/s and paced CPU per million records, each over N = 1's."""
    counts = sorted({r["processes"] for r in records if "processes" in r})
    t1, c1 = _median(records, 1, "max", "mb_s"), _median(records, 1, "paced", "cpu_s_per_m_records")
    out = []
    for n in counts:
        t, c = _median(records, n, "max", "mb_s"), _median(records, n, "paced", "cpu_s_per_m_records")
        sample = next((r for r in records if r.get("processes") == n and "broker_cpus" in r), {})
        alone = _alone_median(records, n)
        out.append({"kind": "host_scaling", "sweep": "host", "processes": n, "max_mb_s": t,
                    "t_over_t1": round(t / t1, 3) if t and t1 else None, "paced_cpu_s_per_m_records": c,
                    "cpu_per_m_over_n1": round(c / c1, 3) if c and c1 else None,
                    **({"alone_cpu_per_m_over_n1": round(alone / c1, 3) if alone and c1 else None}
                       if sample.get("shared") and n > 1 else {}),
                    "offered_msgs_s": next((r["offered_msgs_s"] for r in records if "offered_msgs_s" in r), None),
                    "broker_cpus": sample.get("broker_cpus"), "client_cpus": sample.get("client_cpus"),
                    "shared": sample.get("shared"),
                    "rounds": sum(1 for r in records if r.get("processes") == n and r.get("phase") == "paced"
                                  and not r.get("not_carried")),
                    "rounds_not_carried": sum(1 for r in records if r.get("processes") == n and r.get("not_carried"))})
    return out
