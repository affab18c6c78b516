"""Kafka's ZooKeeper-mode operations, written once over any MetadataStore.

What ``KafkaZkClient`` and ``AdminZkClient`` do in Kafka, for the broker, the controller and the
admin handlers: startup paths, broker registration and id generation, cluster id, controller
election with ``/controller_epoch`` fencing, topics and their configs, partition state, topic
deletion requests, config change notifications, producer-id blocks and ZooKeeper-era consumer
offsets. Kafka's refusals (topic exists, bad assignment, ...) are raised as ``zk_compat.errors``
classes, each with its Kafka error code (the broker's ``kbroker.errors.translate_zk()`` turns
them into its own); store errors pass through unchanged.
"""
from __future__ import annotations

import base64
import logging
import random
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence

from zk_compat.assignment import (
    assign_replicas_for_new_partitions as assign_replicas_for_new_partitions,
    assign_replicas_to_brokers as assign_replicas_to_brokers,
)

# re-exported: the broker plans new topics and partitions through this module
from zk_compat.clock import wall_ms
from zk_compat.errors import (
    InvalidReplicaAssignmentError,
    InvalidTopicError,
    TopicAlreadyExistsError,
    TopicAlreadyMarkedForDeletionError,
    UnknownTopicOrPartitionError,
)
from zk_compat.store import (
    ANY_VERSION,
    BadVersionError,
    CheckVersionOp,
    CreateOp,
    DeleteOp,
    MetadataStore,
    MetadataStoreError,
    NodeExistsError,
    NoNodeError,
    Op,
    OpResult,
    SetDataOp,
    Stat,
)
from zk_compat.znodes import (
    DEFAULT_CONFIG_ENTITY,
    PERSISTENT_ZK_PATHS,
    BrokerIdsZNode,
    BrokerIdZNode,
    BrokerInfo,
    BrokerSequenceIdZNode,
    ClusterIdZNode,
    ConfigEntityChangeNotificationSequenceZNode,
    ConfigEntityChangeNotificationZNode,
    ConfigEntityZNode,
    ConsumerOffsetZNode,
    ControllerEpochZNode,
    ControllerZNode,
    DeleteTopicsZNode,
    DeleteTopicZNode,
    FeatureZNode,
    FeatureZNodeData,
    IsrChangeNotificationSequenceZNode,
    LogDirEventNotificationSequenceZNode,
    LogDirEventNotificationZNode,
    PartitionState,
    ProducerIdBlock,
    ProducerIdBlockZNode,
    TopicAssignment,
    TopicPartitionStateZNode,
    TopicPartitionsZNode,
    TopicPartitionZNode,
    TopicsZNode,
    TopicZNode,
    sanitize_entity_name,
)

log = logging.getLogger(__name__)

RESERVED_BROKER_MAX_ID = 1000  # reserved.broker.max.id default
INITIAL_CONTROLLER_EPOCH = 0


class BrokerIdInUseError(NodeExistsError):
    """Another live broker (another session) has registered this broker id."""


class ControllerMovedError(MetadataStoreError):
    """The ``/controller_epoch`` check failed: another broker is controller now (Kafka's
    ControllerMovedException). The caller must resign."""


def _ensure_path(store: MetadataStore, path: str) -> None:
    try:
        store.create(path, None, makepath=True)
    except NodeExistsError:
        pass


def ensure_persistent_paths(store: MetadataStore) -> None:
    """Create the persistent paths every broker creates at startup, if missing (null data)."""
    for path in PERSISTENT_ZK_PATHS:
        _ensure_path(store, path)


def new_base64_uuid(rng: random.Random | None = None) -> str:
    """A random (version 4) UUID as 22 characters of URL-safe base64 without padding: Kafka's
    cluster id and topic id format. Never all-zero, never starting with '-' (which command-line
    tools would take for an option)."""
    while True:
        raw = uuid.UUID(int=rng.getrandbits(128), version=4).bytes if rng else uuid.uuid4().bytes
        text = base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")
        if not text.startswith("-") and any(raw):
            return text


