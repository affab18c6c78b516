"""Topics and their partitions: names, replica assignments (``/brokers/topics/<t>``), creation, deletion requests
(``/admin/delete_topics``) and each partition's state (``.../partitions/<p>/state``).
"""
from __future__ import annotations

import logging
import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from zk_compat.errors import (
    InvalidReplicaAssignmentError,
    InvalidTopicError,
    TopicAlreadyExistsError,
    TopicAlreadyMarkedForDeletionError,
    UnknownTopicOrPartitionError,
)
from zk_compat.layout.configs import set_entity_config
from zk_compat.layout.fencing import fenced_multi, fenced_multi_pipelined
from zk_compat.layout.znode_helpers import new_base64_uuid
from zk_compat.store import (
    ANY_VERSION,
    CreateOp,
    DeleteOp,
    MetadataStore,
    MetadataStoreError,
    NodeExistsError,
    NoNodeError,
    Op,
    SetDataOp,
    Stat,
)
from zk_compat.znodes import (
    ConfigEntityZNode,
    DeleteTopicsZNode,
    DeleteTopicZNode,
    PartitionState,
    TopicAssignment,
    TopicPartitionStateZNode,
    TopicPartitionsZNode,
    TopicPartitionZNode,
    TopicsZNode,
    TopicZNode,
)

log = logging.getLogger(__name__)



# topics

_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}", re.ASCII)


def validate_topic_name(topic: str) -> None:
    if topic in (".", "..") or not _LEGAL_TOPIC.fullmatch(topic):
        raise InvalidTopicError(
            f"Topic name {topic!r} is illegal: use 1-249 characters of ASCII letters, digits, '.', '_', '-'")


def _collides(a: str, b: str) -> bool:
    return a.replace(".", "_") == b.replace(".", "_")


def get_all_topics(store: MetadataStore) -> list[str]:
    try:
        return store.get_children(TopicsZNode.path())
    except NoNodeError:
        return []


def topic_exists(store: MetadataStore, topic: str) -> bool:
    return store.exists(TopicZNode.path(topic)) is not None


def get_topic_assignment(store: MetadataStore, topic: str) -> TopicAssignment | None:
    found = get_topic_assignment_with_version(store, topic)
    return None if found is None else found[0]


def get_topic_assignment_with_version(store: MetadataStore, topic: str) -> tuple[TopicAssignment, int] | None:
    """The assignment and the znode's version, for a compare-and-set rewrite (``set_topic_assignment``)."""
    try:
        data, stat = store.get(TopicZNode.path(topic))
    except NoNodeError:
        return None
    return TopicZNode.decode(topic, data), stat.version


def get_topic_assignments(store: MetadataStore, topics: Iterable[str] | None = None) -> dict[str, TopicAssignment]:
    """Assignments of ``topics`` (default: all); topics that do not exist are left out."""
    names = get_all_topics(store) if topics is None else topics
    out = {}
    for topic in names:
        assignment = get_topic_assignment(store, topic)
        if assignment is not None:
            out[topic] = assignment
    return out


def validate_assignment(assignment: Mapping[int, Sequence[int]]) -> None:
    """Kafka's checks on a new topic's assignment: partitions 0..n-1, every list non-empty,
    no broker twice in a list, one replication factor for all partitions."""
    if not assignment:
        raise InvalidReplicaAssignmentError("the assignment has no partitions")
    if sorted(assignment) != list(range(len(assignment))):
        raise InvalidReplicaAssignmentError(
            f"partitions should be consecutive and start at 0, got {sorted(assignment)}")
    sizes = {len(r) for r in assignment.values()}
    if 0 in sizes:
        raise InvalidReplicaAssignmentError("every partition needs at least one replica")
    if len(sizes) > 1:
        raise InvalidReplicaAssignmentError("All partitions should have the same number of replicas")
    for partition, replicas in assignment.items():
        if len(set(replicas)) != len(replicas):
            raise InvalidReplicaAssignmentError(
                f"Duplicate replica assignment found for partition {partition}: {list(replicas)}")


