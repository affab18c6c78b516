"""``/brokers/ids/<id>`` registration, broker id generation (``/brokers/seqid``) and the cluster id (``/cluster/id``).
"""
from __future__ import annotations

import logging
import random

from zk_compat.layout.znode_helpers import ensure_path, new_base64_uuid
from zk_compat.store import (
    ANY_VERSION,
    BadVersionError,
    CreateOp,
    MetadataStore,
    NodeExistsError,
    NoNodeError,
    SetDataOp,
    Stat,
)
from zk_compat.znodes import (
    BrokerIdsZNode,
    BrokerIdZNode,
    BrokerInfo,
    BrokerSequenceIdZNode,
    ClusterIdZNode,
)

log = logging.getLogger(__name__)

RESERVED_BROKER_MAX_ID = 1000  # reserved.broker.max.id default


class BrokerIdInUseError(NodeExistsError):
    """Another live broker (another session) has registered this broker id."""


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
        ensure_path(store, path)
        stat = store.set(path, BrokerSequenceIdZNode.encode(), ANY_VERSION)
    return stat.version + reserved_broker_max_id


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
