"""The topic table's entries: a topic as this broker knows it (``TopicInfo``) and one partition as Metadata
answers it (``PartitionView``), with Kafka's topic id as ZooKeeper stores it."""
from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass, field

from kbroker.topics.internal import INTERNAL_TOPICS


@dataclass
class TopicInfo:
    name: str
    assignment: dict[int, list[int]]
    configs: dict[str, str] = field(default_factory=dict)
    topic_id: uuid.UUID = uuid.UUID(int=0)  # Kafka's topic id (stored base64url in /brokers/topics/<t>)

    @property
    def internal(self) -> bool:
        return self.name in INTERNAL_TOPICS


@dataclass(frozen=True)
class PartitionView:
    """One partition as Metadata answers it (before the per-listener and per-version filtering)."""
    index: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline_replicas: list[int]


def topic_uuid(text: str | None) -> uuid.UUID:
    """Kafka stores topic ids as 22-character base64url strings; the wire carries 16 bytes."""
    if not text:
        return uuid.UUID(int=0)
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))