# ---------------------------------------------------------------------------------------------
# fencing

def fenced_multi(store: MetadataStore, ops: Sequence[Op], controller_epoch_zk_version: int | None) -> list[OpResult]:
    """Run ``ops`` as one multi, preceded by ``check(/controller_epoch, version)`` when a version
    is given (every controller write in Kafka is fenced this way). A failed check raises
    ControllerMovedError; a failing op raises its own error with ``failed_op_index`` relative to
    ``ops``. Returns the results of ``ops``."""
    if controller_epoch_zk_version is None:
        return store.multi(ops)
    try:
        results = store.multi([CheckVersionOp(ControllerEpochZNode.path(), controller_epoch_zk_version), *ops])
    except MetadataStoreError as exc:
        if exc.failed_op_index == 0:
            raise ControllerMovedError(
                f"controller epoch zkVersion {controller_epoch_zk_version} is stale ({exc}); "
                f"another broker is controller") from exc
        if exc.failed_op_index is not None:
            exc.failed_op_index -= 1
            exc.results = exc.results[1:] if exc.results else exc.results
        raise
    return results[1:]


# ---------------------------------------------------------------------------------------------
# brokers

def register_broker(store: MetadataStore, info: BrokerInfo, *, previous_session_id: int | None = None) -> int:
    """Register this broker: ephemeral ``/brokers/ids/<id>`` created and then written in one
    multi (so its stat version is 1, as Kafka's). Returns the broker epoch (the node's czxid).

    If the node exists and belongs to this session, that registration stands. If it belongs to
    ``previous_session_id`` (this broker's own session that just expired, whose ephemeral node
    the server has not removed yet), it is replaced. Any other owner is another live broker:
    BrokerIdInUseError."""
    path = BrokerIdZNode.path(info.id)
    data = BrokerIdZNode.encode(info)
    for _ in range(3):
        try:
            results = store.multi([CreateOp(path, None, ephemeral=True), SetDataOp(path, data, 0)])
            stat = results[1]
            assert isinstance(stat, Stat)
            log.info("registered broker %d at %s (broker epoch %d)", info.id, path, stat.czxid)
            return stat.czxid
        except NodeExistsError:
            try:
                existing, stat = store.get(path)
            except NoNodeError:
                continue  # went away meanwhile: try again
            if stat.ephemeral_owner == store.session_id:
                return stat.czxid
            if previous_session_id is not None and stat.ephemeral_owner == previous_session_id:
                try:
                    store.delete(path, stat.version)
                except (NoNodeError, BadVersionError):
                    pass
                continue
            when = ""
            try:
                when = f", registered at {BrokerIdZNode.decode(info.id, existing).timestamp_ms} ms"
            except ValueError:
                pass
            raise BrokerIdInUseError(
                f"broker id {info.id} is already registered by another live broker (session "
                f"{stat.ephemeral_owner:#x}{when}): {path} exists. Give this broker another "
                f"broker.id, or stop the other one", path=path) from None
    raise BrokerIdInUseError(f"could not register {path}: it keeps changing", path=path)


def get_broker(store: MetadataStore, broker_id: int) -> BrokerInfo | None:
    try:
        data, _ = store.get(BrokerIdZNode.path(broker_id))
    except NoNodeError:
        return None
    return BrokerIdZNode.decode(broker_id, data)


def get_all_brokers_and_epochs(store: MetadataStore) -> dict[int, tuple[BrokerInfo, int]]:
    """Live brokers by id, each with its broker epoch (czxid of its registration)."""
    out: dict[int, tuple[BrokerInfo, int]] = {}
    for child in store.get_children(BrokerIdsZNode.path()):
        if not child.isdigit():
            log.warning("ignoring %s/%s: not a broker id", BrokerIdsZNode.path(), child)
            continue
        broker_id = int(child)
        try:
            data, stat = store.get(BrokerIdZNode.path(broker_id))
        except NoNodeError:
            continue  # deregistered meanwhile
        out[broker_id] = (BrokerIdZNode.decode(broker_id, data), stat.czxid)
    return dict(sorted(out.items()))