def create_topic(store: MetadataStore, topic: str, assignment: Mapping[int, Sequence[int]],
                 configs: Mapping[str, str] | None = None, *, topic_id: str | None = None,
                 rng: random.Random | None = None) -> str:
    """Create a topic as ``AdminZkClient.createTopicWithAssignment`` does: validate, write
    ``/config/topics/<t>`` (even when empty; no change notification, brokers read it when the
    topic appears), then create ``/brokers/topics/<t>`` (version 3 with a fresh topic id).
    Returns the topic id. The controller's child watch on ``/brokers/topics`` does the rest."""
    outcome = create_topics(store, [NewTopicZNodes(topic, assignment, configs, topic_id)], rng=rng)[0]
    if isinstance(outcome, Exception):
        raise outcome
    return outcome


@dataclass(frozen=True)
class NewTopicZNodes:
    """What ``create_topics`` writes for one topic: its assignment, its config overrides, its id (None: a fresh one)."""
    name: str
    assignment: Mapping[int, Sequence[int]]
    configs: Mapping[str, str] | None = None
    topic_id: str | None = None


def create_topics(store: MetadataStore, topics: Sequence[NewTopicZNodes], *,
                  rng: random.Random | None = None) -> list[str | Exception]:
    """Many topics, each as ``create_topic`` creates one, in three steps however many they are: one listing of
    ``/brokers/topics`` and of ``/admin/delete_topics`` checks them all, then every ``/config/topics/<t>`` goes in
    one pipelined round, then every ``/brokers/topics/<t>``. Kafka's AdminZkClient takes each topic in turn
    (apache/kafka ``core/src/main/scala/kafka/zk/AdminZkClient.scala``, ``createTopicWithAssignment``); the
    znodes written are the same. Returns, per topic, its id or what refused it (that topic alone)."""
    outcomes: list[str | Exception] = ["" for _ in topics]
    existing = set(get_all_topics(store))
    marked = set(get_topics_marked_for_deletion(store))
    taken = {t.replace(".", "_"): t for t in sorted(existing)}  # Kafka: '.' and '_' collide in metric names
    accepted: list[int] = []
    for i, new in enumerate(topics):
        try:
            validate_topic_name(new.name)
            validate_assignment(new.assignment)
            if new.name in existing:
                raise TopicAlreadyExistsError(f"Topic '{new.name}' already exists.")
            if new.name in marked:
                raise TopicAlreadyExistsError(f"Topic '{new.name}' is marked for deletion.")
            clash = taken.get(new.name.replace(".", "_"))
            if clash == new.name:  # named twice in one batch
                raise TopicAlreadyExistsError(f"Topic '{new.name}' already exists.")
            if clash is not None:
                raise InvalidTopicError(f"Topic '{new.name}' collides with existing topic: {clash}")
        except (InvalidTopicError, InvalidReplicaAssignmentError, TopicAlreadyExistsError) as exc:
            outcomes[i] = exc
            continue
        taken[new.name.replace(".", "_")] = new.name
        outcomes[i] = new.topic_id or new_base64_uuid(rng)
        accepted.append(i)
    configs = [(i, ConfigEntityZNode.path("topics", topics[i].name), ConfigEntityZNode.encode(dict(
        topics[i].configs or {}))) for i in accepted]
    for (i, path, data), result in zip(configs, store.multi_pipelined([[CreateOp(path, data)]
                                                                        for _, path, data in configs])):
        if isinstance(result, NodeExistsError):
            store.set(path, data)  # left by an earlier topic of that name: overwritten, as Kafka's setOrCreate
        elif isinstance(result, NoNodeError):
            set_entity_config(store, "topics", topics[i].name, topics[i].configs or {})  # no /config/topics yet
        elif isinstance(result, Exception):
            outcomes[i] = result
    written = [(i, TopicZNode.path(topics[i].name), TopicZNode.encode(TopicAssignment(
        {p: list(r) for p, r in sorted(topics[i].assignment.items())}, topic_id=str(outcomes[i]))))
        for i in accepted if not isinstance(outcomes[i], Exception)]
    for (i, path, data), result in zip(written, store.multi_pipelined([[CreateOp(path, data)]
                                                                        for _, path, data in written])):
        failed = result if isinstance(result, MetadataStoreError) else None
        if isinstance(failed, NoNodeError):  # no /brokers/topics yet
            try:
                store.create(path, data, makepath=True)
                failed = None
            except MetadataStoreError as exc:
                failed = exc
        if isinstance(failed, NodeExistsError):
            outcomes[i] = TopicAlreadyExistsError(f"Topic '{topics[i].name}' already exists.")
        elif failed is not None:
            outcomes[i] = failed
        else:
            log.info("created topic %s (id %s) with assignment %s", topics[i].name, outcomes[i],
                     dict(topics[i].assignment))
    return outcomes


