"""What the controller told this broker about the cluster (Kafka's MetadataCache), from the
UpdateMetadata requests it sent: every partition's leader, leader epoch, ISR and replicas. In ZooKeeper mode Metadata
answers from here only (a topic the controller has not announced yet is not there), and FindCoordinator
reads leaders here. Admin requests that wait for their change to be visible (CreateTopics,
CreatePartitions, DeleteTopics) are told of every update through ``listeners``."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kbroker.protocol import message_types as msg
from zk_compat.znodes import PartitionState


@dataclass
class CachedPartition:
    state: PartitionState
    replicas: list[int]
    offline_replicas: list[int]


@dataclass
class MetadataCache:
    controller_id: int = -1
    controller_epoch: int = -1
    partitions: dict[tuple[str, int], CachedPartition] = field(default_factory=dict)
    topics: dict[str, dict[int, CachedPartition]] = field(default_factory=dict)  # the same, by topic
    live_broker_ids: frozenset[int] = frozenset()
    listeners: list[Callable[[], None]] = field(default_factory=list)

    def update(self, request: msg.UpdateMetadataRequest) -> None:
        """Apply an UpdateMetadata request, as Kafka's ZooKeeper-mode MetadataCache does: the live brokers are
        replaced, the partitions it names are added or replaced, LeaderDuringDelete (-2) removes one, and the
        others stay (the controller sends what changed). A new controller's first request holds everything, so
        a request of another controller epoch starts the cache over."""
        if request.controller_epoch != self.controller_epoch:
            self.partitions, self.topics = {}, {}
        self.controller_id = request.controller_id
        self.controller_epoch = request.controller_epoch
        partitions, topics = self.partitions, self.topics
        for topic in request.topic_states:
            for p in topic.partition_states:
                key = (topic.topic_name, p.partition_index)
                if p.leader == -2:  # Kafka's LeaderDuringDelete: a topic being deleted is no longer served
                    partitions.pop(key, None)
                    known = topics.get(topic.topic_name)
                    if known is not None:
                        known.pop(p.partition_index, None)
                        if not known:
                            del topics[topic.topic_name]
                    continue
                cached = CachedPartition(
                    PartitionState(leader=p.leader, leader_epoch=p.leader_epoch, isr=list(p.isr),
                                   controller_epoch=p.controller_epoch),
                    list(p.replicas), list(p.offline_replicas))
                partitions[key] = cached
                topics.setdefault(topic.topic_name, {})[p.partition_index] = cached
        self.live_broker_ids = frozenset(b.id for b in request.live_brokers)
        for listener in list(self.listeners):
            listener()

    def state(self, topic: str, index: int) -> PartitionState | None:
        found = self.partitions.get((topic, index))
        return None if found is None else found.state

    def shows(self, topic: str, partitions: int | None) -> bool:
        """Does the cache show ``topic`` with partitions 0..partitions-1 all led (Kafka's DelayedCreatePartitions
        condition), or, with ``partitions`` None, not at all (DelayedDeleteTopics)?"""
        known = self.topics.get(topic)
        if partitions is None:
            return not known
        return known is not None and all(
            p in known and known[p].state.leader >= 0 for p in range(partitions))
