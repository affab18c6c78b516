"""Controller seconds and CPU per thousand partitions: create, delete, controlled shutdown, kill -9, failover.

Starts a local ZooKeeper and 3 kbroker processes (bench.harness.targets.start_cluster: the cluster's own settings,
zookeeper.session.timeout.ms included) and, for each --partitions N, on fresh topics of 4 partitions with
replication factor 3 created with confluent-kafka's AdminClient (at most 100 topics per CreateTopics request):

  create             N partitions: seconds until metadata shows every partition led with its full ISR (3);
                     meanwhile a producer writes 1 KiB at 100 msgs/s with acks=all to a topic made before
                     (``producer``: its acknowledgement latencies, p99 included: an event loop stalled by the
                     controller's work shows there)
  create-on-top      N more beside them: is the cost flat in the size of the cluster?
  delete             both batches: seconds until metadata lists none of them (zookeeper_s: until ZooKeeper holds
                     neither the topics nor their /admin/delete_topics markers)
  controlled-shutdown  N partitions created afresh, then SIGTERM (kbroker serve runs Kafka's controlled shutdown on
                     it) to the broker other than the controller that leads most of them: seconds until no partition
                     has it as leader
  rejoin             that broker started again: seconds until every partition's ISR is full again
  kill-9             SIGKILL to the broker other than the controller that leads most: seconds until every partition it
                     led has another leader; expiry_s when ZooKeeper dropped its /brokers/ids znode (its session
                     expired), after_expiry_s the controller's part from there
  rejoin             the killed broker started again (log recovery, then catching up)
  controller-failover  SIGKILL to the controller (/controller in ZooKeeper): seconds until a Metadata answer names
                     the new controller (it was elected and sent UpdateMetadata); elected_s when /controller named
                     it, after_expiry_s from the old broker's expiry, leaders_s when the old controller's partitions
                     had leaders again

The broker other than the controller is chosen for the shutdowns so that those steps measure one controller's work;
the failover is its own step. Every line: step, partitions (the sweep's N), step_partitions (what the step acted on:
the topics' partitions, the partitions the stopped broker led, or the cluster's for a failover), seconds, the
controller's CPU seconds over the step (user + system from /proc/<pid>/stat; after a failover, the new controller's)
and both per thousand step partitions. A step that does not finish within --step-timeout is an error line, and the
rest of that N is skipped; the processes are stopped whatever happens.

    python -m bench.suite.controller [--partitions 100,1000] [--step-timeout 900] [--probe-rate 100] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from confluent_kafka.admin import AdminClient, ClusterMetadata, NewTopic
from kazoo.client import KazooClient

from bench.harness.broker_load import BrokerProcess, log, proc_cpu
from bench.harness.latency import Paced, paced_run
from bench.harness.results_meta import header
from bench.harness.targets import Target, start_cluster
from kbroker.config.broker import key_definition

PARTITIONS_PER_TOPIC = 4
REPLICATION = 3
BATCH = 100  # topics per CreateTopics / DeleteTopics request
CHROOT = "/kbench"  # start_cluster's zookeeper.connect chroot
POLL_S = 0.1
TARGET = "kbroker 3 brokers RF 3"
PROBE_TOPIC = "ctrl-probe"  # written to during the creation steps (``create``)
PROBE_RATE = 100.0  # messages a second, acks=all, linger.ms 0 (--probe-rate)
PROBE_SIZE = 1024


class StepTimeout(RuntimeError):
    pass


def session_timeout_s(cluster: Target) -> float:
    """The brokers' zookeeper.session.timeout.ms: what start_cluster passed, else kbroker's default."""
    argv = cluster.brokers[0].argv
    given = [a.split("=", 1)[1] for a in argv if a.startswith("zookeeper.session.timeout.ms=")]
    if given:  # the last --override wins
        return int(given[-1]) / 1000
    found = key_definition("zookeeper.session.timeout.ms")
    assert found is not None
    return int(found[0]) / 1000


class Cluster:
    """The started cluster with what the steps read of it: metadata, ZooKeeper, each broker's CPU."""

    def __init__(self, target: Target, step_timeout: float, probe_rate: float = PROBE_RATE) -> None:
        self.target = target
        self.step_timeout = step_timeout
        self.probe_rate = probe_rate
        assert target.zookeeper is not None
        self.zk = KazooClient(hosts=f"{target.zookeeper.hosts}{CHROOT}", timeout=30)
        self.zk.start(timeout=30)
        self.down: set[int] = set()  # brokers a step stopped on purpose

    def close(self) -> None:
        self.zk.stop()
        self.zk.close()

    def broker(self, broker_id: int) -> BrokerProcess:
        return self.target.brokers[broker_id - 1]  # start_cluster numbers them 1, 2, 3

    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.target.brokers if b.alive())

    def admin(self) -> AdminClient:
        """A client bootstrapped from the live brokers only (a fresh one per step: no stale connections)."""
        return client(self.bootstrap(), self.step_timeout)

    def controller_id(self) -> int | None:
        try:
            data, _ = self.zk.get("/controller")
        except Exception:  # NoNodeError between a controller's expiry and its successor's election
            return None
        return int(json.loads(data)["brokerid"])

    def registered(self, broker_id: int) -> bool:
        return self.zk.exists(f"/brokers/ids/{broker_id}") is not None

    def cpu(self) -> dict[int, float]:
        """user + system CPU seconds of every live broker, by broker id."""
        out = {}
        for i, b in enumerate(self.target.brokers, 1):
            if b.alive():
                try:
                    out[i] = sum(proc_cpu(b.pid))
                except OSError:  # exited since alive() was asked
                    pass
        return out

    def wait(self, what: str, done: Callable[[], bool], started: float) -> float:
        """Polls ``done`` until it holds; the seconds since ``started``. StepTimeout after --step-timeout."""
        while not done():
            if time.monotonic() - started > self.step_timeout:
                raise StepTimeout(f"{what}: not done after {self.step_timeout:g} s")
            dead = [b.name for i, b in enumerate(self.target.brokers, 1) if i not in self.down and not b.alive()]
            if dead:
                raise RuntimeError(f"{what}: broker {dead} exited unexpectedly")
            time.sleep(POLL_S)
        return time.monotonic() - started