def get_all_brokers(store: MetadataStore) -> dict[int, BrokerInfo]:
    return {broker_id: info for broker_id, (info, _) in get_all_brokers_and_epochs(store).items()}


def generate_broker_id(store: MetadataStore, reserved_broker_max_id: int = RESERVED_BROKER_MAX_ID) -> int:
    """A fresh broker id: an unconditional write to ``/brokers/seqid`` returns its new stat
    version, plus ``reserved.broker.max.id`` (so the first is 1001)."""
    path = BrokerSequenceIdZNode.path()
    try:
        stat = store.set(path, BrokerSequenceIdZNode.encode(), ANY_VERSION)
    except NoNodeError:
        _ensure_path(store, path)
        stat = store.set(path, BrokerSequenceIdZNode.encode(), ANY_VERSION)
    return stat.version + reserved_broker_max_id


# ---------------------------------------------------------------------------------------------
# cluster id

def get_cluster_id(store: MetadataStore) -> str | None:
    try:
        data, _ = store.get(ClusterIdZNode.path())
    except NoNodeError:
        return None
    return ClusterIdZNode.decode(data)


def get_or_create_cluster_id(store: MetadataStore, proposed: str | None = None,
                             rng: random.Random | None = None) -> str:
    """The cluster id, created by the first broker to get here (the others read it)."""
    existing = get_cluster_id(store)
    if existing is not None:
        return existing
    cluster_id = proposed or new_base64_uuid(rng)
    try:
        store.create(ClusterIdZNode.path(), ClusterIdZNode.encode(cluster_id), makepath=True)
        return cluster_id
    except NodeExistsError:
        found = get_cluster_id(store)
        assert found is not None
        return found


# ---------------------------------------------------------------------------------------------
# controller

def get_controller_id(store: MetadataStore) -> int | None:
    try:
        data, _ = store.get(ControllerZNode.path())
    except NoNodeError:
        return None
    try:
        return ControllerZNode.decode(data).broker_id
    except ValueError:
        log.warning("unreadable %s; treating the controller as unknown", ControllerZNode.path())
        return None


def get_controller_epoch(store: MetadataStore) -> tuple[int, Stat] | None:
    try:
        data, stat = store.get(ControllerEpochZNode.path())
    except NoNodeError:
        return None
    return ControllerEpochZNode.decode(data), stat


def register_controller_and_increment_epoch(store: MetadataStore, broker_id: int,
                                            timestamp_ms: int | None = None) -> tuple[int, int]:
    """Try to become controller (Kafka's ``registerControllerAndIncrementControllerEpoch``):
    create the ephemeral ``/controller`` and bump ``/controller_epoch`` (expected version = the
    one just read) in one multi. Returns (new controller epoch, its zkVersion, the fencing token
    for every later controller write). Raises ControllerMovedError if another broker won."""
    timestamp_ms = wall_ms() if timestamp_ms is None else timestamp_ms
    current = get_controller_epoch(store)
    if current is None:
        try:
            store.create(ControllerEpochZNode.path(), ControllerEpochZNode.encode(INITIAL_CONTROLLER_EPOCH))
            epoch, zk_version = INITIAL_CONTROLLER_EPOCH, 0
        except NodeExistsError:
            current = get_controller_epoch(store)
            if current is None:
                raise ControllerMovedError(f"{ControllerEpochZNode.path()} vanished during election") from None
            epoch, zk_version = current[0], current[1].version
    else:
        epoch, zk_version = current[0], current[1].version
    new_epoch = epoch + 1
    try:
        results = store.multi([
            CreateOp(ControllerZNode.path(), ControllerZNode.encode(broker_id, timestamp_ms), ephemeral=True),
            SetDataOp(ControllerEpochZNode.path(), ControllerEpochZNode.encode(new_epoch), zk_version),
        ])
    except (NodeExistsError, BadVersionError):
        # Either someone else won, or this is our own earlier attempt that did go through.
        if get_controller_id(store) == broker_id:
            now = get_controller_epoch(store)
            if now is not None and now[0] == new_epoch:
                return new_epoch, now[1].version
        raise ControllerMovedError(f"broker {get_controller_id(store)} is controller; "
                                   f"broker {broker_id} stays a follower") from None
    stat = results[1]
    assert isinstance(stat, Stat)
    log.info("broker %d is controller with epoch %d (epoch zkVersion %d)", broker_id, new_epoch, stat.version)
    return new_epoch, stat.version


