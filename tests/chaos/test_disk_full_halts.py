"""Found by the chaos harness (disk_full): a broker whose only log dir failed (ENOSPC) stayed up, registered and
leader of its partitions while serving none of them, so the controller never moved them: they stayed unavailable
until someone restarted it. As Kafka does, it must halt once every log dir is offline."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.reliability.chaos.cluster import CHROOT, Broker
from kazoo_bridge.local_server import ZooKeeperServer


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs (root only)")
def test_a_broker_whose_only_log_dir_is_full_halts(zookeeper_server: ZooKeeperServer, tmp_path: Path) -> None:
    broker = Broker(1, tmp_path, zookeeper_server.hosts)
    broker.settings["zookeeper.connect"] = zookeeper_server.hosts + f"{CHROOT}-diskfull-{time.monotonic_ns()}"
    broker.settings.update({"default.replication.factor": "1", "min.insync.replicas": "1",
                            "offsets.topic.replication.factor": "1", "transaction.state.log.replication.factor": "1",
                            "transaction.state.log.min.isr": "1"})
    # no proxy here: the controller (itself) reaches it on its REPLICATION listener directly
    broker.settings["advertised.listeners"] = (f"PLAINTEXT://127.0.0.1:{broker.port},"
                                               f"REPLICATION://127.0.0.1:{broker.replication_port}")
    broker.mount("16m")
    assert broker.mounted
    try:
        broker.start()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("full", 1, 1)])["full"].result(60)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (broker.log_dir / "full-0").exists():
            time.sleep(0.1)  # hosted: the controller's LeaderAndIsr reached it
        assert (broker.log_dir / "full-0").exists()
        filler = broker.log_dir / "filler"
        with open(filler, "wb") as f:
            try:
                while True:
                    f.write(b"\0" * 65536)
            except OSError:
                pass
        producer = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 20000})
        deadline = time.monotonic() + 120
        while broker.alive() and time.monotonic() < deadline:
            try:
                producer.produce("full", b"x" * 10000)
            except (BufferError, KafkaException):
                pass
            producer.poll(0.05)
        assert not broker.alive(), f"still running with its only log dir full: {broker.output_since(0)}"  # old code
        assert broker.proc is not None and broker.proc.returncode == 1
        assert "halting the broker" in broker.output_since(0)
    finally:
        broker.kill()
        broker.unmount()