def client(bootstrap: str, step_timeout: float) -> AdminClient:
    """An AdminClient that waits as long as a step may take: librdkafka gives up on any request in flight after
    socket.timeout.ms (60 s by default, 300 s at most), whatever the call's own timeouts say."""
    return AdminClient({"bootstrap.servers": bootstrap,
                        "socket.timeout.ms": int(min(max(step_timeout, 10.0), 300.0) * 1000)})


def metadata(admin: AdminClient) -> ClusterMetadata:
    return admin.list_topics(timeout=30)


def full(md: ClusterMetadata, topics: Iterable[str]) -> bool:
    """Every partition of ``topics`` listed, led and with its full ISR."""
    for t in topics:
        tm = md.topics.get(t)
        if tm is None or tm.error is not None or len(tm.partitions) != PARTITIONS_PER_TOPIC:
            return False
        if any(p.leader < 0 or len(p.isrs) < REPLICATION for p in tm.partitions.values()):
            return False
    return True


def make_probe_topic(c: Cluster) -> None:
    """The topic the probe producer writes to during the creation steps: one partition, replication factor 3."""
    admin = c.admin()
    for future in admin.create_topics([NewTopic(PROBE_TOPIC, num_partitions=1, replication_factor=REPLICATION)],
                                      operation_timeout=c.step_timeout).values():
        future.result(c.step_timeout)
    c.wait("the probe topic", lambda: all(p.leader >= 0 and len(p.isrs) == REPLICATION for p in
                                          metadata(admin).topics[PROBE_TOPIC].partitions.values()), time.monotonic())