def set_topic_assignment(store: MetadataStore, topic: str, assignment: TopicAssignment,
                         expected_version: int = ANY_VERSION, *,
                         controller_epoch_zk_version: int | None = None) -> Stat:
    """Rewrite ``/brokers/topics/<t>`` (added partitions, reassignment steps, topic-id backfill)."""
    result = fenced_multi(store, [SetDataOp(TopicZNode.path(topic), TopicZNode.encode(assignment),
                                            expected_version)], controller_epoch_zk_version)
    assert isinstance(result[0], Stat)
    return result[0]


def mark_topic_for_deletion(store: MetadataStore, topic: str) -> None:
    """Request deletion (``AdminZkClient.deleteTopic``): create ``/admin/delete_topics/<t>``."""
    outcome = mark_topics_for_deletion(store, [topic])[0]
    if outcome is not None:
        raise outcome


def mark_topics_for_deletion(store: MetadataStore, topics: Sequence[str]) -> list[Exception | None]:
    """``mark_topic_for_deletion`` for many topics: one listing of ``/brokers/topics``, then every
    ``/admin/delete_topics/<t>`` in one pipelined round. Per topic, None or what refused it (that topic alone)."""
    existing = set(get_all_topics(store))
    outcomes: list[Exception | None] = [
        None if t in existing else UnknownTopicOrPartitionError(f"Topic `{t}` to delete does not exist")
        for t in topics]
    todo = [i for i, outcome in enumerate(outcomes) if outcome is None]
    results = store.multi_pipelined([[CreateOp(DeleteTopicZNode.path(topics[i]), None)] for i in todo])
    for i, result in zip(todo, results):
        if isinstance(result, NoNodeError):  # no /admin/delete_topics yet
            try:
                store.create(DeleteTopicZNode.path(topics[i]), None, makepath=True)
                continue
            except MetadataStoreError as exc:
                result = exc
        if isinstance(result, NodeExistsError):
            outcomes[i] = TopicAlreadyMarkedForDeletionError(f"topic {topics[i]} is already marked for deletion")
        elif isinstance(result, Exception):
            outcomes[i] = result
    return outcomes


def get_topics_marked_for_deletion(store: MetadataStore) -> list[str]:
    try:
        return store.get_children(DeleteTopicsZNode.path())
    except NoNodeError:
        return []


