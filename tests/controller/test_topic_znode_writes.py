"""Rewrites of /brokers/topics/<t> are compare-and-set on the version read: CreatePartitions keeps a move in
progress (its adding/removing replicas), and a controller step working from an old read writes nothing."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from kbroker import errors
from kbroker.controller.reassignment import _write_assignment
from kbroker.topics.table import TopicInfo
from kbroker.topics.znodes import write_new_partitions
from zk_compat import layout
from zk_compat.embedded import EmbeddedServer


@pytest.fixture
def store():
    server = EmbeddedServer(None, fsync=False)
    yield server.connect()
    server.close()


def _moving_topic(store) -> TopicInfo:
    layout.create_topic(store, "t", {0: [1, 2], 1: [2, 3]})
    current, version = layout.get_topic_assignment_with_version(store, "t")
    current.partitions[0] = [3, 1, 2]  # 0 moves from [1, 2] to [3, 1]: 3 being added, 2 being removed
    current.adding_replicas[0] = [3]
    current.removing_replicas[0] = [2]
    layout.set_topic_assignment(store, "t", current, version)
    return TopicInfo("t", {0: [3, 1, 2], 1: [2, 3]}, {})


def test_create_partitions_keeps_a_move_in_progress(store):
    info = _moving_topic(store)
    write_new_partitions(store, "t", len(info.assignment), {2: [1, 3]})
    after = layout.get_topic_assignment(store, "t")
    assert after.partitions == {0: [3, 1, 2], 1: [2, 3], 2: [1, 3]}
    assert (after.adding_replicas, after.removing_replicas) == ({0: [3]}, {0: [2]})


def test_create_partitions_refuses_when_the_topic_grew_meanwhile(store):
    info = _moving_topic(store)
    write_new_partitions(store, "t", len(info.assignment), {2: [1, 3]})  # another broker's
    with pytest.raises(errors.InvalidPartitionsError):
        write_new_partitions(store, "t", len(info.assignment), {2: [2, 1]})
    assert layout.get_topic_assignment(store, "t").partitions[2] == [1, 3]


def test_a_controller_step_from_an_old_read_writes_nothing(store):
    _moving_topic(store)
    stale, version = layout.get_topic_assignment_with_version(store, "t")
    write_new_partitions(store, "t", len(stale.partitions), {2: [1, 3]})
    stale.partitions[0] = [3, 1]  # completing the move from what it read before the new partition
    stale.adding_replicas.pop(0)
    stale.removing_replicas.pop(0)
    ctl = SimpleNamespace(store=store, epoch_zk_version=None, broker_id=1)
    assert _write_assignment(ctl, "t", stale, version) is False
    assert layout.get_topic_assignment(store, "t").partitions == {0: [3, 1, 2], 1: [2, 3], 2: [1, 3]}
    fresh, version = layout.get_topic_assignment_with_version(store, "t")
    fresh.partitions[0] = [3, 1]
    fresh.adding_replicas.pop(0)
    fresh.removing_replicas.pop(0)
    assert _write_assignment(ctl, "t", fresh, version) is True
    assert layout.get_topic_assignment(store, "t").partitions == {0: [3, 1], 1: [2, 3], 2: [1, 3]}
