"""The ZooKeeper view reads again only what changed (kbroker.metadata.zk_view): a new topic, or one partition's new
state, costs the same few reads on a cluster of 300 topics as on a cluster of 10, and the view it builds equals a
full read of the store."""
from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kbroker.metadata.zk_view import ClusterView, Snapshot
from tests.store_contract.backends import CountingStore
from zk_compat import layout
from zk_compat.embedded import EmbeddedServer
from zk_compat.store import MetadataStore
from zk_compat.znodes import PartitionState, TopicAssignment


def add_topic(store: MetadataStore, name: str) -> None:
    layout.create_topic(store, name, {p: [1] for p in range(4)})
    for p in range(4):
        layout.create_partition_state(store, name, p, PartitionState(1, 0, [1], 1))


async def reads_for_one_change(topics: int) -> tuple[int, int, Snapshot, Snapshot]:
    """(reads of a new topic, reads of one partition's new state, the view after both, a full read's view)."""
    server = EmbeddedServer()
    store = server.connect()
    for i in range(topics):
        add_topic(store, f"t{i}")
    counting = CountingStore(store)
    seen: list[Snapshot] = []
    view = ClusterView(counting, asyncio.get_running_loop(), seen.append)  # type: ignore[arg-type]
    await view.start()

    async def settled(check: Any) -> int:
        before = counting.reads()
        for _ in range(500):
            if seen and check(seen[-1]):
                await asyncio.sleep(0.05)  # any refresh still running ends
                return counting.reads() - before
            await asyncio.sleep(0.01)
        raise AssertionError("the view never showed the change")

    add_topic(store, "new")
    topic_reads = await settled(lambda s: ("new", 3) in s.states)
    layout.set_partition_state(store, "t0", 2, PartitionState(1, 1, [1], 1), 0)
    state_reads = await settled(lambda s: s.states[("t0", 2)].leader_epoch == 1)
    fresh = ClusterView(store, asyncio.get_running_loop(), lambda s: None)
    await fresh.start()
    view.stop()
    fresh.stop()
    store.close()
    server.close()
    return topic_reads, state_reads, seen[-1], fresh.snapshot


@pytest.mark.parametrize("topics", [10, 300])
def test_a_change_costs_reads_independent_of_the_cluster_size(topics: int) -> None:
    topic_reads, state_reads, view, full = asyncio.run(reads_for_one_change(topics))
    # the small nodes, the topic listing, the new topic and its 4 states: no read per existing topic
    assert topic_reads <= 25, topic_reads
    assert state_reads <= 20, state_reads
    assert view == full


def test_a_topics_states_appear_together_though_their_watch_events_come_one_by_one() -> None:
    """The controller creates a new topic's states in one multi; a refresh that runs when only some of their
    creation events have arrived must still show all of them (CI: an auto-created topic was announced with 3 of
    its 4 partitions)."""
    async def main() -> Snapshot:
        server = EmbeddedServer()
        store = server.connect()
        layout.create_topic(store, "new", {p: [1] for p in range(4)})
        view = ClusterView(store, asyncio.get_running_loop(), lambda s: None)
        view.snapshot = await view.loop.run_in_executor(None, view._read)  # the states are missing: watched
        assert not view.snapshot.states
        layout.create_topics_partition_states(store, {"new": {p: PartitionState(1, 0, [1], 1) for p in range(4)}})
        with view._changed_lock:  # the refresh runs when three of the four events have come
            view._changed = {f"/brokers/topics/new/partitions/{p}/state" for p in range(3)}
        snap = await view.loop.run_in_executor(None, view._read)
        view.stop()
        store.close()
        server.close()
        return snap

    snap = asyncio.run(main())
    assert sorted(snap.states) == [("new", p) for p in range(4)]


def test_a_topics_assignment_is_handed_out_once_per_change_of_its_node() -> None:
    """A refresh copies no assignment that did not change (thousands of topics at every refresh): snapshots share
    a topic's dict until its node changes, and then carry the new one."""
    async def main() -> tuple[Snapshot, Snapshot, Snapshot]:
        server = EmbeddedServer()
        store = server.connect()
        add_topic(store, "a")
        add_topic(store, "b")
        view = ClusterView(store, asyncio.get_running_loop(), lambda s: None)
        first = await view.loop.run_in_executor(None, view._read)
        add_topic(store, "c")
        with view._changed_lock:
            view._changed = {"/brokers/topics"}
        second = await view.loop.run_in_executor(None, view._read)
        layout.set_topic_assignment(store, "a", TopicAssignment({p: [1, 2] for p in range(4)}))
        with view._changed_lock:
            view._changed = {"/brokers/topics/a"}
        third = await view.loop.run_in_executor(None, view._read)
        view.stop()
        store.close()
        server.close()
        return first, second, third

    first, second, third = asyncio.run(main())
    assert second.assignments["a"] is first.assignments["a"] and second.assignments["b"] is first.assignments["b"]
    assert third.assignments["b"] is first.assignments["b"]
    assert third.assignments["a"] is not first.assignments["a"]
    assert third.assignments["a"] == {p: [1, 2] for p in range(4)}
    assert first.assignments["a"] == {p: [1] for p in range(4)}
    assert sorted(second.assignments) == ["a", "b", "c"]