def leaders(md: ClusterMetadata, topics: Iterable[str]) -> dict[tuple[str, int], int]:
    return {(t, p.id): p.leader for t in topics if t in md.topics for p in md.topics[t].partitions.values()}


def in_batches(names: list[str]) -> list[list[str]]:
    return [names[i:i + BATCH] for i in range(0, len(names), BATCH)]


def create(c: Cluster, names: list[str]) -> dict[str, Any]:
    """CreateTopics in batches, each awaited as a tool would; seconds until every partition is led with full ISR.
    Meanwhile a producer writes to the probe topic (``producer``: its acknowledgement latencies): a broker's event
    loop stalled by the controller's work shows there."""
    if c.probe_rate <= 0:
        return {"seconds": created(c, names)}
    stop = threading.Event()
    probe: list[Paced] = []
    producer = threading.Thread(target=lambda: probe.append(paced_run(
        SimpleNamespace(bootstrap=c.bootstrap()), PROBE_TOPIC, "all", PROBE_SIZE, c.probe_rate, c.step_timeout,
        stop_early=stop)), name="probe-producer", daemon=True)
    producer.start()
    try:
        seconds = created(c, names)
    finally:
        stop.set()
        producer.join()
    return {"seconds": seconds, "producer": {"rate_msgs_s": c.probe_rate, "acks": "all", "size": PROBE_SIZE,
                                             **(probe[0].figures() if probe else {})}}


def created(c: Cluster, names: list[str]) -> float:
    admin = c.admin()
    started = time.monotonic()
    op = c.step_timeout
    for batch in in_batches(names):
        futures = admin.create_topics([NewTopic(t, num_partitions=PARTITIONS_PER_TOPIC,
                                                replication_factor=REPLICATION) for t in batch],
                                      operation_timeout=op, request_timeout=op)
        for topic, future in futures.items():
            try:
                future.result(op)
            except Exception as exc:
                raise RuntimeError(f"CreateTopics {topic}: {exc}") from exc
    return c.wait(f"create {len(names)} topics", lambda: full(metadata(admin), names), started)


def delete(c: Cluster, names: list[str]) -> dict[str, float]:
    admin = c.admin()
    started = time.monotonic()
    op = c.step_timeout
    for batch in in_batches(names):
        for topic, future in admin.delete_topics(batch, operation_timeout=op, request_timeout=op).items():
            try:
                future.result(op)
            except Exception as exc:
                raise RuntimeError(f"DeleteTopics {topic}: {exc}") from exc
    wanted = set(names)
    seconds = c.wait(f"delete {len(names)} topics", lambda: not wanted & set(metadata(admin).topics), started)

    def zk_done() -> bool:
        return not wanted & set(c.zk.get_children("/brokers/topics")) and not wanted & set(
            c.zk.get_children("/admin/delete_topics") if c.zk.exists("/admin/delete_topics") else [])
    return {"seconds": seconds, "zookeeper_s": c.wait("delete: ZooKeeper", zk_done, started)}


def busiest_non_controller(c: Cluster, names: list[str]) -> tuple[int, list[tuple[str, int]]]:
    """The broker other than the controller that leads the most of ``names``' partitions, and those partitions."""
    controller = c.controller_id()
    by_leader: dict[int, list[tuple[str, int]]] = {}
    for tp, leader in leaders(metadata(c.admin()), names).items():
        by_leader.setdefault(leader, []).append(tp)
    candidates = {b: tps for b, tps in by_leader.items() if b != controller and b >= 0}
    if not candidates:
        raise RuntimeError(f"no broker but the controller {controller} leads a partition: {sorted(by_leader)}")
    victim = max(candidates, key=lambda b: len(candidates[b]))
    return victim, candidates[victim]


