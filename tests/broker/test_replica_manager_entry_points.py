"""The replica manager's two data-path entry points, driven without the network, as Kafka's KafkaApis calls
ReplicaManager.appendRecords and fetchMessages (core/src/main/scala/kafka/server/ReplicaManager.scala):
real logs, a real topic admin over the embedded store, a real purgatory and real metrics.

``append_records`` owns the acks check, the internal-topic refusal, the produce meters and the acks=all wait;
``fetch_messages`` owns the read, the fetch meters and the delayed fetch."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from kbroker import errors
from kbroker.cluster import LiveBroker
from kbroker.config import load_config
from kbroker.log import LogManager, TopicPartition
from kbroker.metrics import BrokerMetrics
from kbroker.purgatory import Purgatory
from kbroker.replica_manager import ReplicaManager
from kbroker.topic_admin import SingleNodeTopics
from tests.log.helpers import make_batch
from zk_compat import layout
from zk_compat.embedded import EmbeddedServer


class _Parts:
    """A single broker's data path without its network: log manager, replica manager, topic admin, metrics."""

    def __init__(self, tmp_path) -> None:
        self.config = load_config(overrides=[f"log.dirs={tmp_path / 'logs'}", "broker.id=1"])
        self.log_manager = LogManager(self.config.log_dirs, self.config.log)
        self.purgatory = Purgatory()
        self.replicas = ReplicaManager(1, self.config, self.log_manager, self.purgatory)
        self.server = EmbeddedServer.in_log_dir(tmp_path / "store")
        self.store = self.server.connect()
        layout.ensure_persistent_paths(self.store)
        self.topics = SingleNodeTopics(self.config, self.store, self.replicas)
        self.topics.endpoint = LiveBroker(1, "127.0.0.1", 9092, None)  # where it would listen: only named
        self.log_manager.startup()
        self.metrics = BrokerMetrics()

    def close(self) -> None:
        self.purgatory.close()
        self.log_manager.shutdown()
        self.store.close()
        self.server.close()

    def produce(self, topic: str, index: int, records, acks: int = 1, version: int = 8, timeout_ms: int = 1000):
        request_topics = [SimpleNamespace(name=topic, partition_data=[SimpleNamespace(index=index, records=records)])]
        seen: list[tuple[list[list[dict]], bool]] = []

        def respond(answers: list[list[dict]], failed: bool):
            seen.append((answers, failed))
            return {"answers": answers}

        outcome = self.replicas.append_records(request_topics, acks, version, timeout_ms, respond, self.topics,
                                               self.metrics)
        [(answers, failed)] = seen  # the answer is shaped exactly once, by the handler's callback
        return outcome, answers[0][0], failed


@pytest.fixture
def parts(tmp_path):
    p = _Parts(tmp_path)
    yield p
    p.close()


def test_append_records_writes_meters_and_answers_through_the_callback(parts):
    async def main():
        parts.topics.create_now("orders", 2, 1)
        outcome, out, failed = parts.produce("orders", 1, memoryview(make_batch(3)))
        assert not failed and out["error_code"] == 0 and out["base_offset"] == 0
        assert outcome == {"answers": [[out]]}
        outcome, out, _ = parts.produce("orders", 1, memoryview(make_batch(2)))
        assert out["base_offset"] == 3 and out["log_start_offset"] == 0
        assert parts.replicas.leader(TopicPartition("orders", 1)).log.log_end_offset == 5
        assert parts.metrics.produce_requests["orders"] == 2 and parts.metrics.messages_in["orders"] == 5

    asyncio.run(main())


def test_append_records_refuses_bad_acks_and_internal_topics_before_the_log(parts):
    async def main():
        parts.topics.create_now("orders", 1, 1)
        _, out, failed = parts.produce("orders", 0, memoryview(make_batch(1)), acks=2)
        assert failed and out["error_code"] == errors.InvalidRequiredAcksError.code
        assert out["error_message"] == "acks must be -1, 0 or 1, not 2"
        parts.topics.create_now("__consumer_offsets", 1, 1)
        _, out, failed = parts.produce("__consumer_offsets", 0, memoryview(make_batch(1)))
        assert failed and out["error_code"] == errors.InvalidTopicError.code
        for tp in (TopicPartition("orders", 0), TopicPartition("__consumer_offsets", 0)):
            assert parts.replicas.leader(tp).log.log_end_offset == 0  # nothing written
        # Kafka counts the internal topic's refusal as a request, not as a failure (and bad acks as neither)
        assert parts.metrics.produce_requests.get("orders", 0) == 0
        assert parts.metrics.produce_requests["__consumer_offsets"] == 1
        assert parts.metrics.failed_produce_requests.get("__consumer_offsets", 0) == 0

    asyncio.run(main())


def test_append_records_with_acks_all_waits_for_the_isr_in_the_purgatory(parts):
    async def main():
        parts.topics.create_now("orders", 1, 1)
        partition = parts.replicas.leader(TopicPartition("orders", 0))
        partition.become_leader(partition.leader_epoch + 1, [1, 2], [1, 2], zk_version=1, controller_epoch=1)
        outcome, out, failed = parts.produce("orders", 0, memoryview(make_batch(4)), acks=-1)
        assert not failed and isinstance(outcome, asyncio.Future) and not outcome.done()
        parts.replicas.record_follower_fetch(2, [(partition.tp, 4, partition.leader_epoch)])
        assert outcome.done() and outcome.result() == {"answers": [[out]]} and out["error_code"] == 0

        outcome, out, _ = parts.produce("orders", 0, memoryview(make_batch(1)), acks=-1, timeout_ms=20)
        assert (await asyncio.wait_for(outcome, 5))["answers"][0][0] is out
        assert out["error_code"] == errors.RequestTimedOutError.code and out["base_offset"] == -1

    asyncio.run(main())
