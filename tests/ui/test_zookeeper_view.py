"""The collector's ZooKeeper reads on a real ZooKeeper, under a chroot of their own with no broker acting on it:
Kafka 2.8's nodes for registered brokers, the controller, deletions and reassignments, and a ZooKeeper-era group
(ids, owners, offsets with their mtimes). A group left with empty folders only is no group."""
from __future__ import annotations

import json
import uuid

from kazoo.client import KazooClient

from kbroker.ui.zookeeper_view import RegisteredBroker, ZkCommit, ZooKeeperView


def test_kafka_28_nodes_are_read(zookeeper_server) -> None:
    chroot = f"/ui-{uuid.uuid4().hex[:8]}"
    root = KazooClient(hosts=zookeeper_server.hosts)
    root.start(timeout=10)
    root.ensure_path(chroot)
    root.stop()
    root.close()
    connect = f"{zookeeper_server.hosts}{chroot}"
    zk = KazooClient(hosts=connect)
    zk.start(timeout=10)
    view = ZooKeeperView(connect, timeout=10)
    try:
        zk.create("/brokers/ids/2", json.dumps({"host": "127.0.0.1", "port": 9093, "rack": "r1"}).encode(),
                  makepath=True)
        zk.create("/brokers/ids/1", json.dumps({"host": "127.0.0.1", "port": 9092}).encode())
        zk.create("/controller", b'{"version":1,"brokerid":2,"timestamp":"1"}')
        zk.create("/admin/delete_topics/old", makepath=True)
        zk.create("/admin/reassign_partitions", json.dumps({"version": 1, "partitions": [
            {"topic": "t", "partition": 1, "replicas": [1, 2]}, {"topic": "t", "partition": 0, "replicas": [2]}]}
        ).encode())
        zk.create("/consumers/g/ids/g_host-1", b"{}", makepath=True)
        zk.create("/consumers/g/owners/t/0", b"g_host-1", makepath=True)
        zk.create("/consumers/g/offsets/t/1", b"42", makepath=True)
        zk.create("/consumers/g/offsets/t/0", b"7")
        zk.create("/consumers/g/offsets/t/x", b"not a partition")
        zk.create("/consumers/bad/offsets/t/0", b"nan", makepath=True)
        zk.create("/consumers/empty/offsets/t", makepath=True)

        state = view.read()
        assert state.brokers == {1: RegisteredBroker(1, "127.0.0.1", 9092, None),
                                 2: RegisteredBroker(2, "127.0.0.1", 9093, "r1")}
        assert (state.controller, state.deleting, state.reassigning) == (2, ["old"], [("t", 0), ("t", 1)])
        assert [g.name for g in state.groups] == ["g"]
        [group] = state.groups
        assert (group.members, group.owners) == (["g_host-1"], [("t", 0, "g_host-1")])
        mtimes = {p: zk.get(f"/consumers/g/offsets/t/{p}")[1].mtime for p in (0, 1)}
        assert group.commits == [ZkCommit("t", 0, 7, mtimes[0]), ZkCommit("t", 1, 42, mtimes[1])]
        assert state.problems == ["ZooKeeper /consumers/bad/offsets/t/0: not an offset: b'nan'"]

        zk.set("/consumers/g/offsets/t/0", b"7")  # the same offset committed again: a newer mtime
        again = next(g for g in view.read().groups if g.name == "g")
        assert again.commits[0].offset == 7 and again.commits[0].mtime_ms > mtimes[0]
    finally:
        view.close()
        zk.stop()
        zk.close()
