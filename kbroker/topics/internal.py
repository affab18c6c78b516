"""Kafka's two internal topics, in one place: their names, how they are created, and reading their
batches back when a coordinator loads a partition.

``__consumer_offsets`` holds the group coordinator's state, ``__transaction_state`` the transaction
coordinator's. Both are compacted; their partition count fixes which partition a group or
transactional id hashes to, so it is read from the topic once it exists. On a single broker they are
created at start; in ZooKeeper mode on the first FindCoordinator, and only once enough brokers live
for their replication factor (Kafka's rule).
"""
from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Container, Iterator

from kbroker import errors
from kbroker.config.broker import BrokerConfig
from kbroker.log import batch_format as records
from kbroker.log.names import INTERNAL_TOPICS, OFFSETS_TOPIC, TRANSACTION_TOPIC
from kbroker.replication.partition import Partition

log = logging.getLogger(__name__)

__all__ = ["INTERNAL_TOPICS", "OFFSETS_TOPIC", "TRANSACTION_TOPIC"]  # named in the log layer (kbroker.log.names)

# Kafka logs the refusal below on every FindCoordinator; once a minute per topic says as much.
SHORT_OF_BROKERS_LOG_INTERVAL_S = 60.0
_short_of_brokers_logged: dict[str, float] = {}


def offsets_topic_configs(config: BrokerConfig) -> dict[str, str]:
    return {"cleanup.policy": "compact", "segment.bytes": str(config.offsets_topic_segment_bytes),
            "compression.type": "producer"}


def transaction_topic_configs(config: BrokerConfig, replication_factor: int) -> dict[str, str]:
    return {"cleanup.policy": "compact", "compression.type": "uncompressed",
            "segment.bytes": str(config.transaction_state_log_segment_bytes),
            "min.insync.replicas": str(min(config.transaction_state_log_min_isr, replication_factor))}


async def ensure_internal_topic(existing: Container[str], live_brokers: int, name: str, factor: int,
                                factor_key: str, create: Callable[[int], Awaitable[None]]) -> None:
    """Create an internal topic with ``create(factor)`` unless it exists; refuse with
    COORDINATOR_NOT_AVAILABLE while fewer brokers live than its replication factor."""
    if name in existing:
        return
    if live_brokers < factor:
        _log_short_of_brokers(name, live_brokers, factor, factor_key)
        raise errors.CoordinatorNotAvailableError(
            f"{live_brokers} live broker(s) do not meet {factor_key}={factor} for {name}")
    try:
        await create(factor)
    except errors.TopicAlreadyExistsError:
        pass  # another broker created it meanwhile


def _log_short_of_brokers(name: str, live_brokers: int, factor: int, factor_key: str) -> None:
    """The client only sees COORDINATOR_NOT_AVAILABLE and retries for ever (librdkafka logs it at debug):
    the broker's log is where an operator learns why no consumer group forms."""
    now = time.monotonic()
    if now - _short_of_brokers_logged.get(name, -SHORT_OF_BROKERS_LOG_INTERVAL_S) < SHORT_OF_BROKERS_LOG_INTERVAL_S:
        return
    _short_of_brokers_logged[name] = now
    log.warning("%d live broker(s) do not meet the required replication factor %d for %s (configured via '%s'): "
                "it is not created and its coordinator is not available. This can be ignored while the cluster is "
                "starting; a cluster with fewer brokers needs %s set no higher than its broker count.",
                live_brokers, factor, name, factor_key, factor_key)


def stored_batches(partition: Partition | None) -> Iterator[memoryview]:
    """Every whole batch of a partition this broker leads, for loading a coordinator's state."""
    if partition is None:
        return
    plog = partition.log
    offset = plog.log_start_offset
    while offset < plog.log_end_offset:
        chunk = plog.read_bytes(offset, 1 << 20)
        headers, _, _ = records.scan_batches(chunk, verify_crc=True)
        if not headers:
            log.warning("%s: unreadable batch at offset %d; stopping the load there", partition.tp, offset)
            return
        view = memoryview(chunk)
        for h in headers:
            yield view[h.position:h.position + h.size]
        offset = headers[-1].last_offset + 1