def victim_and_witness(c: Cluster, names: list[str]) -> tuple[int, list[tuple[str, int]], BrokerProcess, AdminClient]:
    """The broker to stop (``busiest_non_controller``), what it leads, its process, and an admin client of the
    other brokers that watches the partitions move."""
    victim, led = busiest_non_controller(c, names)
    broker = c.broker(victim)
    assert broker.proc is not None
    admin = client(",".join(b.bootstrap for i, b in enumerate(c.target.brokers, 1) if i != victim),
                   c.step_timeout)
    return victim, led, broker, admin


def moved_away(c: Cluster, admin: AdminClient, names: list[str], victim: int, led: list[tuple[str, int]]) -> bool:
    now = leaders(metadata(admin), names)
    return all(now.get(tp, -1) not in (-1, victim) for tp in led)


def controlled_shutdown(c: Cluster, names: list[str]) -> dict[str, Any]:
    victim, led, broker, admin = victim_and_witness(c, names)
    c.down.add(victim)
    started = time.monotonic()
    broker.proc.send_signal(signal.SIGTERM)
    seconds = c.wait(f"controlled shutdown of broker {victim}", lambda: moved_away(c, admin, names, victim, led),
                     started)
    try:
        code = broker.proc.wait(c.step_timeout)
    except Exception as exc:
        raise StepTimeout(f"broker {victim} still running {c.step_timeout:g} s after SIGTERM") from exc
    return {"seconds": seconds, "broker": victim, "step_partitions": len(led), "exit_s": time.monotonic() - started,
            "exit_code": code}


def kill_9(c: Cluster, names: list[str]) -> dict[str, Any]:
    victim, led, broker, admin = victim_and_witness(c, names)
    expired: list[float] = []

    def done() -> bool:
        if not expired and not c.registered(victim):
            expired.append(time.monotonic())
        return moved_away(c, admin, names, victim, led)
    c.down.add(victim)
    started = time.monotonic()
    broker.proc.kill()
    broker.proc.wait()
    seconds = c.wait(f"election after kill -9 of broker {victim}", done, started)
    if not expired:  # the leaders moved, so the controller saw the znode go: polled between two looks
        expired.append(time.monotonic())
    return {"seconds": seconds, "broker": victim, "step_partitions": len(led),
            "expiry_s": expired[0] - started, "after_expiry_s": seconds - (expired[0] - started)}


def failover(c: Cluster, names: list[str]) -> dict[str, Any]:
    old = c.controller_id()
    if old is None:
        raise RuntimeError("no /controller in ZooKeeper before the failover")
    led = [tp for tp, leader in leaders(metadata(c.admin()), names).items() if leader == old]
    broker = c.broker(old)
    assert broker.proc is not None
    admin = client(",".join(b.bootstrap for i, b in enumerate(c.target.brokers, 1) if i != old),
                   c.step_timeout)
    marks: dict[str, float] = {}

    def done() -> bool:
        now = time.monotonic()
        if "expiry" not in marks and not c.registered(old):
            marks["expiry"] = now
        new = c.controller_id()
        if "elected" not in marks and new is not None and new != old:
            marks["elected"] = now
        if "elected" in marks and "announced" not in marks:
            md = metadata(admin)
            if md.controller_id not in (-1, old) and md.controller_id == new:
                marks["announced"] = time.monotonic()
        if "leaders" not in marks and moved_away(c, admin, names, old, led):
            marks["leaders"] = time.monotonic()
        return all(k in marks for k in ("elected", "announced", "leaders"))
    c.down.add(old)
    started = time.monotonic()
    broker.proc.kill()
    broker.proc.wait()
    c.wait(f"controller failover after kill -9 of controller {old}", done, started)
    marks.setdefault("expiry", marks["elected"])  # /brokers/ids/<old> went between two looks
    return {"seconds": marks["announced"] - started, "broker": old, "new_controller": c.controller_id(),
            "step_partitions": sum(PARTITIONS_PER_TOPIC for _ in names), "led": len(led),
            "expiry_s": marks["expiry"] - started, "elected_s": marks["elected"] - started,
            "after_expiry_s": marks["announced"] - marks["expiry"], "leaders_s": marks["leaders"] - started}