def resign_controller(store: MetadataStore, controller_epoch_zk_version: int) -> None:
    """Delete ``/controller`` (fenced) so that a new election happens."""
    try:
        fenced_multi(store, [DeleteOp(ControllerZNode.path())], controller_epoch_zk_version)
    except NoNodeError:
        pass



def enable_feature_versioning(store: MetadataStore) -> FeatureZNodeData:
    """What a 2.8 controller does to ``/feature`` at failover (IBP >= 2.7-IV0): create it enabled
    with no finalized features, or turn a disabled node into an enabled, empty one; an enabled
    node is left alone. Returns the node's content."""
    path = FeatureZNode.path()
    enabled = FeatureZNodeData(FeatureZNode.ENABLED)
    while True:
        try:
            data, stat = store.get(path)
        except NoNodeError:
            try:
                store.create(path, FeatureZNode.encode(enabled))
                return enabled
            except NodeExistsError:
                continue
        current = FeatureZNode.decode(data)
        if current.status == FeatureZNode.ENABLED:
            return current
        if current.features:
            log.warning("%s was disabled with finalized features %s; enabling it empty", path, current.features)
        try:
            store.set(path, FeatureZNode.encode(enabled), stat.version)
            return enabled
        except BadVersionError:
            continue

# ---------------------------------------------------------------------------------------------
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
    validate_topic_name(topic)
    validate_assignment(assignment)
    existing = get_all_topics(store)
    if topic in existing:
        raise TopicAlreadyExistsError(f"Topic '{topic}' already exists.")
    if store.exists(DeleteTopicZNode.path(topic)) is not None:
        raise TopicAlreadyExistsError(f"Topic '{topic}' is marked for deletion.")
    clash = next((t for t in existing if _collides(t, topic)), None)
    if clash is not None:
        raise InvalidTopicError(f"Topic '{topic}' collides with existing topic: {clash}")
    topic_id = topic_id or new_base64_uuid(rng)
    set_entity_config(store, "topics", topic, dict(configs or {}))
    data = TopicZNode.encode(TopicAssignment({p: list(r) for p, r in sorted(assignment.items())},
                                             topic_id=topic_id))
    try:
        store.create(TopicZNode.path(topic), data, makepath=True)
    except NodeExistsError:
        raise TopicAlreadyExistsError(f"Topic '{topic}' already exists.") from None
    log.info("created topic %s (id %s) with assignment %s", topic, topic_id, dict(assignment))
    return topic_id


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
    if not topic_exists(store, topic):
        raise UnknownTopicOrPartitionError(f"Topic `{topic}` to delete does not exist")
    try:
        store.create(DeleteTopicZNode.path(topic), None, makepath=True)
    except NodeExistsError:
        raise TopicAlreadyMarkedForDeletionError(f"topic {topic} is already marked for deletion") from None


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


def _children(store: MetadataStore, path: str) -> list[str]:
    try:
        return store.get_children(path)
    except NoNodeError:
        return []


# ---------------------------------------------------------------------------------------------
# partition state

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


def set_partition_state(store: MetadataStore, topic: str, partition: int, state: PartitionState,
                        expected_version: int, *, controller_epoch_zk_version: int | None = None) -> Stat:
    """Conditional update of the state znode (the zkVersion compare-and-set). Raises
    BadVersionError when someone else changed it, ControllerMovedError when fenced off."""
    result = fenced_multi(store, [SetDataOp(TopicPartitionStateZNode.path(topic, partition),
                                            TopicPartitionStateZNode.encode(state), expected_version)],
                          controller_epoch_zk_version)
    assert isinstance(result[0], Stat)
    return result[0]