def delete_topic_znodes(store: MetadataStore, topic: str, *, controller_epoch_zk_version: int | None = None) -> None:
    """The controller's last deletion step: remove ``/brokers/topics/<t>`` (with its partition
    states), ``/config/topics/<t>`` and ``/admin/delete_topics/<t>`` in one fenced multi."""
    ops: list[Op] = []
    topic_path = TopicZNode.path(topic)
    if store.exists(topic_path) is not None:
        for partition in _children(store, TopicPartitionsZNode.path(topic)):
            partition_path = f"{TopicPartitionsZNode.path(topic)}/{partition}"
            for child in _children(store, partition_path):
                ops.append(DeleteOp(f"{partition_path}/{child}"))
            ops.append(DeleteOp(partition_path))
        if store.exists(TopicPartitionsZNode.path(topic)) is not None:
            ops.append(DeleteOp(TopicPartitionsZNode.path(topic)))
        ops.append(DeleteOp(topic_path))
    for path in (ConfigEntityZNode.path("topics", topic), DeleteTopicZNode.path(topic)):
        if store.exists(path) is not None:
            ops.append(DeleteOp(path))
    if ops:
        fenced_multi(store, ops, controller_epoch_zk_version)


def delete_topics_znodes(store: MetadataStore, topics: Mapping[str, Iterable[int]], *,
                         controller_epoch_zk_version: int) -> list[str]:
    """``delete_topic_znodes`` for many topics at once, given the partitions the controller knows each has: every
    topic's multi is built without reading and all are sent in one pipelined round (Kafka's controller deletes
    in batches of asynchronous requests). A topic whose znodes are not as expected (a state never created, a
    child unknown here) is deleted alone with ``delete_topic_znodes``, which reads them first. Returns the
    topics deleted (all of them). Raises ControllerMovedError when fenced off."""
    names = sorted(topics)
    batches: list[list[Op]] = []
    for topic in names:
        ops: list[Op] = []
        for partition in sorted(topics[topic]):
            ops += [DeleteOp(TopicPartitionStateZNode.path(topic, partition)),
                    DeleteOp(TopicPartitionZNode.path(topic, partition))]
        if ops:
            ops.append(DeleteOp(TopicPartitionsZNode.path(topic)))
        ops += [DeleteOp(TopicZNode.path(topic)), DeleteOp(ConfigEntityZNode.path("topics", topic)),
                DeleteOp(DeleteTopicZNode.path(topic))]
        batches.append(ops)
    outcomes = fenced_multi_pipelined(store, batches, controller_epoch_zk_version)
    for topic, outcome in zip(names, outcomes):
        if isinstance(outcome, MetadataStoreError):
            delete_topic_znodes(store, topic, controller_epoch_zk_version=controller_epoch_zk_version)
    return names


def _children(store: MetadataStore, path: str) -> list[str]:
    try:
        return store.get_children(path)
    except NoNodeError:
        return []


def get_partition_state(store: MetadataStore, topic: str, partition: int) -> tuple[PartitionState, Stat] | None:
    """Leader/ISR and the state znode's Stat (``stat.version`` is the zkVersion)."""
    try:
        data, stat = store.get(TopicPartitionStateZNode.path(topic, partition))
    except NoNodeError:
        return None
    return TopicPartitionStateZNode.decode(topic, partition, data), stat


def create_partition_state(store: MetadataStore, topic: str, partition: int, state: PartitionState, *,
                           controller_epoch_zk_version: int | None = None) -> Stat:
    """Create ``.../partitions``, ``.../partitions/<p>`` (null data, if missing) and the state
    znode, each step fenced. Raises NodeExistsError if the state already exists."""
    for path in (TopicPartitionsZNode.path(topic), TopicPartitionZNode.path(topic, partition)):
        if store.exists(path) is None:
            try:
                fenced_multi(store, [CreateOp(path, None)], controller_epoch_zk_version)
            except NodeExistsError:
                pass
    state_path = TopicPartitionStateZNode.path(topic, partition)
    fenced_multi(store, [CreateOp(state_path, TopicPartitionStateZNode.encode(state))], controller_epoch_zk_version)
    _, stat = store.get(state_path)
    return stat


