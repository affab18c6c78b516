"""The controller's ZooKeeper writes come in batches, as Kafka's (``createTopicPartitionStatesRaw``,
``updateLeaderAndIsr``: pipelined asynchronous requests): a broker's death moves all its leaderships and ISRs in
one pipelined round, a new topic's states are one multi, and deleted topics' znodes go in one pipelined
round, whatever the number of partitions."""
from __future__ import annotations

from kbroker.controller.controller import Controller
from kbroker.metadata.zk_view import LiveBroker, Snapshot
from tests.store_contract.backends import CountingStore
from zk_compat import layout
from zk_compat.store import MetadataStore

PARTITIONS = 300


def view(store: MetadataStore, brokers: list[int]) -> Snapshot:
    snap = Snapshot(controller_id=1)
    snap.brokers = {b: LiveBroker(b, "127.0.0.1", 9092 + b, None, epoch=b) for b in brokers}
    for topic in layout.get_all_topics(store):
        snap.assignments[topic] = {p: list(r) for p, r in layout.get_topic_assignment(store, topic).partitions.items()}
        for p in snap.assignments[topic]:
            found = layout.get_partition_state(store, topic, p)
            if found is not None:
                snap.states[(topic, p)], stat = found
                snap.state_versions[(topic, p)] = stat.version
    return snap


def test_new_topics_states_and_a_dead_brokers_partitions_in_a_few_round_trips(store: MetadataStore) -> None:
    # broker 3 leads a third of the partitions and follows in the rest
    for t in range(PARTITIONS // 4):
        layout.create_topic(store, f"t{t}", {p: [(t * 4 + p) % 3 + 1, (t * 4 + p + 1) % 3 + 1,
                                                 (t * 4 + p + 2) % 3 + 1] for p in range(4)})
    counting = CountingStore(store)
    ctl = Controller(counting, 1)  # type: ignore[arg-type]
    ctl.on_snapshot(Snapshot(controller_id=None))
    assert ctl.active
    counting.calls.clear()
    ctl.on_snapshot(view(store, [1, 2, 3]))
    # one multi per topic, all in one pipelined round after one pipelined read of their partitions nodes
    assert counting.calls == {"get_many": 1, "multi_pipelined": 1}, counting.calls
    states = view(store, [1, 2, 3]).states
    assert len(states) == PARTITIONS and all(s.isr and s.leader == s.isr[0] for s in states.values())

    counting.calls.clear()
    assert ctl.controlled_shutdown(2, view(store, [1, 2, 3])) == []  # broker 2 leaves: its leaderships move
    assert counting.calls.get("multi_pipelined", 0) == 1 and sum(counting.calls.values()) <= 2, counting.calls
    moved = view(store, [1, 2, 3]).states
    assert all(s.leader != 2 and 2 not in s.isr and s.leader_epoch == 1 for s in moved.values())
    assert all(moved[tp].leader == states[tp].isr[1] for tp, s in states.items() if s.leader == 2)
    ctl.shutting_down.clear()
    layout.set_partition_states(store, [(t, p, s, 1) for (t, p), s in states.items()],
                                controller_epoch_zk_version=ctl.epoch_zk_version)  # broker 2 back, as it was
    counting.calls.clear()
    ctl.on_snapshot(view(store, [1, 2]))  # broker 3 died
    assert counting.calls.get("multi_pipelined", 0) <= 2, counting.calls  # elections, then ISR shrinks
    assert sum(counting.calls.values()) <= 6, counting.calls
    after = view(store, [1, 2]).states
    assert all(s.leader in (1, 2) and 3 not in s.isr for s in after.values())
    led_by_3 = [tp for tp, s in states.items() if s.leader == 3]
    assert len(led_by_3) == PARTITIONS // 3
    assert all(after[tp].leader == states[tp].isr[1] for tp in led_by_3)  # the next replica in the ISR

    for topic in layout.get_all_topics(store):
        layout.mark_topic_for_deletion(store, topic)
    doomed = view(store, [1, 2])
    doomed.deleting = layout.get_topics_marked_for_deletion(store)
    counting.calls.clear()
    ctl.on_snapshot(doomed)
    assert counting.calls.get("multi_pipelined", 0) == 1, counting.calls  # every topic's multi at once
    assert layout.get_all_topics(store) == [] and layout.get_topics_marked_for_deletion(store) == []
