"""ZooKeeper mode, first step of issue 4: three brokers over a real ZooKeeper register in
/brokers/ids, elect a controller, see each other, create topics through the controller and
serve each partition on its leader (no replication yet: ISR = [leader])."""
from __future__ import annotations

import json
import subprocess

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from zk_compat import layout
from zk_compat.znodes import BrokerIdZNode, BrokerInfo, EndPoint, TopicPartitionStateZNode, TopicZNode

from .conftest import SESSION_TIMEOUT_MS, wait_until


def _without_timestamp(data: bytes) -> dict:
    decoded = json.loads(data)
    decoded.pop("timestamp")
    return decoded


def test_brokers_registered_with_kafkas_json(cluster):
    for broker_id, broker in cluster.brokers.items():
        data, stat = cluster.store.get(BrokerIdZNode.path(broker_id))
        expected = BrokerIdZNode.encode(BrokerInfo.from_endpoints(
            broker_id, [EndPoint("PLAINTEXT", broker.host, broker.port, "PLAINTEXT")], timestamp_ms=0))
        assert _without_timestamp(data) == _without_timestamp(expected)
        assert list(json.loads(data)) == list(json.loads(expected))  # field order too
        assert stat.ephemeral_owner != 0
    assert layout.get_controller_id(cluster.store) in cluster.brokers
    assert layout.get_controller_epoch(cluster.store)[0] >= 1


def test_metadata_lists_every_broker(cluster):
    for broker in cluster.brokers.values():
        md = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)
        assert sorted(md.brokers) == [1, 2, 3]
        assert {b.id: (b.host, b.port) for b in md.brokers.values()} == {
            i: (b.host, b.port) for i, b in cluster.brokers.items()}
        assert md.controller_id == layout.get_controller_id(cluster.store)
    out = subprocess.run(["kcat", "-b", cluster.brokers[2].bootstrap, "-L"], capture_output=True, text=True,
                         timeout=30, check=True).stdout
    assert "3 brokers:" in out, out


def test_topic_spread_over_brokers_and_served_by_leaders(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topic = "spread"
    admin.create_topics([NewTopic(topic, num_partitions=6, replication_factor=1)])[topic].result(15)
    data, _ = cluster.store.get(TopicZNode.path(topic))
    assignment = TopicZNode.decode(topic, data).partitions
    assert sorted(assignment) == list(range(6))
    assert {r[0] for r in assignment.values()} == {1, 2, 3}  # round robin from a random start
    epoch = layout.get_controller_epoch(cluster.store)[0]

    def states():
        found = {p: layout.get_partition_state(cluster.store, topic, p) for p in range(6)}
        return found if all(found.values()) else None

    found = wait_until(states, message="partition states")
    for p, (state, _) in found.items():
        raw, _ = cluster.store.get(TopicPartitionStateZNode.path(topic, p))
        assert json.loads(raw) == {"controller_epoch": epoch, "leader": assignment[p][0], "version": 1,
                                   "leader_epoch": 0, "isr": [assignment[p][0]]}
        assert raw == TopicPartitionStateZNode.encode(state)

    def leaders_known():
        md = admin.list_topics(topic, timeout=10)
        parts = md.topics[topic].partitions
        return len(parts) == 6 and all(parts[p].leader == assignment[p][0] and parts[p].isrs == [assignment[p][0]]
                                       for p in range(6))
    wait_until(leaders_known, message="Metadata showing the leaders")

    producer = Producer({"bootstrap.servers": cluster.brokers[1].bootstrap, "acks": "all", "linger.ms": 5})
    sent = {p: [f"{p}-{i}".encode() for i in range(20)] for p in range(6)}
    delivered = []
    for p, values in sent.items():
        for v in values:
            producer.produce(topic, v, partition=p, on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(30) == 0
    assert delivered == [None] * 120

    consumer = Consumer({"bootstrap.servers": cluster.brokers[3].bootstrap, "group.id": "spread-reader",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(6)])
        got: dict[int, list[bytes]] = {p: [] for p in range(6)}
        wait_until(lambda: _poll_into(consumer, got) and sum(map(len, got.values())) >= 120, timeout=30,
                   message="every message consumed", interval=0)
        assert got == sent
    finally:
        consumer.close()


def _poll_into(consumer, got) -> bool:
    msg = consumer.poll(0.2)
    if msg is not None:
        assert msg.error() is None, msg.error()
        got[msg.partition()].append(msg.value())
    return True


def test_non_leader_answers_not_leader_or_follower(cluster):
    import socket
    import struct
    topic = "spread"
    data, _ = cluster.store.get(TopicZNode.path(topic))
    assignment = TopicZNode.decode(topic, data).partitions
    partition, replicas = next(iter(sorted(assignment.items())))
    other = next(i for i in cluster.brokers if i not in replicas)
    broker = cluster.brokers[other]
    # ListOffsets v1: replica_id -1, one topic, one partition, timestamp -1 (latest)
    name = topic.encode()
    body = struct.pack(">ii", -1, 1) + struct.pack(">h", len(name)) + name + struct.pack(">iiq", 1, partition, -1)
    client = b"t"
    header = struct.pack(">hhih", 2, 1, 7, len(client)) + client
    with socket.create_connection((broker.host, broker.port), timeout=10) as s:
        frame = header + body
        s.sendall(struct.pack(">i", len(frame)) + frame)
        size = struct.unpack(">i", _recv(s, 4))[0]
        reply = _recv(s, size)
    # correlation id, topics array (1), name, partitions array (1), partition, error code
    offset = 4 + 4 + 2 + len(name) + 4 + 4
    assert struct.unpack(">h", reply[offset:offset + 2])[0] == 6


def _recv(s, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        assert chunk, "connection closed"
        out += chunk
    return out


def test_topic_deletion_through_the_controller(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.brokers[3].bootstrap})
    topic = "doomed"
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])[topic].result(15)
    wait_until(lambda: all(layout.get_partition_state(cluster.store, topic, p) for p in range(3)),
               message="partition states")
    data, _ = cluster.store.get(TopicZNode.path(topic))
    assignment = TopicZNode.decode(topic, data).partitions
    dirs = [cluster.brokers[r[0]].dirs / f"{topic}-{p}" for p, r in assignment.items()]
    wait_until(lambda: all(d.is_dir() for d in dirs), message="the leaders' logs")
    admin.delete_topics([topic])[topic].result(15)
    wait_until(lambda: cluster.store.exists(TopicZNode.path(topic)) is None
               and cluster.store.exists(f"/admin/delete_topics/{topic}") is None
               and cluster.store.exists(f"/config/topics/{topic}") is None, message="the topic's znodes removed")
    wait_until(lambda: not any(d.exists() for d in dirs), message="the leaders' logs deleted")
    wait_until(lambda: topic not in admin.list_topics(timeout=10).topics, message="Metadata without the topic")


