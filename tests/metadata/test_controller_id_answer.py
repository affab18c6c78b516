"""Which controller a ZooKeeper-mode broker's Metadata names. Found by tests/chaos/test_disk_full_halts.py
(1 run in 6): right after a start, the controller's first UpdateMetadata reached the broker before its
ZooKeeper view had read /controller, Metadata answered controller -1, and librdkafka's admin client then
waited for a controller until its timeout (it does not ask again until its next metadata refresh).
Kafka answers from what UpdateMetadata announced; the view's answer still comes first when it has one."""
from __future__ import annotations

from types import SimpleNamespace

from kbroker.metadata.cache import MetadataCache
from kbroker.topics.zookeeper import ZooKeeperTopics


def _topics(view_controller: int | None, announced: int) -> ZooKeeperTopics:
    topics = ZooKeeperTopics.__new__(ZooKeeperTopics)  # only the two sources controller_id reads
    topics.cluster = SimpleNamespace(snapshot=SimpleNamespace(controller_id=view_controller))
    topics.metadata = MetadataCache()
    topics.metadata.controller_id = announced
    return topics


def test_the_announced_controller_answers_while_the_view_has_none():
    assert _topics(None, 1).controller_id() == 1


def test_no_controller_anywhere_is_minus_one():
    assert _topics(None, -1).controller_id() == -1


def test_the_view_answers_when_it_knows():
    assert _topics(2, 1).controller_id() == 2
    assert _topics(2, -1).controller_id() == 2
