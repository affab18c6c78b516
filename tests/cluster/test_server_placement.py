"""Never two replicas on one server (issue 24 item 2): six broker processes on a real ZooKeeper simulate
three servers of two processes each, every pair advertising its own loopback address (127.0.0.2, .3 and
.4 are all this machine's loopback on Linux). Replication factor 3, no broker.rack: auto-creation,
CreateTopics, CreatePartitions and ``kbroker reassign --generate`` put each partition's replicas on three
distinct servers, and an explicit assignment with two replicas on one server is accepted, as Kafka
accepts it, with a warning in the broker log."""
from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from zk_compat import layout

from .conftest import Cluster, wait_until

REPO = Path(__file__).resolve().parents[2]
# brokers 1 and 2 on one server, 3 and 4 on another, 5 and 6 on a third (consecutive ids, as host mode numbers them)
SERVER_OF = {1: "127.0.0.2", 2: "127.0.0.2", 3: "127.0.0.3", 4: "127.0.0.3", 5: "127.0.0.4", 6: "127.0.0.4"}


@pytest.fixture(scope="module")
def cluster(zookeeper_server, tmp_path_factory) -> Iterator[Cluster]:
    c = Cluster(zookeeper_server, tmp_path_factory.mktemp("servers"), size=6,
                overrides={"default.replication.factor": "3", "num.partitions": "12"})
    for broker_id, broker in c.brokers.items():
        broker.host = SERVER_OF[broker_id]  # its listener, and so the host its registration advertises
    try:
        c.start()
        yield c
    finally:
        c.stop()


def _assignment(cluster: Cluster, topic: str, partitions: int) -> dict[int, list[int]]:
    found = wait_until(lambda: (a := layout.get_topic_assignment(cluster.store, topic)) is not None
                       and len(a.partitions) == partitions and a, message=f"{topic} with {partitions} partitions")
    return dict(found.partitions)


def _crowded(assignment: dict[int, list[int]]) -> dict[int, list[int]]:
    return {p: r for p, r in assignment.items() if len({SERVER_OF[b] for b in r}) != len(r)}


def _reassign(cluster: Cluster, *args: str) -> str:
    result = subprocess.run([sys.executable, "-m", "kbroker.cli", "reassign", "--bootstrap-server", cluster.bootstrap,
                             *args], cwd=REPO, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert result.returncode == 0 and not result.stderr, (result.returncode, result.stdout, result.stderr)
    return result.stdout


def _warned(cluster: Cluster, text: str) -> bool:
    return any(text in b.log() for b in cluster.brokers.values())


def test_auto_created_topic_keeps_replicas_on_distinct_servers(cluster):
    md = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(timeout=10)
    assert {b.id: b.host for b in md.brokers.values()} == SERVER_OF  # each pair at its server's address
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "allow.auto.create.topics": True})
    producer.produce("auto-placed", b"x")
    assert producer.flush(30) == 0
    assignment = _assignment(cluster, "auto-placed", 12)
    assert all(len(r) == 3 for r in assignment.values())
    assert _crowded(assignment) == {}


def test_created_and_grown_topic_keeps_replicas_on_distinct_servers(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("created", num_partitions=18, replication_factor=3)])["created"].result(30)
    created = _assignment(cluster, "created", 18)
    assert _crowded(created) == {}
    admin.create_partitions([NewPartitions("created", 40)])["created"].result(30)
    grown = _assignment(cluster, "created", 40)
    assert {p: grown[p] for p in created} == created
    assert all(len(r) == 3 for r in grown.values())
    assert _crowded(grown) == {}


def test_reassign_generate_keeps_replicas_on_distinct_servers(cluster, tmp_path):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    # everything on servers .2 and .3, two replicas on one of them in every partition
    packed = [[1, 2, 3], [3, 4, 1], [2, 1, 4], [4, 3, 2]] * 6
    admin.create_topics([NewTopic("packed", len(packed), -1, replica_assignment=packed)])["packed"].result(30)
    _assignment(cluster, "packed", 24)
    topics_file = tmp_path / "topics.json"
    topics_file.write_text(json.dumps({"topics": [{"topic": "packed"}], "version": 1}))
    for _ in range(3):  # the start broker is drawn at random: a few draws
        lines = _reassign(cluster, "--generate", "--topics-to-move-json-file", str(topics_file),
                          "--broker-list", "1,2,3,4,5,6").splitlines()
        assert lines[3] == "Proposed partition reassignment configuration"
        proposed = {e["partition"]: e["replicas"] for e in json.loads(lines[4])["partitions"]}
        assert sorted(proposed) == list(range(24)) and all(len(r) == 3 for r in proposed.values())
        assert _crowded(proposed) == {}


def test_explicit_assignment_on_one_server_is_accepted_with_a_warning(cluster, tmp_path):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("asked", 2, -1, replica_assignment=[[1, 2, 3], [3, 5, 1]])])["asked"].result(30)
    assert _assignment(cluster, "asked", 2) == {0: [1, 2, 3], 1: [3, 5, 1]}
    wait_until(lambda: _warned(cluster, "CreateTopics: asked-0 has replicas 1,2 on one server (127.0.0.2)"),
               message="the CreateTopics warning")
    assert not _warned(cluster, "asked-1 has replicas")

    admin.create_partitions([NewPartitions("asked", 3, replica_assignment=[[6, 5, 4]])])["asked"].result(30)
    assert _assignment(cluster, "asked", 3)[2] == [6, 5, 4]
    wait_until(lambda: _warned(cluster, "CreatePartitions: asked-2 has replicas 6,5 on one server (127.0.0.4)"),
               message="the CreatePartitions warning")

    move = tmp_path / "move.json"
    move.write_text(json.dumps({"version": 1,
                                "partitions": [{"topic": "asked", "partition": 1, "replicas": [4, 3, 6]}]}))
    _reassign(cluster, "--execute", "--reassignment-json-file", str(move))
    wait_until(lambda: _assignment(cluster, "asked", 3)[1] == [4, 3, 6], 30, "asked-1 moved to [4, 3, 6]")
    wait_until(lambda: _warned(cluster, "reassignment: asked-1 has replicas 4,3 on one server (127.0.0.3)"),
               message="the reassignment warning")