# ---------------------------------------------------------------------------------------------
# configs

def _entity_name(entity_type: str, name: str) -> str:
    """Path form of an entity name: users and client ids are sanitized (URL-encoded) except
    the default entity; a user's client entity is written ``<user>/clients/<client id>``."""
    if entity_type not in ("users", "clients"):
        return name

    def one(part: str) -> str:
        return part if part == DEFAULT_CONFIG_ENTITY else sanitize_entity_name(part)

    if entity_type == "users" and "/clients/" in name:
        user, client = name.split("/clients/", 1)
        return f"{one(user)}/clients/{one(client)}"
    return one(name)


def get_entity_config(store: MetadataStore, entity_type: str, name: str) -> dict[str, str]:
    """Config overrides of an entity (``{}`` if it has none). ``name`` unsanitized; a user's
    client quota entity is ``"<user>/clients/<client id>"``."""
    entity = _entity_name(entity_type, name)
    try:
        data, _ = store.get(ConfigEntityZNode.path(entity_type, entity))
    except NoNodeError:
        return {}
    return ConfigEntityZNode.decode(entity_type, entity, data)


def set_entity_config(store: MetadataStore, entity_type: str, name: str, configs: Mapping[str, str]) -> None:
    """Write (set, or create with parents) an entity's config node, without a notification."""
    entity = _entity_name(entity_type, name)
    path = ConfigEntityZNode.path(entity_type, entity)
    data = ConfigEntityZNode.encode(configs)
    try:
        store.set(path, data)
    except NoNodeError:
        try:
            store.create(path, data, makepath=True)
        except NodeExistsError:
            store.set(path, data)


def change_entity_config(store: MetadataStore, entity_type: str, name: str, configs: Mapping[str, str]) -> str:
    """Change an entity's configs as ``AdminZkClient.changeEntityConfig`` does: write the node,
    then create ``/config/changes/config_change_<seq>`` naming it. Returns the notification path."""
    set_entity_config(store, entity_type, name, configs)
    entity_path = f"{entity_type}/{_entity_name(entity_type, name)}"
    return create_config_change_notification(store, entity_path)


def broker_config_entity(broker_id: int | None) -> str:
    """The ``/config/brokers`` entity of one broker's dynamic configs, or of the cluster default (None)."""
    return DEFAULT_CONFIG_ENTITY if broker_id is None else str(broker_id)


def get_broker_config(store: MetadataStore, broker_id: int | None) -> dict[str, str]:
    """A broker's dynamic configs (``/config/brokers/<id>``), or the cluster default's (``<default>``)."""
    return get_entity_config(store, "brokers", broker_config_entity(broker_id))


def change_broker_config(store: MetadataStore, broker_id: int | None, configs: Mapping[str, str]) -> str:
    """AdminZkClient.changeBrokerConfig: the whole layer written, then a ``brokers/<id>`` (or
    ``brokers/<default>``) change notice every broker follows. Returns the notice's path."""
    return change_entity_config(store, "brokers", broker_config_entity(broker_id), configs)


def create_config_change_notification(store: MetadataStore, entity_path: str) -> str:
    return store.create(ConfigEntityChangeNotificationSequenceZNode.create_path(),
                        ConfigEntityChangeNotificationSequenceZNode.encode(entity_path),
                        sequence=True, makepath=True)