def test_restarted_broker_leads_its_partitions_again(cluster):
    """RF=1: a dead leader leaves its partitions offline (no other replica in the ISR); once it
    registers again the controller elects it with the next leader epoch and its data is served."""
    topic = "spread"
    controller = layout.get_controller_id(cluster.store)
    victim_id = next(i for i in sorted(cluster.brokers) if i != controller)
    data, _ = cluster.store.get(TopicZNode.path(topic))
    led = sorted(p for p, r in TopicZNode.decode(topic, data).partitions.items() if r[0] == victim_id)
    assert led
    victim = cluster.brokers[victim_id]
    victim.kill()
    wait_until(lambda: cluster.store.exists(BrokerIdZNode.path(victim_id)) is None,
               timeout=SESSION_TIMEOUT_MS / 1000 + 5, message=f"broker {victim_id}'s session to expire")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})

    def offline():
        parts = admin.list_topics(topic, timeout=10).topics[topic].partitions
        return all(parts[p].leader == -1 for p in led)
    wait_until(offline, message="its partitions reported without a leader")
    wait_until(lambda: all(layout.get_partition_state(cluster.store, topic, p)[0].leader == -1 for p in led),
               message="the controller marking them offline")
    for p in led:  # Kafka's removeReplicasFromIsr: no leader, the last ISR member kept, next leader epoch
        raw, _ = cluster.store.get(TopicPartitionStateZNode.path(topic, p))
        assert json.loads(raw) == {"controller_epoch": layout.get_controller_epoch(cluster.store)[0], "leader": -1,
                                   "version": 1, "leader_epoch": 1, "isr": [victim_id]}
    victim.start()
    wait_until(lambda: all(layout.get_partition_state(cluster.store, topic, p)[0].leader_epoch == 2 for p in led),
               message="the restarted broker elected again")
    for p in led:
        state, _ = layout.get_partition_state(cluster.store, topic, p)
        assert (state.leader, state.isr) == (victim_id, [victim_id])
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "restart-reader",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in led])
        got: dict[int, list[bytes]] = {p: [] for p in led}
        wait_until(lambda: _poll_into(consumer, got) and sum(map(len, got.values())) >= 20 * len(led), timeout=30,
                   message="the restarted leader's messages", interval=0)
        assert got == {p: [f"{p}-{i}".encode() for i in range(20)] for p in led}
    finally:
        consumer.close()


def test_controller_failover(cluster):
    old = layout.get_controller_id(cluster.store)
    old_epoch = layout.get_controller_epoch(cluster.store)[0]
    cluster.brokers[old].kill()  # SIGKILL

    def new_controller():
        found = layout.get_controller_id(cluster.store)
        return found if found not in (None, old) else None
    new = wait_until(new_controller, timeout=SESSION_TIMEOUT_MS / 1000 + 5, message="a new controller")
    assert new in cluster.brokers and new != old
    assert layout.get_controller_epoch(cluster.store)[0] == old_epoch + 1
    survivor = cluster.brokers[new]
    md = AdminClient({"bootstrap.servers": survivor.bootstrap}).list_topics(timeout=10)
    wait_until(lambda: AdminClient({"bootstrap.servers": survivor.bootstrap}).list_topics(timeout=10).controller_id
               == new, message="Metadata naming the new controller")
    assert old not in AdminClient({"bootstrap.servers": survivor.bootstrap}).list_topics(timeout=10).brokers
    # the new controller handles topic creation
    admin = AdminClient({"bootstrap.servers": survivor.bootstrap})
    admin.create_topics([NewTopic("after-failover", num_partitions=2, replication_factor=1)])["after-failover"] \
        .result(15)
    wait_until(lambda: all(layout.get_partition_state(cluster.store, "after-failover", p) for p in range(2)),
               message="states created by the new controller")
    state, _ = layout.get_partition_state(cluster.store, "after-failover", 0)
    assert state.controller_epoch == old_epoch + 1
    assert md is not None
