"""The replica manager's two data-path entry points, driven without the network, as Kafka's KafkaApis calls
ReplicaManager.appendRecords and fetchMessages (core/src/main/scala/kafka/server/ReplicaManager.scala):
real logs, a real topic admin over the embedded store, a real purgatory and real metrics.

``append_records`` owns the acks check, the internal-topic refusal, the produce meters and the acks=all wait;
``fetch_messages`` owns the read (given FetchParams: no wire version, session or client quota reaches it), the
fetch-request meters and the delayed fetch; both answer through the handler's ``respond``."""
from __future__ import annotations

import asyncio

import pytest

from kbroker import errors
from kbroker.config.broker import load_config
from kbroker.log import LogManager, TopicPartition
from kbroker.metadata.zk_view import LiveBroker
from kbroker.metrics import BrokerMetrics
from kbroker.replicas.replica_manager import ReplicaManager
from kbroker.replication.fetch_read import FetchParams
from kbroker.replication.purgatory import Purgatory
from kbroker.topics.single_node import SingleNodeTopics
from tests.log.helpers import make_batch
from zk_compat import layout
from zk_compat.embedded import EmbeddedServer


class _Parts:
    """A single broker's data path without its network: log manager, replica manager, topic admin, metrics."""

    def __init__(self, tmp_path) -> None:
        self.config = load_config(overrides=[f"log.dirs={tmp_path / 'logs'}", "broker.id=1"])
        self.log_manager = LogManager(self.config.log_dirs, self.config.log)
        self.purgatory = Purgatory()
        self.metrics = BrokerMetrics()
        self.replicas = ReplicaManager(1, self.config, self.log_manager, self.purgatory, metrics=self.metrics)
        self.server = EmbeddedServer.in_log_dir(tmp_path / "store")
        self.store = self.server.connect()
        layout.ensure_persistent_paths(self.store)
        # where it would listen: only named
        self.topics = SingleNodeTopics(self.config, self.store, self.replicas,
                                       lambda: LiveBroker(1, "127.0.0.1", 9092, None))
        self.log_manager.startup()

    def close(self) -> None:
        self.purgatory.close()
        self.log_manager.shutdown()
        self.store.close()
        self.server.close()

    def produce(self, topic: str, index: int, records, acks: int = 1, timeout_ms: int = 1000):
        seen: list[tuple[list[dict], bool]] = []

        def respond(answers: list[dict], failed: bool):
            seen.append((answers, failed))
            return {"answers": answers}

        outcome = self.replicas.append_records([(topic, index, records)], acks, timeout_ms, respond)
        [(answers, failed)] = seen  # the answer is shaped exactly once, by the handler's callback
        return outcome, answers[0], failed


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
        assert outcome == {"answers": [out]}
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
        assert outcome.done() and outcome.result() == {"answers": [out]} and out["error_code"] == 0

        outcome, out, _ = parts.produce("orders", 0, memoryview(make_batch(1)), acks=-1, timeout_ms=20)
        assert (await asyncio.wait_for(outcome, 5))["answers"][0] is out
        assert out["error_code"] == errors.RequestTimedOutError.code and out["base_offset"] == -1

    asyncio.run(main())


def _fetch(parts: _Parts, wanted, max_wait_ms: int = 0, denied=(), max_bytes: int = 1 << 20):
    params = FetchParams(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=max_bytes, isolation_level=0,
                         min_one_message=True)
    return parts.replicas.fetch_messages(params, wanted, list(denied), dict)


def test_fetch_messages_reads_meters_and_refuses_what_the_handler_denied(parts):
    async def main():
        parts.topics.create_now("orders", 1, 1)
        parts.produce("orders", 0, memoryview(make_batch(3)))
        got = _fetch(parts, [("orders", 0, 0, 1 << 20, -1), ("missing", 0, 0, 1 << 20, -1)],
                     denied=[("secret", 0)])
        assert got["orders"]["error_code"] == 0 and got["orders"]["high_watermark"] == 3
        assert got["orders"]["records"].length > 0
        assert got["missing"]["error_code"] == errors.UnknownTopicOrPartitionError.code
        assert got["secret"]["error_code"] == errors.TopicAuthorizationFailedError.code
        # the meters: one fetch request for the partition the metadata knows; an unknown partition is not a
        # failed fetch (Kafka does not count UNKNOWN_TOPIC_OR_PARTITION there)
        assert parts.metrics.fetch_requests == {"orders": 1}
        assert "missing" not in parts.metrics.failed_fetch_requests

    asyncio.run(main())