class ConfigChangeReader:
    """Kafka's ZkConfigManager reading ``/config/changes``: each new ``config_change_<seq>`` names an entity
    (``topics/t``, ``users/u``, ``brokers/<default>`` ...) whose configs are to be read again. The first call
    only marks where reading starts: a follower reads every config fresh at start, so older notices are moot."""

    def __init__(self) -> None:
        self.last_seq: int | None = None

    def new_entities(self, store: MetadataStore, children: Iterable[str]) -> list[str]:
        """The entity paths of the notices among ``children`` (the names under /config/changes) newer than the
        last one read, oldest first; a notice gone or unreadable is skipped."""
        prefix = ConfigEntityChangeNotificationSequenceZNode.PREFIX
        seqs = sorted((ConfigEntityChangeNotificationSequenceZNode.sequence_number(n), n) for n in children
                      if n.startswith(prefix))
        if self.last_seq is None:
            self.last_seq = seqs[-1][0] if seqs else -1
            return []
        entities = []
        for seq, name in seqs:
            if seq <= self.last_seq:
                continue
            self.last_seq = seq
            try:
                data, _ = store.get(f"{ConfigEntityChangeNotificationZNode.path()}/{name}")
                entities.append(ConfigEntityChangeNotificationSequenceZNode.decode(data))
            except (NoNodeError, ValueError) as exc:
                log.info("config change notice %s skipped: %s", name, exc)
        return entities


# ---------------------------------------------------------------------------------------------
# notifications written by brokers

def create_isr_change_notification(store: MetadataStore, partitions: Iterable[tuple[str, int]]) -> str:
    return store.create(IsrChangeNotificationSequenceZNode.create_path(),
                        IsrChangeNotificationSequenceZNode.encode(partitions), sequence=True, makepath=True)


def create_log_dir_event_notification(store: MetadataStore, broker_id: int) -> str:
    return store.create(LogDirEventNotificationSequenceZNode.create_path(),
                        LogDirEventNotificationSequenceZNode.encode(broker_id), sequence=True, makepath=True)


def delete_log_dir_event_notifications(store: MetadataStore, names: Iterable[str], *,
                                       controller_epoch_zk_version: int | None = None) -> None:
    """The controller's cleanup of the notices it handled (KafkaZkClient.deleteLogDirEventNotifications): one
    fenced delete each, any version; one already gone is no error. ControllerMovedError when the epoch moved."""
    for name in names:
        path = f"{LogDirEventNotificationZNode.path()}/{name}"
        try:
            fenced_multi(store, [DeleteOp(path)], controller_epoch_zk_version)
        except NoNodeError:
            pass


# ---------------------------------------------------------------------------------------------
# producer ids

def claim_producer_id_block(store: MetadataStore, broker_id: int,
                            block_size: int = ProducerIdBlockZNode.BLOCK_SIZE) -> ProducerIdBlock:
    """Claim the next block of producer ids: read ``/latest_producer_id_block``, write the block
    after it with a conditional set on the version just read, retry if another broker won."""
    path = ProducerIdBlockZNode.path()
    while True:
        try:
            data, stat = store.get(path)
        except NoNodeError:
            _ensure_path(store, path)
            continue
        last = ProducerIdBlockZNode.decode(data)
        start = 0 if last is None else last.block_end + 1
        if start > (1 << 63) - 1 - block_size:
            raise RuntimeError("producer ids are exhausted (the next block would pass 2^63-1)")
        block = ProducerIdBlock(broker_id, start, start + block_size - 1)
        try:
            store.set(path, ProducerIdBlockZNode.encode(block), stat.version)
            return block
        except BadVersionError:
            continue


# ---------------------------------------------------------------------------------------------
# ZooKeeper-era consumer offsets (OffsetCommit/OffsetFetch v0)

def commit_consumer_offset(store: MetadataStore, group: str, topic: str, partition: int, offset: int) -> Stat:
    """OffsetCommit v0: an unconditional write (so mtime and version move on every commit, even
    with the same offset: Burrow watches for that), creating the node and parents if missing."""
    path = ConsumerOffsetZNode.path(group, topic, partition)
    data = ConsumerOffsetZNode.encode(offset)
    try:
        return store.set(path, data)
    except NoNodeError:
        try:
            store.create(path, data, makepath=True)
        except NodeExistsError:
            return store.set(path, data)
        _, stat = store.get(path)
        return stat


def get_consumer_offset(store: MetadataStore, group: str, topic: str, partition: int) -> int | None:
    path = ConsumerOffsetZNode.path(group, topic, partition)
    try:
        data, _ = store.get(path)
    except NoNodeError:
        return None
    return ConsumerOffsetZNode.decode(data, path)
