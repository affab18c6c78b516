"""What the controller last told this broker about the cluster (Kafka's MetadataCache), from
UpdateMetadata: every partition's leader, leader epoch, ISR and replicas. Metadata responses and
FindCoordinator read leaders here in ZooKeeper mode."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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
    live_broker_ids: frozenset[int] = frozenset()

    def update(self, request: Any) -> None:  # an UpdateMetadataRequest (a generated protocol class)
        """Replace the cache with an UpdateMetadata request's picture (the controller sends it whole)."""
        self.controller_id = request.controller_id
        self.controller_epoch = request.controller_epoch
        partitions = {}
        for topic in request.topic_states:
            for p in topic.partition_states:
                partitions[(topic.topic_name, p.partition_index)] = CachedPartition(
                    PartitionState(leader=p.leader, leader_epoch=p.leader_epoch, isr=list(p.isr),
                                   controller_epoch=p.controller_epoch),
                    list(p.replicas), list(p.offline_replicas))
        self.partitions = partitions
        self.live_broker_ids = frozenset(b.id for b in request.live_brokers)

    def state(self, topic: str, index: int) -> PartitionState | None:
        found = self.partitions.get((topic, index))
        return None if found is None else found.state
