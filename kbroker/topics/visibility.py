"""What an admin answer waits for before it is sent, as Kafka's DelayedCreatePartitions / DelayedDeleteTopics:
the change shows in this broker's Metadata (a delayed operation in the purgatory, checked at every
UpdateMetadata) and in every other live broker's (asked with Metadata requests), or the request's timeout."""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from kbroker import errors
from kbroker.clock import monotonic_ms
from kbroker.interbroker.client import BrokerConnection
from kbroker.metadata.zk_view import LiveBroker
from kbroker.replication.purgatory import DelayedOperation

log = logging.getLogger(__name__)

# A change an admin answer waits for: topic -> partitions 0..n-1 all led, or None for "no longer there".
Visible = dict[str, int | None]


class DelayedTopicChange(DelayedOperation[bool]):
    """Kafka's DelayedCreatePartitions / DelayedDeleteTopics on this broker's MetadataCache: completes when
    ``shown()`` holds, or at the timeout with its value then."""

    def __init__(self, shown: Callable[[], bool]) -> None:
        super().__init__()
        self.shown = shown

    def ready(self) -> bool:
        return self.shown()

    def result(self) -> bool:
        return self.shown()


def answer_shows(answer: Any, partitions: int | None) -> bool:
    """A Metadata answer for a topic shows it gone, or with partitions 0..partitions-1 all led."""
    if answer is None:
        return False
    if answer.error_code == errors.TopicAuthorizationFailedError.code:
        return True  # this broker may not see it there: nothing to wait for
    if partitions is None:
        return bool(answer.error_code == errors.UnknownTopicOrPartitionError.code)
    led = {p.partition_index for p in answer.partitions if p.leader_id >= 0}
    return answer.error_code == 0 and all(p in led for p in range(partitions))


async def peer_shows(broker_id: int, peer: LiveBroker, changes: Visible, deadline: int, poll_s: float) -> set[str]:
    """Ask ``peer`` for the topics' Metadata until it shows every change; the topics it still does not
    show at the deadline. A peer that cannot be asked (gone, refusing) is not waited for."""
    connection = BrokerConnection(peer.host, peer.port, f"broker-{broker_id}-admin-wait",
                                  max(deadline - monotonic_ms(), 1) / 1000)
    body = {"topics": [{"name": t} for t in changes], "allow_auto_topic_creation": False}
    missing = set(changes)
    try:
        while True:
            try:
                response = await connection.request(3, 4, body)
            except OSError as exc:
                log.info("broker %d not asked whether it shows %s: %s", peer.id, sorted(changes), exc)
                return set()
            answers = {t.name: t for t in response.topics}
            missing = {t for t, n in changes.items() if not answer_shows(answers.get(t), n)}
            if not missing or monotonic_ms() >= deadline:
                return missing
            await asyncio.sleep(poll_s)
    finally:
        connection.close()