def rejoin(c: Cluster, broker_id: int, names: list[str]) -> dict[str, Any]:
    """Starts a stopped broker again (same log dir): seconds until every partition's ISR is full again."""
    started = time.monotonic()
    c.broker(broker_id).start(timeout=c.step_timeout)
    c.down.discard(broker_id)
    admin = c.admin()
    seconds = c.wait(f"broker {broker_id} back in every ISR", lambda: full(metadata(admin), names), started)
    return {"seconds": seconds, "broker": broker_id, "step_partitions": len(names) * PARTITIONS_PER_TOPIC}


STEPS = ("create", "create-on-top", "delete", "recreate", "controlled-shutdown", "rejoin", "kill-9", "rejoin",
         "controller-failover")


class Enough(Exception):
    """The step named by --until is done."""


def run_sweep(c: Cluster, n: int, emit: Callable[[dict[str, Any]], None], until: str | None = None) -> None:
    """Every step for N partitions on the running cluster (up to ``until``, the first step of that name); it stops
    at the first failing step (the next ones need its outcome), after an error line. The failover's kill is last:
    the cluster is spent after it."""
    topics = max(1, -(-n // PARTITIONS_PER_TOPIC))
    tag = time.monotonic_ns() % 10**9
    first, second, third = ([f"ctrl-{tag}-{batch}-{i}" for i in range(topics)] for batch in "abc")
    base = {"kind": "result", "sweep": "controller", "target": TARGET, "partitions": topics * PARTITIONS_PER_TOPIC,
            "topics": topics, "replication": REPLICATION, "session_timeout_s": session_timeout_s(c.target)}

    def step(name: str, fn: Callable[[], float | dict[str, Any]], step_partitions: int) -> None:
        controller = c.controller_id()
        cpu0 = c.cpu()
        rec: dict[str, Any] = {**base, "step": name, "controller": controller}
        log(f"controller bench: N={base['partitions']} {name}")
        try:
            out = fn()
        except Exception as exc:
            rec["error"] = f"{type(exc).__name__}: {exc}"
            emit(rec)
            raise
        rec.update({"step_partitions": step_partitions, **(out if isinstance(out, dict) else {"seconds": out})})
        now = c.controller_id()  # after a failover, the new controller's work
        cpu1 = c.cpu()
        if now is not None and now in cpu0 and now in cpu1:
            rec["controller"] = now
            rec["controller_cpu_s"] = round(cpu1[now] - cpu0[now], 2)
        elif now is not None and now in cpu1:  # a restarted broker became controller: all it used
            rec["controller"] = now
            rec["controller_cpu_s"] = round(cpu1[now], 2)
        per_k = 1000 / max(rec["step_partitions"], 1)
        rec["seconds_per_k"] = round(rec["seconds"] * per_k, 3)
        if "controller_cpu_s" in rec:
            rec["controller_cpu_s_per_k"] = round(rec["controller_cpu_s"] * per_k, 3)
        for k, v in list(rec.items()):
            if k.endswith("_s") and isinstance(v, float):
                rec[k] = round(v, 3)
        rec["seconds"] = round(rec["seconds"], 3)
        emit(rec)
        if name == until:
            raise Enough

    n_parts = topics * PARTITIONS_PER_TOPIC
    make_probe_topic(c)
    step("create", lambda: create(c, first), n_parts)
    step("create-on-top", lambda: create(c, second), n_parts)
    step("delete", lambda: delete(c, first + second), 2 * n_parts)
    step("recreate", lambda: create(c, third), n_parts)
    stopped: list[int] = []

    def shutdown() -> dict[str, Any]:
        out = controlled_shutdown(c, third)
        stopped.append(out["broker"])
        return out
    step("controlled-shutdown", shutdown, 0)
    step("rejoin", lambda: rejoin(c, stopped[-1], third), n_parts)

    def kill() -> dict[str, Any]:
        out = kill_9(c, third)
        stopped.append(out["broker"])
        return out
    step("kill-9", kill, 0)
    step("rejoin", lambda: rejoin(c, stopped[-1], third), n_parts)
    step("controller-failover", lambda: failover(c, third), n_parts)


def wait_registered(c: Cluster, timeout: float) -> None:
    """All brokers in ZooKeeper and a controller elected: the cluster is ready for the first step."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ids = c.zk.get_children("/brokers/ids") if c.zk.exists("/brokers/ids") else []
        if len(ids) == len(c.target.brokers) and c.controller_id() is not None:
            md = metadata(c.admin())
            if len(md.brokers) == len(c.target.brokers) and md.controller_id >= 0:
                return
        time.sleep(POLL_S)
    raise StepTimeout(f"the cluster did not register {len(c.target.brokers)} brokers and a controller in {timeout} s")


def run(partition_counts: list[int], workdir: Path, emit: Callable[[dict[str, Any]], None],
        step_timeout: float = 900.0, until: str | None = None, probe_rate: float = PROBE_RATE) -> None:
    """A fresh cluster for every N (the failover step leaves one broker down), each stopped whatever happens."""
    for n in partition_counts:
        cluster_dir = Path(tempfile.mkdtemp(prefix=f"controller-{n}-", dir=workdir))
        target: Target | None = None
        c: Cluster | None = None
        swept = False
        try:
            target = start_cluster(cluster_dir)
            c = Cluster(target, step_timeout, probe_rate)
            wait_registered(c, step_timeout)
            swept = True
            run_sweep(c, n, emit, until)
        except Enough:
            pass
        except Exception as exc:  # a failed step has printed its error line; then the next N
            log(f"controller bench: N={n} stopped: {type(exc).__name__}: {exc}")
            if not swept:
                emit({"kind": "result", "sweep": "controller", "target": TARGET, "partitions": n, "step": "start",
                      "error": f"{type(exc).__name__}: {exc}"})
        finally:
            if c is not None:
                c.close()
            if target is not None:
                target.stop()
            shutil.rmtree(cluster_dir, ignore_errors=True)


def partition_list(text: str) -> list[int]:
    try:
        counts = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated partition counts expected") from None
    if not counts or any(n < 1 for n in counts):
        raise argparse.ArgumentTypeError(f"{text!r}: partition counts are at least 1")
    return counts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.suite.controller", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--partitions", type=partition_list, default=partition_list("100,1000"),
                   help="comma-separated N: partitions per batch, in topics of 4 (default 100,1000)")
    p.add_argument("--step-timeout", type=float, default=900.0, help="seconds one step may take (default 900)")
    p.add_argument("--until", choices=sorted(set(STEPS)), help="stop after the first step of this name")
    p.add_argument("--probe-rate", type=float, default=PROBE_RATE,
                   help=f"messages a second of the probe producer during creation (default {PROBE_RATE:g}; 0: none)")
    p.add_argument("--out", type=Path, help="also write the JSON lines to this file")
    args = p.parse_args(argv)
    lines: list[dict[str, Any]] = []

    def emit(record: dict[str, Any]) -> None:
        lines.append(record)
        print(json.dumps(record), flush=True)
    emit(header(__file__, argv))
    workdir = Path(tempfile.mkdtemp(prefix="kbroker-controller-"))
    try:
        run(args.partitions, workdir, emit, args.step_timeout, args.until, args.probe_rate)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        if args.out is not None:
            args.out.write_text("".join(json.dumps(r) + "\n" for r in lines))
    return 1 if any("error" in r for r in lines) else 0


if __name__ == "__main__":
    sys.exit(main())
