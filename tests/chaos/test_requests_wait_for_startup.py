"""Found by the chaos harness (kill9, disk_full restarts): a ZooKeeper-mode broker listens before it has
registered and read the cluster, and answered Metadata in between as if no broker and no topic existed: it tried
to auto-create the existing topic and said INVALID_REPLICATION_FACTOR, which librdkafka takes as final for every
queued message of that topic. Requests must wait until startup completes."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient

from bench.reliability.chaos.cluster import CHROOT, Broker
from kazoo_bridge.local_server import ZooKeeperServer
from kazoo_bridge.store import connect
from tests.chaos.test_restart_after_crash import PREDECESSOR
from zk_compat import layout


def test_metadata_during_startup_waits_for_the_cluster_view(zookeeper_server: ZooKeeperServer,
                                                           tmp_path: Path) -> None:
    chroot = CHROOT + f"-startup-{time.monotonic_ns()}"
    with connect(zookeeper_server.hosts, 6000, 5000) as root:
        root.create(chroot, None, makepath=True)
    with connect(zookeeper_server.hosts + chroot, 6000, 5000) as store:
        layout.ensure_persistent_paths(store)
        layout.create_topic(store, "existing", {0: [1]}, {})
    # a crashed predecessor's registration keeps the new broker in its startup for a few seconds
    predecessor = subprocess.Popen([sys.executable, "-c", PREDECESSOR, zookeeper_server.hosts + chroot],
                                   stdout=subprocess.PIPE, text=True)
    broker = Broker(1, tmp_path, zookeeper_server.hosts)
    broker.settings["zookeeper.connect"] = zookeeper_server.hosts + chroot
    broker.settings["default.replication.factor"] = "1"
    broker.settings["min.insync.replicas"] = "1"
    # no chaos proxy here: advertise the replication listener itself, or the controller (this broker) never
    # reaches it, and Metadata, which answers what the controller announced (as Kafka's), knows no topic
    broker.settings["advertised.listeners"] = (f"PLAINTEXT://127.0.0.1:{broker.port},"
                                               f"REPLICATION://127.0.0.1:{broker.replication_port}")
    try:
        assert predecessor.stdout is not None and predecessor.stdout.readline().strip() == "registered"
        predecessor.kill()
        predecessor.wait()
        broker.start()  # returns once it listens: still waiting for the stale registration to expire
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        deadline = time.monotonic() + 60
        while True:
            topic = admin.list_topics(topic="existing", timeout=60).topics["existing"]
            if topic.error is None or time.monotonic() > deadline:
                break
            # until the controller announces its leaders, as Kafka: retriable LEADER_NOT_AVAILABLE (being created)
            assert topic.error.code() == KafkaError.LEADER_NOT_AVAILABLE, topic.error  # old: INVALID_REPLICATION_FACTOR
            time.sleep(0.1)
        assert topic.error is None, topic.error
        assert list(topic.partitions) == [0]
    finally:
        if predecessor.poll() is None:
            predecessor.kill()
        broker.stop()
