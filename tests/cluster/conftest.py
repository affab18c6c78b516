"""A 3-broker cluster over a real ZooKeeper: the ZooKeeper of kazoo_bridge/local_server.py
(free loopback port, own data dir) and three ``kbroker serve`` processes with
``zookeeper.connect`` under a fresh chroot. One cluster per module; brokers are BrokerProcess
(tests/integration/conftest.py), so a test may kill or restart one."""
from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from kazoo_bridge.local_server import ZooKeeperServer
from kazoo_bridge.store import connect
from tests.integration.conftest import BrokerProcess, free_port

SESSION_TIMEOUT_MS = 6000


class Cluster:
    def __init__(self, zookeeper: ZooKeeperServer, base: Path, size: int = 3,
                 overrides: dict[str, str] | None = None) -> None:
        self.chroot = f"/kbtest-{uuid.uuid4().hex[:12]}"
        self.zookeeper_connect = f"{zookeeper.hosts}{self.chroot}"
        self.brokers: dict[int, BrokerProcess] = {}
        for broker_id in range(1, size + 1):
            (base / f"broker-{broker_id}").mkdir(parents=True, exist_ok=True)
            self.brokers[broker_id] = BrokerProcess(base / f"broker-{broker_id}", {
                "broker.id": str(broker_id),
                "zookeeper.connect": self.zookeeper_connect,
                "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
                "offsets.topic.replication.factor": "1",
                **(overrides or {}),
            })
        # each broker's port was free when it was picked, and stays unbound until the broker starts: two picks
        # can be one port (the kernel hands a released port out again)
        taken: set[int] = set()
        for broker in self.brokers.values():
            while broker.port in taken:
                broker.port = free_port()
            taken.add(broker.port)
        self.store = connect(self.zookeeper_connect, SESSION_TIMEOUT_MS, 5000)

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values() if b.running)

    def start(self) -> None:
        for broker in self.brokers.values():
            broker.start()
        if all(b.overrides.get("listeners", "PLAINTEXT://").startswith("PLAINTEXT://") for b in self.brokers.values()):
            self.wait_all_known()  # (the check speaks PLAINTEXT to each broker's first listener)

    def wait_all_known(self, timeout: float = 30.0) -> None:
        """Every broker's Metadata lists every broker: a broker learns of one registered after it through the
        controller's UpdateMetadata, which can lag its own start on a loaded machine (as in Kafka)."""
        ids = sorted(self.brokers)

        def known() -> bool:
            try:
                return all(sorted(AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(timeout=5).brokers)
                           == ids for b in self.brokers.values())
            except KafkaException:
                return False
        wait_until(known, timeout, "every broker's Metadata lists every broker", interval=0.5)

    def stop(self) -> None:
        try:
            for broker in self.brokers.values():
                broker.kill() if not broker.running else broker.stop()
        finally:
            self.store.close()

    def logs(self) -> str:
        return "\n".join(f"--- broker {i}\n{b.log()[-8000:]}" for i, b in self.brokers.items())

    def with_status_listeners(self) -> Cluster:
        """Before start: each broker serves /status and /metrics (status.listener) on a port of its own. A free
        port is only free until something binds it: one the brokers were given (not bound before they start) can
        come back, so those are skipped."""
        taken = {broker.port for broker in self.brokers.values()}
        for broker in self.brokers.values():
            port = free_port()
            while port in taken:
                port = free_port()
            taken.add(port)
            broker.overrides["status.listener"] = f"http://127.0.0.1:{port}"
        return self

    def status_port(self, broker_id: int) -> int:
        return int(self.brokers[broker_id].overrides["status.listener"].rsplit(":", 1)[1])


@pytest.fixture(scope="module")
def cluster(zookeeper_server: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(zookeeper_server, tmp_path_factory.mktemp("cluster"))
    try:
        c.start()
        yield c
    finally:
        c.stop()


def wait_until(condition: Callable[[], object], timeout: float = 15.0, message: str = "condition",
               interval: float = 0.1) -> object:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)
