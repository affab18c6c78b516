"""The controller election: ``/controller`` and ``/controller_epoch`` (Kafka's
registerControllerAndIncrementControllerEpoch), resignation, and ``/feature`` as a 2.8 controller leaves it.
"""
from __future__ import annotations

import logging

from zk_compat.clock import wall_ms
from zk_compat.layout.fencing import ControllerMovedError, fenced_multi
from zk_compat.store import (
    BadVersionError,
    CreateOp,
    DeleteOp,
    MetadataStore,
    NodeExistsError,
    NoNodeError,
    SetDataOp,
    Stat,
)
from zk_compat.znodes import (
    ControllerEpochZNode,
    ControllerZNode,
    FeatureZNode,
    FeatureZNodeData,
)

log = logging.getLogger(__name__)

INITIAL_CONTROLLER_EPOCH = 0


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
