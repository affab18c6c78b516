"""One ``Snapshot`` of a cluster per call, read the way an operator's tool reads it (``kbroker.ui.model``).

    collector = collector_from_args(args)     # --bootstrap-server, --zookeeper, --command-config, ...
    snapshot = await collector.snapshot()     # the blocking reads run in a thread, one round at a time
    await collector.close()

A round asks, over kbroker's own admin client (``kbroker.tools.client``):
- Metadata (brokers, controller, every topic's partitions with leader, replicas and ISR), DescribeConfigs for the
  topics' min.insync.replicas;
- ListOffsets earliest and latest, one request of each per partition leader;
- DescribeLogDirs on every broker (dir sizes and errors, replica sizes);
- ListGroups on every broker, then at that broker (the group's coordinator) DescribeGroups for all of them at once
  and OffsetFetch per group; the commits' timestamps come from ``__consumer_offsets`` (``kbroker.ui.commit_log``);
- ZooKeeper, when given (``kbroker.ui.zookeeper_view``): registered brokers (a broker in an assignment but not
  registered is down), the controller, topics being deleted or reassigned, and the ZooKeeper-stored groups;
- the brokers' ``/metrics`` when listed (``kbroker.ui.broker_metrics``): throughput, and each log dir's free and
  total bytes (matched to DescribeLogDirs' dirs by the broker id and path the endpoint names).

Nothing that fails fails the round: what could be read is returned, with one line per failure in ``errors``.
"""
from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kbroker.protocol import API_KEYS
from kbroker.tools.client import (
    AdminClient,
    ClientError,
    Connection,
    KafkaApiError,
    add_command_config,
    bootstrap_servers,
    command_config,
    decode_consumer_assignment,
)
from kbroker.ui.broker_metrics import BrokerMetrics, Disks
from kbroker.ui.commit_log import OFFSETS_TOPIC, CommitLog
from kbroker.ui.model import Broker, Commit, Group, LogDir, Member, Partition, Snapshot, Topic
from kbroker.ui.zookeeper_view import ZooKeeperError, ZooKeeperState, ZooKeeperView

__all__ = ["Collector", "CollectorOptions", "add_collector_options", "collector_from_args"]

EARLIEST, LATEST = -2, -1
TOPIC_RESOURCE = 2
MIN_ISR = "min.insync.replicas"
CONSUMER_PROTOCOLS = ("consumer", "")
DEFAULT_TIMEOUT_MS = 10000

# (topic, partition)
TP = tuple[str, int]


@dataclass(frozen=True)
class CollectorOptions:
    bootstrap_server: str
    zookeeper: str | None = None  # host:port[,host:port...][/chroot], as zookeeper.connect
    security: Mapping[str, str] | None = None  # --command-config's client properties (TLS, SASL)
    broker_metrics: tuple[str, ...] = ()  # the brokers' /metrics URLs
    timeout: float = DEFAULT_TIMEOUT_MS / 1000  # seconds, per request


def _zookeeper_connect(value: str) -> str:
    hosts = value.strip().partition("/")[0]
    if not hosts or any(not h.rpartition(":")[2].isdigit() for h in hosts.split(",")):
        raise argparse.ArgumentTypeError(f"{value!r} is not host:port[,host:port...][/chroot]")
    return value.strip()


def _metrics_urls(value: str) -> tuple[str, ...]:
    urls = tuple(u.strip() for u in value.split(",") if u.strip())
    bad = [u for u in urls if not u.startswith(("http://", "https://"))]
    if not urls or bad:
        raise argparse.ArgumentTypeError(f"{', '.join(bad) or value!r}: expected http://host:port/metrics[,...]")
    return urls


def add_collector_options(parser: argparse.ArgumentParser) -> None:
    """The options saying which cluster to watch and how to reach it, named as Kafka's tools name them."""
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT", type=bootstrap_servers,
                        help="the broker(s) to talk to: host:port[,host:port...]")
    parser.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]", type=_zookeeper_connect, default=None,
                        help="the cluster's zookeeper.connect: registered brokers, the controller, deletions and "
                             "reassignments, and the ZooKeeper-stored consumer groups (/consumers)")
    add_command_config(parser)
    parser.add_argument("--broker-metrics", metavar="URL[,URL...]", type=_metrics_urls, default=(),
                        help="the brokers' Prometheus endpoints (status.listener), "
                             "http://host:port/metrics[,...]: throughput")
    parser.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT_MS, metavar="MS",
                        help=f"how long to wait for each answer from a broker or ZooKeeper, in milliseconds "
                             f"(default {DEFAULT_TIMEOUT_MS})")