def create_partition_states(store: MetadataStore, topic: str, states: Mapping[int, PartitionState], *,
                            controller_epoch_zk_version: int | None = None) -> list[int]:
    """Create a new topic's partition states in one fenced multi (``.../partitions`` if missing, then each
    ``.../partitions/<p>`` and its state), one round trip for the whole topic as Kafka's controller pipelines
    ``createTopicPartitionStatesRaw``. Where some already exist (a controller before us got that far), each
    missing one is created alone. Returns the partitions created here."""
    return create_topics_partition_states(store, {topic: states},
                                          controller_epoch_zk_version=controller_epoch_zk_version).get(topic, [])


def create_topics_partition_states(store: MetadataStore, states: Mapping[str, Mapping[int, PartitionState]], *,
                                   controller_epoch_zk_version: int | None = None) -> dict[str, list[int]]:
    """``create_partition_states`` for many topics at once: which ``.../partitions`` nodes exist in one pipelined
    read, then every topic's multi in one pipelined round. A topic deleted meanwhile is skipped. Returns each
    topic's partitions created here."""
    topics = [t for t, s in states.items() if s]
    if not topics:
        return {}
    parents = store.get_many([TopicPartitionsZNode.path(t) for t in topics])
    batches: list[list[Op]] = []
    for topic, parent in zip(topics, parents):
        ops: list[Op] = [] if parent is not None else [CreateOp(TopicPartitionsZNode.path(topic), None)]
        for partition, state in sorted(states[topic].items()):
            ops += [CreateOp(TopicPartitionZNode.path(topic, partition), None),
                    CreateOp(TopicPartitionStateZNode.path(topic, partition),
                             TopicPartitionStateZNode.encode(state))]
        batches.append(ops)
    if controller_epoch_zk_version is None:
        outcomes = store.multi_pipelined(batches)
    else:
        outcomes = fenced_multi_pipelined(store, batches, controller_epoch_zk_version)
    created: dict[str, list[int]] = {}
    for topic, outcome in zip(topics, outcomes):
        if isinstance(outcome, NoNodeError):
            continue  # the topic went meanwhile
        if isinstance(outcome, NodeExistsError):  # some exist: each missing one alone
            created[topic] = []
            for partition, state in sorted(states[topic].items()):
                try:
                    create_partition_state(store, topic, partition, state,
                                           controller_epoch_zk_version=controller_epoch_zk_version)
                    created[topic].append(partition)
                except NodeExistsError:
                    pass
            continue
        if isinstance(outcome, MetadataStoreError):
            raise outcome
        created[topic] = sorted(states[topic])
    return created


def set_partition_states(store: MetadataStore, updates: Sequence[tuple[str, int, PartitionState, int]], *,
                         controller_epoch_zk_version: int) -> list[Stat | MetadataStoreError]:
    """Many conditional state updates (topic, partition, state, expected zkVersion) sent at once, each fenced
    (Kafka's ``KafkaZkClient.updateLeaderAndIsr``, pipelined): the new Stat or the error for each, in order
    (BadVersionError: someone changed it). Raises ControllerMovedError when fenced off."""
    outcomes = fenced_multi_pipelined(store, [
        [SetDataOp(TopicPartitionStateZNode.path(topic, partition), TopicPartitionStateZNode.encode(state), version)]
        for topic, partition, state, version in updates], controller_epoch_zk_version)
    results: list[Stat | MetadataStoreError] = []
    for outcome in outcomes:
        if isinstance(outcome, MetadataStoreError):
            results.append(outcome)
        else:
            stat = outcome[0]
            assert isinstance(stat, Stat)
            results.append(stat)
    return results


def set_partition_state(store: MetadataStore, topic: str, partition: int, state: PartitionState,
                        expected_version: int, *, controller_epoch_zk_version: int | None = None) -> Stat:
    """Conditional update of the state znode (the zkVersion compare-and-set). Raises
    BadVersionError when someone else changed it, ControllerMovedError when fenced off."""
    result = fenced_multi(store, [SetDataOp(TopicPartitionStateZNode.path(topic, partition),
                                            TopicPartitionStateZNode.encode(state), expected_version)],
                          controller_epoch_zk_version)
    assert isinstance(result[0], Stat)
    return result[0]
