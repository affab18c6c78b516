"""What a benchmark runs against: one broker (kbroker or Tansu) or a 3-broker kbroker cluster on ZooKeeper.

A Target is what the scenarios need of either: a name, a bootstrap list, whether every process is alive, the
CPU seconds all its broker processes have used, the replication factor its topics get, and stop().
"""
from __future__ import annotations

import copy
import os
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from bench.harness import broker_load, security
from bench.harness.broker_load import BrokerProcess
from bench.harness.broker_process import free_port
from kazoo_bridge.local_server import ZooKeeperServer

TOPOLOGIES = ("single", "cluster")
OFFSETS_TOPIC = "__consumer_offsets"


class Target:
    def __init__(self, name: str, topology: str, brokers: list[BrokerProcess], replication: int,
                 zookeeper: ZooKeeperServer | None = None) -> None:
        self.name = name
        self.topology = topology
        self.brokers = brokers
        self.replication = replication
        self.zookeeper = zookeeper
        self.bootstrap = ",".join(b.bootstrap for b in brokers)
        self.client_config: dict[str, str] = {}
        # security protocol -> (bootstrap, client settings); PLAINTEXT always, the others on a secure target
        self.protocols: dict[str, tuple[str, dict[str, str]]] = {"PLAINTEXT": (self.bootstrap, {})}

    def via(self, protocol: str) -> Target | None:
        """This target reached over another listener (None: it has none for ``protocol``)."""
        if protocol not in self.protocols:
            return None
        view = copy.copy(self)
        view.bootstrap, view.client_config = self.protocols[protocol]
        return view

    @property
    def label(self) -> str:
        """The column of the results table: the broker, and for a cluster its shape."""
        return self.name if self.topology == "single" else f"{self.name} 3 brokers RF 3"

    @property
    def topic_config(self) -> dict[str, str]:
        return {"min.insync.replicas": "2"} if self.replication > 1 else {}

    def alive(self) -> bool:
        return all(b.alive() for b in self.brokers)

    def pids(self) -> list[int]:
        return [b.pid for b in self.brokers]

    def cpu_s(self) -> float:
        return sum(sum(b.cpu()) for b in self.brokers if b.alive())

    def stop(self) -> None:
        for broker in self.brokers:
            broker.stop()
        if self.zookeeper is not None:
            self.zookeeper.stop()


def start_single(name: str, workdir: Path, secure: bool = False, tree: Path | None = None) -> Target:
    """One broker; ``secure`` (kbroker only) adds SSL and SASL_SSL listeners beside PLAINTEXT
    (bench.harness.security)."""
    if not secure or not name.startswith("kbroker"):
        return Target(name, "single", [broker_load.start_broker(name, tree, workdir)], 1)
    pki = security.make_pki(workdir)
    security.seed_user(workdir / f"{name}-logs")
    ports = {p: free_port() for p in security.PROTOCOLS}
    broker = broker_load.start_broker(name, tree, workdir, security.broker_settings(ports, pki), ports["PLAINTEXT"])
    target = Target(name, "single", [broker], 1)
    target.protocols = {p: (f"127.0.0.1:{ports[p]}", security.client_settings(p, pki)) for p in security.PROTOCOLS}
    return target


def start_cluster(workdir: Path, size: int = 3, name: str = "kbroker", tree: Path | None = None) -> Target:
    """A local ZooKeeper and ``size`` kbroker processes in ZooKeeper mode; topics get replication factor 3
    and min.insync.replicas 2, the offsets topic too."""
    zookeeper = ZooKeeperServer(workdir / "zookeeper")
    zookeeper.start()
    env = dict(os.environ, KBROKER_LOG_LEVEL=os.environ.get("KBROKER_LOG_LEVEL", "WARNING"))
    brokers: list[BrokerProcess] = []
    try:
        for broker_id in range(1, size + 1):
            port = free_port()
            argv = broker_load.kbroker_argv(port, workdir / f"cluster-{broker_id}", {
                "broker.id": str(broker_id), "zookeeper.connect": f"{zookeeper.hosts}/kbench",
                "offsets.topic.replication.factor": str(min(3, size))}, tree)
            broker = BrokerProcess(f"{name}-{broker_id}", argv, port, workdir, env)
            brokers.append(broker)
            broker.start()
    except Exception:
        for broker in brokers:
            broker.stop()
        zookeeper.stop()
        raise
    return Target(name, "cluster", brokers, min(3, size), zookeeper)


def warm_up(target: Target, timeout: float = 60.0) -> None:
    """Find a group coordinator once, so the offsets topic (50 partitions, replicated on a cluster) is created
    and led before the first measurement and not inside it (the scenarios' consumers carry a group.id)."""
    consumer = Consumer({"bootstrap.servers": target.bootstrap, "group.id": "bench-warm-up",
                         "enable.auto.commit": False})
    try:
        consumer.committed([TopicPartition("bench-warm-up", 0)], timeout=timeout)  # a coordinator answered
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            topic = consumer.list_topics(timeout=timeout).topics.get(OFFSETS_TOPIC)
            if topic is None and target.name == "tansu":
                return  # Tansu keeps group offsets outside any topic it lists
            if topic is not None and topic.error is None and topic.partitions and all(
                    p.leader >= 0 and len(p.isrs) >= target.replication for p in topic.partitions.values()):
                return
            time.sleep(0.2)
        raise RuntimeError(f"{target.label}: {OFFSETS_TOPIC} not led with full ISRs within {timeout}s")
    finally:
        consumer.close()


def start(name: str, topology: str, workdir: Path, secure: bool = False, tree: Path | None = None) -> Target:
    """``tree``: a kbroker source tree other than this one (``name`` then says which, see bench.suite.throughput
    parse_broker). Each start gets a fresh directory under ``workdir``, so a target started again (rounds)
    begins empty."""
    workdir = Path(tempfile.mkdtemp(prefix=f"{name}-{topology}-", dir=workdir))
    if topology == "single":
        target = start_single(name, workdir, secure, tree)
    elif not name.startswith("kbroker"):
        raise ValueError(f"{name} has no {topology} mode here (Tansu 0.6 runs no ZooKeeper-mode cluster)")
    else:
        target = start_cluster(workdir, name=name, tree=tree)
    try:
        warm_up(target)
    except Exception:
        target.stop()
        raise
    return target