def collector_from_args(args: argparse.Namespace) -> Collector:
    """The Collector the options ask for; ClientError when the --command-config file cannot be used."""
    if args.timeout <= 0:
        raise ClientError("--timeout must be positive")
    return Collector(CollectorOptions(
        bootstrap_server=args.bootstrap_server, zookeeper=args.zookeeper, security=command_config(args),
        broker_metrics=tuple(args.broker_metrics), timeout=args.timeout / 1000))


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Collector:
    """Builds Snapshots; keeps between rounds what a round builds on (connections, the ZooKeeper session, the
    position in __consumer_offsets, the previous metrics scrape)."""

    def __init__(self, options: CollectorOptions) -> None:
        self.options = options
        self._admin = AdminClient(options.bootstrap_server, client_id="kbroker-ui", timeout=options.timeout,
                                  security=options.security)
        self._zookeeper = ZooKeeperView(options.zookeeper, options.timeout) if options.zookeeper else None
        self._metrics = BrokerMetrics(list(options.broker_metrics), options.timeout)
        self._commit_log = CommitLog()
        self._known: dict[int, tuple[str, int, str | None]] = {}  # broker id -> host, port, rack once seen
        self._first_seen: dict[tuple[str, str, int], tuple[int, int]] = {}  # offset, when it was first seen
        self._seen_now: set[tuple[str, str, int]] = set()
        self._round = asyncio.Lock()

    async def snapshot(self) -> Snapshot:
        async with self._round:
            return await asyncio.to_thread(self.collect)

    async def close(self) -> None:
        async with self._round:
            await asyncio.to_thread(self._close)

    def _close(self) -> None:
        self._admin.close()
        if self._zookeeper is not None:
            self._zookeeper.close()

    # --- one round (blocking) -----------------------------------------------------------------------------------

    def collect(self) -> Snapshot:
        """One round, blocking: ``snapshot`` runs it in a thread."""
        now = _now_ms()
        errors: list[str] = []
        meta = self._metadata(errors)
        zk = self._read_zookeeper(errors)
        live = sorted(b.node_id for b in meta.brokers) if meta is not None else []
        # LEADER_NOT_AVAILABLE (5): a topic still being created is shown with what it has
        topics_meta = [t for t in (meta.topics if meta is not None else []) if t.name and t.error_code in (0, 5)]
        leaders = {(t.name, p.partition_index): p.leader_id for t in topics_meta for p in t.partitions}
        starts, ends = self._list_offsets(leaders, errors)
        rates, disks, problems = self._metrics.scrape(now)
        log_dirs, sizes = self._log_dirs(live, disks, errors)
        min_isr = self._min_isr([t.name for t in topics_meta], errors)
        topics = tuple(Topic(
            name=t.name, internal=bool(getattr(t, "is_internal", t.name.startswith("__"))),
            min_insync_replicas=min_isr.get(t.name, 1),
            partitions=tuple(Partition(
                topic=t.name, partition=p.partition_index, leader=p.leader_id, replicas=tuple(p.replica_nodes),
                isr=tuple(p.isr_nodes), log_start=starts.get((t.name, p.partition_index), -1),
                log_end=ends.get((t.name, p.partition_index), -1),
                size_bytes=sizes.get((p.leader_id, t.name, p.partition_index), -1))
                for p in sorted(t.partitions, key=lambda p: p.partition_index)))
            for t in sorted(topics_meta, key=lambda t: t.name))
        self._read_commit_log(leaders, starts, errors)
        groups, commits = self._kafka_groups(live, now, errors)
        if zk is not None:
            zk_groups, zk_commits = self._zookeeper_groups(zk, {g.name for g in groups})
            groups = sorted(self._with_owners(groups, zk) + zk_groups, key=lambda g: (g.name, g.storage))
            commits += zk_commits
        errors += problems
        return Snapshot(
            taken_ms=now, brokers=self._brokers(meta, zk, topics), controller=self._controller(meta, zk),
            topics=topics, log_dirs=tuple(log_dirs), groups=tuple(groups), commits=tuple(commits), rates=rates,
            errors=tuple(errors), deleting_topics=tuple(zk.deleting) if zk else (),
            reassigning=tuple(zk.reassigning) if zk else ())

    def _metadata(self, errors: list[str]) -> Any:
        """Every topic's Metadata from the first bootstrap broker that answers (a second try: a connection that
        broke since the last round is dropped by the first)."""
        for attempt in (1, 2):
            try:
                return self._admin.metadata(None)
            except ClientError as exc:
                if attempt == 2:
                    errors.append(f"Metadata: {exc}")
        return None

    def _read_zookeeper(self, errors: list[str]) -> ZooKeeperState | None:
        if self._zookeeper is None:
            return None
        try:
            state = self._zookeeper.read()
        except ZooKeeperError as exc:
            self._zookeeper.close()  # a new session next round
            errors.append(f"ZooKeeper {self.options.zookeeper}: {type(exc).__name__} {exc}".rstrip())
            return None
        errors += state.problems
        return state

    def _on_broker(self, broker: int, what: str, errors: list[str]) -> Connection | None:
        try:
            return self._admin.node(broker)
        except ClientError as exc:
            errors.append(f"{what} on broker {broker}: {exc}")
            return None

    def _list_offsets(self, leaders: Mapping[TP, int], errors: list[str]) -> tuple[dict[TP, int], dict[TP, int]]:
        """Earliest and latest (high watermark) offsets, one ListOffsets of each per leader."""
        by_leader: dict[int, list[TP]] = {}
        for tp, leader in leaders.items():
            if leader >= 0:
                by_leader.setdefault(leader, []).append(tp)
        starts: dict[TP, int] = {}
        ends: dict[TP, int] = {}
        for leader, tps in sorted(by_leader.items()):
            conn = self._on_broker(leader, "ListOffsets", errors)
            if conn is None:
                continue
            try:
                starts.update(_offsets_at(conn, tps, EARLIEST, errors))
                ends.update(_offsets_at(conn, tps, LATEST, errors))
            except ClientError as exc:
                errors.append(f"ListOffsets on broker {leader}: {exc}")
        return starts, ends

    def _log_dirs(self, brokers: Iterable[int], disks: Disks, errors: list[str]
                  ) -> tuple[list[LogDir], dict[tuple[int, str, int], int]]:
        """Every broker's log dirs (free and total bytes from ``disks``, the brokers' /metrics, where they publish
        them), and (broker, topic, partition) -> its current replica's size there."""
        dirs: list[LogDir] = []
        sizes: dict[tuple[int, str, int], int] = {}
        for broker in brokers:
            conn = self._on_broker(broker, "DescribeLogDirs", errors)
            if conn is None:
                continue
            try:
                response = conn.send(API_KEYS["DescribeLogDirs"], {"topics": None})
            except ClientError as exc:
                errors.append(f"DescribeLogDirs on broker {broker}: {exc}")
                continue
            for result in sorted(response.results, key=lambda r: r.log_dir):
                replicas = tuple(sorted((t.name, p.partition_index, p.partition_size)
                                        for t in result.topics for p in t.partitions if not p.is_future_key))
                for topic, partition, size in replicas:
                    sizes[(broker, topic, partition)] = size
                volume = disks.get((broker, result.log_dir))
                dirs.append(LogDir(broker=broker, path=result.log_dir,
                                   error=KafkaApiError(result.error_code).name if result.error_code else None,
                                   size_bytes=sum(size for _, _, size in replicas),
                                   free_bytes=volume.usable_bytes if volume else None,
                                   total_bytes=volume.total_bytes if volume else None, partitions=replicas))
        return dirs, sizes

    def _min_isr(self, topics: list[str], errors: list[str]) -> dict[str, int]:
        if not topics:
            return {}
        try:
            response = self._admin.connection().send(API_KEYS["DescribeConfigs"], {"resources": [
                {"resource_type": TOPIC_RESOURCE, "resource_name": t, "configuration_keys": [MIN_ISR]}
                for t in topics]})
        except ClientError as exc:
            errors.append(f"DescribeConfigs ({MIN_ISR}): {exc}")
            return {}
        out = {}
        for r in response.results:
            for c in r.configs if not r.error_code else ():
                if c.name == MIN_ISR and c.value and c.value.isdigit():
                    out[r.resource_name] = int(c.value)
        return out

    def _read_commit_log(self, leaders: Mapping[TP, int], starts: Mapping[TP, int], errors: list[str]) -> None:
        by_leader: dict[int, list[int]] = {}
        for (topic, partition), leader in leaders.items():
            if topic == OFFSETS_TOPIC and leader >= 0:
                by_leader.setdefault(leader, []).append(partition)
        log_starts = {p: off for (t, p), off in starts.items() if t == OFFSETS_TOPIC}
        for leader, partitions in sorted(by_leader.items()):
            conn = self._on_broker(leader, f"Fetch of {OFFSETS_TOPIC}", errors)
            if conn is None:
                continue
            try:
                errors += self._commit_log.read(conn, partitions, log_starts)
            except ClientError as exc:
                errors.append(f"Fetch of {OFFSETS_TOPIC} on broker {leader}: {exc}")

    # --- groups -------------------------------------------------------------------------------------------------

    def _kafka_groups(self, brokers: Iterable[int], now: int, errors: list[str]
                      ) -> tuple[list[Group], list[Commit]]:
        """ListGroups on every broker; the groups it lists are those it coordinates, so DescribeGroups (all at
        once) and OffsetFetch go to it."""
        groups: list[Group] = []
        commits: list[Commit] = []
        self._seen_now = set()
        failures = len(errors)
        for broker in brokers:
            conn = self._on_broker(broker, "ListGroups", errors)
            if conn is None:
                continue
            try:
                listed = conn.send(API_KEYS["ListGroups"], {"states_filter": []})
                if listed.error_code:
                    raise KafkaApiError(listed.error_code)
                names = sorted(g.group_id for g in listed.groups if g.protocol_type in CONSUMER_PROTOCOLS)
                described = conn.send(API_KEYS["DescribeGroups"], {"groups": names,
                                                                  "include_authorized_operations": False}
                                      ).groups if names else []
            except ClientError as exc:
                errors.append(f"ListGroups/DescribeGroups on broker {broker}: {exc}")
                continue
            for g in described:
                if g.error_code:
                    errors.append(f"DescribeGroups for group '{g.group_id}' on broker {broker}: "
                                  f"{KafkaApiError(g.error_code)}")
                    continue
                if g.group_state == "Dead":
                    continue
                groups.append(Group(name=g.group_id, storage="kafka", state=g.group_state, members=tuple(
                    Member(member_id=m.member_id, client_id=m.client_id, host=m.client_host, assignment=tuple(
                        (tp.topic, tp.partition) for tp in decode_consumer_assignment(m.member_assignment)))
                    for m in g.members)))
                commits += self._kafka_commits(conn, g.group_id, now, errors)
        if len(errors) == failures:  # forget offsets no longer committed (after a round that read every group)
            self._first_seen = {k: v for k, v in self._first_seen.items() if k in self._seen_now}
        return groups, commits

    def _kafka_commits(self, conn: Connection, group: str, now: int, errors: list[str]) -> list[Commit]:
        try:
            response = conn.send(API_KEYS["OffsetFetch"], {"group_id": group, "topics": None}, min_version=2)
            if response.error_code:
                raise KafkaApiError(response.error_code)
        except ClientError as exc:
            errors.append(f"OffsetFetch for group '{group}' at {conn.address}: {exc}")
            return []
        out = []
        for t in response.topics:
            for p in t.partitions:
                if p.error_code or p.committed_offset < 0:
                    continue
                logged = self._commit_log.get(group, t.name, p.partition_index)
                if logged is not None and logged.offset == p.committed_offset:
                    when = logged.timestamp_ms
                else:  # not read from __consumer_offsets yet: the first time this offset was seen
                    when = self._seen_since(("kafka:" + group, t.name, p.partition_index), p.committed_offset, now)
                out.append(Commit(group=group, storage="kafka", topic=t.name, partition=p.partition_index,
                                  offset=p.committed_offset, timestamp_ms=when))
        return sorted(out, key=lambda c: (c.topic, c.partition))

    def _seen_since(self, key: tuple[str, str, int], offset: int, now: int) -> int:
        self._seen_now.add(key)
        seen = self._first_seen.get(key)
        if seen is None or seen[0] != offset:
            seen = self._first_seen[key] = (offset, now)
        return seen[1]

    @staticmethod
    def _zookeeper_groups(zk: ZooKeeperState, kafka_groups: set[str]) -> tuple[list[Group], list[Commit]]:
        """The groups whose offsets live in ZooKeeper. A name that is also a Kafka group (a ZooKeeper-coordinated
        consumer committing with OffsetCommit v1+, or the broker's optional mirror of Kafka commits) is that
        Kafka group: its offsets are the coordinator's."""
        groups, commits = [], []
        for g in zk.groups:
            if g.name in kafka_groups:
                continue
            owned: dict[str, list[tuple[str, int]]] = {}
            for topic, partition, owner in g.owners:
                owned.setdefault(owner, []).append((topic, partition))
            groups.append(Group(name=g.name, storage="zookeeper", state="Active" if g.owners else "Empty",
                                members=tuple(Member(member_id=m, client_id=m, host="",
                                                     assignment=tuple(sorted(owned.get(m, [])))) for m in g.members),
                                owners=tuple(g.owners)))
            commits += [Commit(group=g.name, storage="zookeeper", topic=c.topic, partition=c.partition,
                               offset=c.offset, timestamp_ms=c.mtime_ms) for c in g.commits]
        return groups, commits

    @staticmethod
    def _with_owners(groups: list[Group], zk: ZooKeeperState) -> list[Group]:
        owners = {g.name: tuple(g.owners) for g in zk.groups if g.owners}
        return [Group(g.name, g.storage, g.state, g.members, owners[g.name]) if g.name in owners else g
                for g in groups]

    # --- brokers ------------------------------------------------------------------------------------------------

    def _brokers(self, meta: Any, zk: ZooKeeperState | None, topics: Iterable[Topic]) -> tuple[Broker, ...]:
        """Every broker known: answering (Metadata), registered (ZooKeeper), or named in a partition's replicas
        (down when not registered; without ZooKeeper, when Metadata does not list it)."""
        answering = {b.node_id: (b.host, b.port, getattr(b, "rack", None)) for b in (meta.brokers if meta else [])}
        registered = {b.id: (b.host, b.port, b.rack) for b in (zk.brokers.values() if zk else [])}
        self._known.update(registered)
        self._known.update(answering)
        named = {r for t in topics for p in t.partitions for r in p.replicas}
        up = set(registered) if zk is not None else set(answering)
        out = []
        for broker in sorted(set(self._known) | named):
            host, port, rack = self._known.get(broker, ("", -1, None))
            out.append(Broker(id=broker, host=host, port=port, rack=rack, up=broker in up))
        return tuple(out)

    @staticmethod
    def _controller(meta: Any, zk: ZooKeeperState | None) -> int:
        if zk is not None:
            return zk.controller
        return int(getattr(meta, "controller_id", -1)) if meta is not None else -1


def _offsets_at(conn: Connection, tps: list[TP], timestamp: int, errors: list[str]) -> dict[TP, int]:
    """One ListOffsets to ``conn``'s broker for all of ``tps`` at ``timestamp``."""
    topics: dict[str, list[dict[str, int]]] = {}
    for topic, partition in sorted(tps):
        topics.setdefault(topic, []).append({"partition_index": partition, "timestamp": timestamp,
                                             "current_leader_epoch": -1, "max_num_offsets": 1})
    v = conn.version(API_KEYS["ListOffsets"])
    response = conn.send(API_KEYS["ListOffsets"], {
        "replica_id": -1, "isolation_level": 0,
        "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()]}, version=v)
    out = {}
    for t in response.topics:
        for p in t.partitions:
            if p.error_code:
                errors.append(f"ListOffsets {t.name}-{p.partition_index} at {conn.address}: "
                              f"{KafkaApiError(p.error_code)}")
            elif v == 0:
                if p.old_style_offsets:
                    out[(t.name, p.partition_index)] = p.old_style_offsets[0]
            else:
                out[(t.name, p.partition_index)] = p.offset
    return out