def test_fetch_messages_waits_in_the_purgatory_until_an_append(parts):
    async def main():
        parts.topics.create_now("orders", 1, 1)
        waiting = _fetch(parts, [("orders", 0, 0, 1 << 20, -1)], max_wait_ms=10_000)
        assert isinstance(waiting, asyncio.Future) and not waiting.done()
        parts.produce("orders", 0, memoryview(make_batch(2)))
        assert waiting.done(), "the append must complete the delayed fetch"
        out = waiting.result()["orders"]
        assert out["high_watermark"] == 2 and out["records"].length > 0

        expiring = _fetch(parts, [("orders", 0, 2, 1 << 20, -1)], max_wait_ms=20)
        out = (await asyncio.wait_for(expiring, 5))["orders"]
        assert out["error_code"] == 0 and out["records"] == b""

    asyncio.run(main())


def test_fetch_messages_reads_within_the_answer_limit_but_one_batch_at_least(parts):
    """The handler hands a consumer's quota window over as the answer's byte limit: the read stays within it,
    except for the first batch (KIP-74)."""
    async def main():
        parts.topics.create_now("orders", 1, 1)
        for _ in range(3):
            parts.produce("orders", 0, memoryview(make_batch(5)))
        one = _fetch(parts, [("orders", 0, 0, 1 << 20, -1)], max_bytes=0)["orders"]
        whole = _fetch(parts, [("orders", 0, 0, 1 << 20, -1)])["orders"]
        assert 0 < one["records"].length and 3 * one["records"].length == whole["records"].length

    asyncio.run(main())


def test_append_records_decides_what_acks_0_gets(parts):
    """acks=0: no answer is shaped; nothing is sent, or the connection closes when a partition failed (Kafka's
    KafkaApis closes it so the client refreshes its metadata) or the handler refused a topic already."""
    from kbroker.protocol.outcome import CLOSE, NO_RESPONSE

    def no_answer(answers, failed):
        pytest.fail("acks=0 shapes no answer")

    def write(index: int, refused: bool = False):
        return parts.replicas.append_records([("zero", index, memoryview(make_batch(1)))], 0, 1000, no_answer,
                                             refused=refused)

    async def main():
        parts.topics.create_now("zero", 1, 1)
        assert write(0) is NO_RESPONSE
        assert parts.replicas.leader(TopicPartition("zero", 0)).log.log_end_offset == 1
        assert write(7) is CLOSE  # no such partition
        assert write(0, refused=True) is CLOSE
        assert parts.replicas.leader(TopicPartition("zero", 0)).log.log_end_offset == 2

    asyncio.run(main())


def test_append_records_to_an_unknown_topic_does_not_create_it(parts):
    """Kafka 2.8's handleProduceRequest answers a topic its metadata lacks UNKNOWN_TOPIC_OR_PARTITION, with
    auto.create.topics.enable too: only Metadata auto-creates (the client's metadata refresh, then a retry)."""
    async def main():
        assert parts.replicas.dynamic_config.current.auto_create_topics_enable
        _, out, failed = parts.produce("fresh", 0, memoryview(make_batch(1)))
        assert failed and out["error_code"] == errors.UnknownTopicOrPartitionError.code
        assert "fresh" not in parts.topics.topics and layout.get_topic_assignment(parts.store, "fresh") is None

    asyncio.run(main())


def test_concurrent_auto_creations_of_one_name_share_one_creation(parts):
    """Metadata requests racing to auto-create one topic all wait for the one creation; a bad name is each
    asker's INVALID_TOPIC_EXCEPTION."""
    async def main():
        created: list[str] = []
        register = parts.topics._register_async

        async def counted(info):
            created.append(info.name)
            return await register(info)
        parts.topics._register_async = counted  # type: ignore[method-assign]
        await asyncio.gather(*(parts.topics.auto_create("shared") for _ in range(5)))
        assert created == ["shared"]
        assert sorted(parts.topics.topics["shared"].assignment) == [0]
        assert parts.replicas.leader(TopicPartition("shared", 0)) is not None
        await parts.topics.auto_create("shared")  # exists: nothing to do
        assert created == ["shared"]
        outcomes = await asyncio.gather(*(parts.topics.auto_create("bad/name") for _ in range(2)),
                                        return_exceptions=True)
        assert [type(o) for o in outcomes] == [errors.InvalidTopicError] * 2
        assert not parts.topics._creating

    asyncio.run(main())
