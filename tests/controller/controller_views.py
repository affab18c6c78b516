"""The controller unit tests' common ground: one topic "t" laid out as partition -> (replicas, leader, isr) on the
embedded store, a controller that won /controller with those partition states, and a view of the cluster that
carries them as the ZooKeeper view would."""
from __future__ import annotations

from kbroker.controller.controller import Controller
from kbroker.metadata.zk_view import Snapshot
from zk_compat import layout
from zk_compat.store import MetadataStore
from zk_compat.znodes import PartitionState

Layout = dict[int, tuple[list[int], int, list[int]]]


def active_controller(store: MetadataStore, partitions: Layout) -> Controller:
    """Broker 1 as the active controller of topic "t" with ``partitions``' states written."""
    layout.create_topic(store, "t", {p: replicas for p, (replicas, _, _) in partitions.items()})
    ctl = Controller(store, 1)
    ctl.on_snapshot(Snapshot(controller_id=None))  # wins /controller
    assert ctl.active
    for p, (_, leader, isr) in partitions.items():
        layout.create_partition_state(store, "t", p, PartitionState(leader, 0, isr, ctl.epoch))
    return ctl


def with_topic_states(store: MetadataStore, snap: Snapshot, partitions: Layout) -> Snapshot:
    """``snap`` with topic "t"'s assignment and its partition states (and their versions) as the store holds them."""
    snap.assignments = {"t": {p: replicas for p, (replicas, _, _) in partitions.items()}}
    for p in partitions:
        found = layout.get_partition_state(store, "t", p)
        assert found is not None
        snap.states[("t", p)], stat = found
        snap.state_versions[("t", p)] = stat.version
    return snap
