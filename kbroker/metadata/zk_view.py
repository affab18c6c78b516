"""The cluster as one broker sees it in ZooKeeper mode: live brokers (``/brokers/ids``), the
controller (``/controller``), topics with their assignment (``/brokers/topics``) and configs,
and, for the controller only, partition states (``.../partitions/<p>/state``) and the admin
requests (reassignment, preferred election, ISR change notices).

Every watch (one-shot, ZooKeeper's) and every reconnect only asks for a re-read: ``_on_watch``
notes the path that changed and posts to the broker's loop, where one refresh at a time reads the
view in an executor and hands the ``Snapshot`` to ``on_change``. Events that arrive during a refresh
cause one more refresh, so no change is lost and bursts coalesce.

A refresh reads again only what changed: the small nodes (brokers, controller, admin requests,
notices) and the topic listing every time, a topic's assignment or a partition's state only when it
is new or its watch fired (its watch stays armed until then). So the cost of a change does not grow
with the number of topics, as Kafka's controller reads only the znodes its events name
(apache/kafka ``core/src/main/scala/kafka/controller/KafkaController.scala``, ``processTopicChange``
reads the new topics' assignments, ``processPartitionModifications`` one topic's). After a reconnect
everything is read again: events may have been lost with the connection.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from zk_compat import layout
from zk_compat.store import (
    ConnectionLossError,
    MetadataStore,
    NoNodeError,
    SessionExpiredError,
    SessionState,
    WatchedEvent,
)
from zk_compat.znodes import (
    BrokerIdsZNode,
    BrokerIdZNode,
    BrokerInfo,
    ConfigEntityChangeNotificationZNode,
    ConfigEntityZNode,
    ControllerZNode,
    DeleteTopicsZNode,
    IsrChangeNotificationZNode,
    LogDirEventNotificationZNode,
    PartitionState,
    PreferredReplicaElectionZNode,
    ReassignPartitionsZNode,
    TopicAssignment,
    TopicPartitionStateZNode,
    TopicsZNode,
    TopicZNode,
)

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class LiveBroker:
    """A registered broker. ``host``/``port`` are its inter-broker listener's address (what replica
    fetchers and the controller connect to); ``endpoints`` every advertised listener as
    (listener name, host, port, security protocol), from which clients are answered per listener."""
    id: int
    host: str
    port: int
    rack: str | None
    epoch: int = -1  # Kafka's broker epoch: the czxid of its registration (new at every restart)
    endpoints: tuple[tuple[str, str, int, str], ...] = ()

    def on(self, listener: str) -> LiveBroker | None:
        """This broker as a client of ``listener`` must reach it (None: it has no such listener). A
        broker registered without endpoints (older records) is its one address."""
        if not self.endpoints:
            return self
        for name, host, port, _ in self.endpoints:
            if name == listener:
                if (host, port) == (self.host, self.port):
                    return self
                return LiveBroker(self.id, host, port, self.rack, self.epoch, self.endpoints)
        return None


@dataclass
class Snapshot:
    brokers: dict[int, LiveBroker] = field(default_factory=dict)
    controller_id: int | None = None
    # read only: a topic's dict (and its configs') is shared by the snapshots until its node changes
    assignments: dict[str, dict[int, list[int]]] = field(default_factory=dict)
    topic_ids: dict[str, str | None] = field(default_factory=dict)
    configs: dict[str, dict[str, str]] = field(default_factory=dict)
    states: dict[tuple[str, int], PartitionState] = field(default_factory=dict)
    state_versions: dict[tuple[str, int], int] = field(default_factory=dict)  # the znodes' zkVersions
    isr_changes: list[str] = field(default_factory=list)  # /isr_change_notification children
    log_dir_events: list[str] = field(default_factory=list)  # /log_dir_event_notification children (KIP-112)
    # partition reassignments in progress, from /brokers/topics/<t>: (adding, removing) replicas
    moving: dict[tuple[str, int], tuple[list[int], list[int]]] = field(default_factory=dict)
    reassign_requests: dict[tuple[str, int], list[int]] = field(default_factory=dict)  # /admin/reassign_partitions
    preferred_requests: list[tuple[str, int]] = field(default_factory=list)  # /admin/preferred_replica_election
    deleting: list[str] = field(default_factory=list)  # /admin/delete_topics


def _endpoint(info: BrokerInfo, epoch: int = -1, inter_broker: str | None = None) -> LiveBroker:
    """A registration as a LiveBroker whose address is its ``inter_broker`` listener's (else its first)."""
    ep = next((e for e in info.endpoints if e.listener_name == inter_broker), info.endpoints[0])
    # a host of None (all interfaces, written empty) must not reach Metadata, whose host is no nullable string
    endpoints = tuple((e.listener_name, e.host or "", e.port, e.security_protocol) for e in info.endpoints)
    return LiveBroker(info.id, ep.host or "", ep.port, info.rack, epoch, endpoints)


