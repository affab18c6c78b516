"""What ``kbroker ui`` reads from ZooKeeper, at the paths Kafka 2.8 uses (kazoo, blocking: the collector calls it
from a thread):

    /brokers/ids/<id>                               registered (live) brokers: {"host", "port", "rack", ...}
    /controller                                     {"brokerid": N}
    /admin/delete_topics/<topic>                    topics being deleted
    /admin/reassign_partitions                      {"partitions": [{"topic", "partition", "replicas"}]}
    /consumers/<group>/ids/<consumer id>            members of a ZooKeeper-era (high-level / balanced) consumer group
    /consumers/<group>/owners/<topic>/<partition>   the consumer id owning a partition
    /consumers/<group>/offsets/<topic>/<partition>  the committed offset as decimal text; the node's mtime is the
                                                    commit time (a commit of the same offset rewrites it, as Burrow's
                                                    kafka_zk module relies on)

The reads of one group's nodes go out together (kazoo's async calls) and are waited for together.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

ZooKeeperError = (KazooException, KazooTimeoutError, OSError)


@dataclass(frozen=True)
class RegisteredBroker:
    id: int
    host: str
    port: int
    rack: str | None


@dataclass(frozen=True)
class ZkCommit:
    topic: str
    partition: int
    offset: int
    mtime_ms: int


@dataclass
class ZkGroup:
    name: str
    members: list[str] = field(default_factory=list)  # consumer ids under ids/
    owners: list[tuple[str, int, str]] = field(default_factory=list)
    commits: list[ZkCommit] = field(default_factory=list)


@dataclass
class ZooKeeperState:
    brokers: dict[int, RegisteredBroker]
    controller: int
    deleting: list[str]
    reassigning: list[tuple[str, int]]
    groups: list[ZkGroup]
    problems: list[str]  # nodes that could not be read, one line each


class ZooKeeperView:
    """A kazoo session to the cluster's ZooKeeper (the connect string may end in a chroot, as Kafka's does)."""

    def __init__(self, connect: str, timeout: float) -> None:
        self.connect = connect
        self.timeout = timeout
        self._zk: KazooClient | None = None

    def close(self) -> None:
        zk, self._zk = self._zk, None
        if zk is not None:
            try:
                zk.stop()
            finally:
                zk.close()

    def _client(self) -> KazooClient:
        if self._zk is None:
            zk = KazooClient(hosts=self.connect, timeout=self.timeout, read_only=True)
            try:
                zk.start(timeout=self.timeout)
            except BaseException:
                zk.stop()
                zk.close()
                raise
            self._zk = zk
        return self._zk

    def read(self) -> ZooKeeperState:
        zk = self._client()
        problems: list[str] = []
        brokers = {}
        for name, data in self._children_data(zk, "/brokers/ids"):
            info = _json(data)
            if name.isdigit() and isinstance(info, dict):
                brokers[int(name)] = RegisteredBroker(int(name), str(info.get("host") or ""),
                                                      int(info.get("port") or -1), info.get("rack"))
        controller = _json(_data(zk, "/controller"))
        reassign = _json(_data(zk, "/admin/reassign_partitions"))
        moving = reassign.get("partitions", []) if isinstance(reassign, dict) else []
        groups = [self._group(zk, g, problems) for g in sorted(_children(zk, "/consumers"))]
        return ZooKeeperState(
            brokers=brokers,
            controller=int(controller.get("brokerid", -1)) if isinstance(controller, dict) else -1,
            deleting=sorted(_children(zk, "/admin/delete_topics")),
            reassigning=sorted((str(m["topic"]), int(m["partition"])) for m in moving
                               if isinstance(m, dict) and "topic" in m and "partition" in m),
            groups=[g for g in groups if g.members or g.owners or g.commits],
            problems=problems)

    def _group(self, zk: KazooClient, name: str, problems: list[str]) -> ZkGroup:
        base = f"/consumers/{name}"
        group = ZkGroup(name, members=sorted(_children(zk, f"{base}/ids")))
        for topic, partition, data, _ in self._partition_nodes(zk, f"{base}/owners"):
            group.owners.append((topic, partition, data.decode(errors="replace")))
        for topic, partition, data, stat in self._partition_nodes(zk, f"{base}/offsets"):
            try:
                group.commits.append(ZkCommit(topic, partition, int(data.decode().strip()), int(stat.mtime)))
            except (UnicodeDecodeError, ValueError):
                problems.append(f"ZooKeeper {base}/offsets/{topic}/{partition}: not an offset: {data[:40]!r}")
        return group

    def _partition_nodes(self, zk: KazooClient, base: str) -> list[tuple[str, int, bytes, Any]]:
        """(topic, partition, data, stat) of every ``base/<topic>/<partition>`` node."""
        pending = []
        for topic in sorted(_children(zk, base)):
            for name in _children(zk, f"{base}/{topic}"):
                if name.isdigit():
                    pending.append((topic, int(name), zk.get_async(f"{base}/{topic}/{name}")))
        out = []
        for topic, partition, result in pending:
            try:
                data, stat = result.get(timeout=self.timeout)
            except NoNodeError:
                continue  # removed between the listing and the read
            out.append((topic, partition, data or b"", stat))
        return sorted(out, key=lambda item: (item[0], item[1]))

    def _children_data(self, zk: KazooClient, path: str) -> list[tuple[str, bytes]]:
        pending = [(name, zk.get_async(f"{path}/{name}")) for name in sorted(_children(zk, path))]
        out = []
        for name, result in pending:
            try:
                out.append((name, result.get(timeout=self.timeout)[0] or b""))
            except NoNodeError:
                continue
        return out


def _children(zk: KazooClient, path: str) -> list[str]:
    try:
        return list(zk.get_children(path))
    except NoNodeError:
        return []


def _data(zk: KazooClient, path: str) -> bytes | None:
    try:
        data, _ = zk.get(path)
        return bytes(data) if data is not None else None
    except NoNodeError:
        return None


def _json(data: bytes | None) -> Any:
    if not data:
        return None
    try:
        return json.loads(data)
    except ValueError:
        return None