def _changed_keys(changed: set[str]) -> tuple[set[str], set[tuple[str, int]]]:
    """The topics (``/brokers/topics/<t>``) and partition states (``.../partitions/<p>/state``) among the paths
    whose watch fired."""
    prefix = TopicsZNode.path() + "/"
    topics: set[str] = set()
    states: set[tuple[str, int]] = set()
    for path in changed:
        if not path.startswith(prefix):
            continue
        parts = path[len(prefix):].split("/")
        if len(parts) == 1:
            topics.add(parts[0])
        elif len(parts) == 4 and parts[1] == "partitions" and parts[3] == "state" and parts[2].isdigit():
            states.add((parts[0], int(parts[2])))
    return topics, states


class RunBlocking(Protocol):
    """Runs a blocking store call off the event loop and gives its result (``ClusterView.run_blocking``)."""

    def __call__(self, fn: Callable[[], T], /) -> Awaitable[T]: ...


class ClusterView:
    def __init__(self, store: MetadataStore, loop: asyncio.AbstractEventLoop,
                 on_change: Callable[[Snapshot], Awaitable[None] | None], inter_broker_listener: str | None = None,
                 wants_states: Callable[[int | None], bool] = lambda controller_id: True) -> None:
        self.store = store
        self.inter_broker_listener = inter_broker_listener
        self.loop = loop
        self.on_change = on_change
        # Partition states matter only to the controller (brokers hear theirs through
        # LeaderAndIsr/UpdateMetadata): given the controller id read, read and watch them?
        self.wants_states = wants_states
        self.snapshot = Snapshot()
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="zk-view")
        self._watcher = self._on_watch  # one object, so re-arming is one entry in kazoo's tables
        self._dirty = False
        # what the last reads found (executor thread), kept while their watches stay armed: a topic's assignment
        # (None: no such node, an exists watch armed) and a partition's state with its zkVersion
        self._topics: dict[str, TopicAssignment | None] = {}
        # each topic's assignment as the snapshots hand it out, made once per read of the topic's node (not at every
        # refresh: thousands of topics), and shared by the snapshots until it changes (they never modify it)
        self._handed_out: dict[str, tuple[TopicAssignment, dict[int, list[int]]]] = {}
        self._states: dict[tuple[str, int], tuple[PartitionState, int] | None] = {}
        self._changed: set[str] = set()  # paths whose watch fired since the last read (any thread)
        self._changed_lock = threading.Lock()
        self._read_all = True  # the next read reads everything (at start and after a reconnect)
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        self._known_configs: dict[str, dict[str, str]] = {}
        self._config_changes = layout.ConfigChangeReader()

    async def start(self) -> None:
        self.store.add_listener(self._on_state)
        await self.refresh()

    def stop(self) -> None:
        self._stopped = True
        self.store.remove_listener(self._on_state)
        if self._task is not None:
            self._task.cancel()
        self._executor.shutdown(wait=False, cancel_futures=True)

    # -- events (store threads) -> loop

    def _on_watch(self, event: WatchedEvent) -> None:
        with self._changed_lock:
            self._changed.add(event.path)
        self.trigger_threadsafe()

    def _on_state(self, state: SessionState) -> None:
        if state is SessionState.CONNECTED:
            with self._changed_lock:
                self._read_all = True
            self.trigger_threadsafe()

    def trigger_threadsafe(self) -> None:
        if self._stopped:
            return
        try:
            self.loop.call_soon_threadsafe(self.trigger)
        except RuntimeError:
            pass  # loop closed

    def trigger(self) -> None:
        if self._stopped:
            return
        self._dirty = True
        if self._task is None or self._task.done():
            self._task = self.loop.create_task(self._run())

    async def _run(self) -> None:
        while self._dirty and not self._stopped:
            self._dirty = False
            try:
                await self.refresh()
            except (ConnectionLossError, SessionExpiredError) as exc:
                log.info("cluster view refresh interrupted (%s); re-reading on reconnect", exc)
            except Exception:
                log.exception("cluster view refresh failed; retrying")
                await asyncio.sleep(0.5)
                self._dirty = True

    async def refresh(self) -> None:
        snapshot = await self.loop.run_in_executor(self._executor, self._read)
        self.snapshot = snapshot
        result = self.on_change(snapshot)
        if asyncio.iscoroutine(result):
            await result

    async def run_blocking(self, fn: Callable[[], T]) -> T:
        """Run a blocking store call on the view's thread (serialized with the reads)."""
        return await self.loop.run_in_executor(self._executor, fn)

    # -- blocking reads (executor)

    def _get(self, path: str) -> bytes | None:
        found = self._get_with_version(path)
        return None if found is None else found[0]

    def _get_with_version(self, path: str) -> tuple[bytes | None, int] | None:
        """Read with a data watch; a missing node gets an exists watch (fires on creation). A node
        may hold null data: (None, version)."""
        while True:
            try:
                data, stat = self.store.get(path, watch=self._watcher)
                return data, stat.version
            except NoNodeError:
                if self.store.exists(path, watch=self._watcher) is None:
                    return None

    def _children(self, path: str) -> list[str]:
        while True:
            try:
                return self.store.get_children(path, watch=self._watcher)
            except NoNodeError:
                if self.store.exists(path, watch=self._watcher) is None:
                    return []

    def _follow_config_changes(self) -> None:
        """Kafka's ZkConfigManager: each new ``/config/changes/config_change_<seq>`` names an
        entity whose configs are read again. Only topic configs are followed here (users, clients and
        brokers: kbroker.security.entity_configs); at start every config is read fresh, so older notices are moot."""
        names = self._children(ConfigEntityChangeNotificationZNode.path())
        for entity in self._config_changes.new_entities(self.store, names):
            kind, _, entity_name = entity.partition("/")
            if kind == "topics":
                self._known_configs.pop(entity_name, None)
                log.info("configs of topic %s changed", entity_name)

    def _take_changes(self) -> tuple[bool, set[str]]:
        """(read everything?, the paths whose watch fired) since the last read; those found later are the next
        read's."""
        with self._changed_lock:
            read_all, changed = self._read_all, self._changed
            self._read_all, self._changed = False, set()
        return read_all, changed

    def _read_topics(self, topics: list[str]) -> None:
        """Read these topics' assignments (watched) in one pipelined round; None for a topic whose node is gone."""
        found = self.store.get_many([TopicZNode.path(t) for t in topics], watch=self._watcher)
        for topic, node in zip(topics, found):
            self._topics[topic] = None if node is None or node[0] is None else TopicZNode.decode(topic, node[0])

    def _read_states(self, keys: list[tuple[str, int]]) -> None:
        """Read these partitions' states (watched; a missing one watched for its creation) in one pipelined round."""
        found = self.store.get_many([TopicPartitionStateZNode.path(t, p) for t, p in keys], watch=self._watcher)
        for (topic, index), node in zip(keys, found):
            self._states[(topic, index)] = None if node is None or node[0] is None else (
                TopicPartitionStateZNode.decode(topic, index, node[0]), node[1].version)

    def _read_configs(self, topics: list[str]) -> None:
        """New topics' config overrides (``/config/topics/<t>``; their changes come through /config/changes)."""
        found = self.store.get_many([ConfigEntityZNode.path("topics", t) for t in topics])
        for topic, node in zip(topics, found):
            self._known_configs[topic] = {} if node is None else ConfigEntityZNode.decode("topics", topic, node[0])

    def _read(self) -> Snapshot:
        store = self.store
        read_all, changed = self._take_changes()
        snap = Snapshot()
        for child in self._children(BrokerIdsZNode.path()):
            if not child.isdigit():
                continue
            try:
                data, stat = store.get(BrokerIdZNode.path(int(child)))
            except NoNodeError:
                continue
            try:
                snap.brokers[int(child)] = _endpoint(BrokerIdZNode.decode(int(child), data), stat.czxid,
                                                     self.inter_broker_listener)
            except (ValueError, IndexError):
                log.warning("unreadable registration of broker %s; ignored", child)
        snap.brokers = dict(sorted(snap.brokers.items()))
        data = self._get(ControllerZNode.path())
        if data is not None:
            try:
                snap.controller_id = ControllerZNode.decode(data).broker_id
            except ValueError:
                snap.controller_id = None
        self._follow_config_changes()
        read_states = self.wants_states(snap.controller_id)
        if not read_states:
            self._states.clear()  # unwatched from now on: read afresh if this broker becomes controller
        topics = sorted(self._children(TopicsZNode.path()))
        for gone in set(self._topics).difference(topics):
            del self._topics[gone]
            self._handed_out.pop(gone, None)
        if len(self._states) > 0:
            listed = set(topics)
            for key in [k for k in self._states if k[0] not in listed]:
                del self._states[key]
        changed_topics, changed_states = _changed_keys(changed)
        self._read_topics([t for t in topics if read_all or t in changed_topics or t not in self._topics])
        self._read_configs([t for t in topics if t not in self._known_configs])  # again after a change notice
        stale: list[tuple[str, int]] = []
        for topic in topics:
            assignment = self._topics[topic]
            if assignment is None:
                continue
            handed = self._handed_out.get(topic)
            if handed is None or handed[0] is not assignment:
                handed = self._handed_out[topic] = (assignment, {p: list(r) for p, r in assignment.partitions.items()})
            snap.assignments[topic] = handed[1]
            for p in set(assignment.adding_replicas) | set(assignment.removing_replicas):
                snap.moving[(topic, p)] = (list(assignment.adding_replicas.get(p, [])),
                                           list(assignment.removing_replicas.get(p, [])))
            snap.topic_ids[topic] = assignment.topic_id
            snap.configs[topic] = self._known_configs[topic]
            if read_states:
                # a state known missing is read again at every refresh: the controller creates a topic's states in
                # one multi, but their watch events come one by one, and a refresh between two of them would show
                # the topic with some partitions (UpdateMetadata would announce it so; Kafka's comes whole)
                stale.extend(key for key in ((topic, p) for p in assignment.partitions)
                             if read_all or key in changed_states or self._states.get(key) is None)
        if read_states:
            self._read_states(stale)
            for topic, partitions in snap.assignments.items():
                for index in partitions:
                    found = self._states.get((topic, index))
                    if found is not None:
                        snap.states[(topic, index)], snap.state_versions[(topic, index)] = found
        snap.deleting = sorted(self._children(DeleteTopicsZNode.path()))
        snap.isr_changes = sorted(self._children(IsrChangeNotificationZNode.path()))
        snap.log_dir_events = sorted(self._children(LogDirEventNotificationZNode.path()))
        for path, decode, attr in ((ReassignPartitionsZNode.path(), ReassignPartitionsZNode.decode,
                                    "reassign_requests"),
                                   (PreferredReplicaElectionZNode.path(), PreferredReplicaElectionZNode.decode,
                                    "preferred_requests")):
            data = self._get(path)
            if data is not None:
                try:
                    setattr(snap, attr, decode(data))
                except ValueError as exc:
                    log.warning("ignoring unreadable %s: %s", path, exc)
        return snap
