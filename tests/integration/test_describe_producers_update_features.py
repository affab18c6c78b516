"""APIs a Kafka 2.8 ZooKeeper-mode broker serves that kbroker lacked, through kafka-python 3's admin client:
DescribeProducers (61, KIP-664: what kafka-transactions.sh reads to find hanging transactions), UpdateFeatures
(57, KIP-584: 2.8 defines no feature, so each update is refused with Kafka's reason) and the delegation-token
APIs (38-41: refused as a 2.8 broker without delegation.token.master.key refuses them)."""
from __future__ import annotations

import pytest
from confluent_kafka import Producer

from tests.integration.conftest import _make_broker
from tests.integration.helpers import create_topic
from tests.raw_client import request

INVALID_REQUEST, DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = 42, 64


@pytest.fixture
def admin(module_broker):
    from kafka.admin import KafkaAdminClient

    client = KafkaAdminClient(bootstrap_servers=module_broker.bootstrap)
    yield client
    client.close()


def test_describe_producers_shows_an_open_transaction_then_its_end(module_broker, admin):
    from kafka import TopicPartition

    create_topic(module_broker.bootstrap, "dp", 2)
    txn = Producer({"bootstrap.servers": module_broker.bootstrap, "transactional.id": "dp-txn"})
    txn.init_transactions(30)
    plain = Producer({"bootstrap.servers": module_broker.bootstrap, "enable.idempotence": True})
    for i in range(3):
        plain.produce("dp", b"i%d" % i, partition=0)
    assert plain.flush(30) == 0
    txn.begin_transaction()
    for i in range(4):
        txn.produce("dp", b"t%d" % i, partition=0)
    assert txn.flush(30) == 0

    state = admin.describe_producers([TopicPartition("dp", 0), TopicPartition("dp", 1)])
    assert state[TopicPartition("dp", 1)].active_producers == []
    producers = sorted(state[TopicPartition("dp", 0)].active_producers,
                       key=lambda p: p.current_transaction_start_offset)
    assert len(producers) == 2
    idempotent, open_txn = producers
    assert (idempotent.last_sequence, idempotent.current_transaction_start_offset) == (2, -1)
    assert (open_txn.last_sequence, open_txn.current_transaction_start_offset) == (3, 3)  # opened at offset 3
    assert open_txn.producer_id >= 0 and open_txn.producer_epoch >= 0 and open_txn.last_timestamp > 0

    txn.commit_transaction(30)
    after = {p.producer_id: p for p in admin.describe_producers([TopicPartition("dp", 0)])[TopicPartition("dp", 0)]
             .active_producers}
    assert after[open_txn.producer_id].current_transaction_start_offset == -1
    assert after[open_txn.producer_id].coordinator_epoch >= 0


def test_describe_producers_unknown_topic(module_broker, admin):
    from kafka import TopicPartition
    from kafka.errors import UnknownTopicOrPartitionError

    answer = request(module_broker.bootstrap, 61, 0, {"topics": [{"name": "dp-none", "partition_indexes": [0, 1]}]})
    assert [(p.partition_index, p.error_code) for p in answer.topics[0].partitions] == [(0, 3), (1, 3)]
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.describe_producers([TopicPartition("dp-none", 0)], broker_id=0)


def test_update_features_refused_as_kafka_2_8(admin):
    answer = admin.update_features({"some.feature": 1, "gone.feature": ("SAFE_DOWNGRADE", 0),
                                    "low.feature": 0})
    assert answer == {
        "some.feature": "[Error 42] InvalidRequestError: Could not apply finalized feature update because the provided "
                        "feature is not supported.",
        "gone.feature": "[Error 42] InvalidRequestError: Can not delete non-existing finalized feature: 'gone.feature'",
        "low.feature": "[Error 42] InvalidRequestError: Can not provide maxVersionLevel: 0 less than 1 without "
                       "setting the allowDowngrade flag to true in the request.",
    }


def test_update_features_disabled_below_ibp_2_7(tmp_path):
    gen = _make_broker(tmp_path, {"inter.broker.protocol.version": "2.6", "log.message.format.version": "2.6"})
    broker = next(gen)
    try:
        answer = request(broker.bootstrap, 57, 0, {"timeout_ms": 1000, "feature_updates": [
            {"feature": "f", "max_version_level": 1, "allow_downgrade": False}]})
        assert (answer.error_code, answer.error_message, answer.results) == (
            INVALID_REQUEST, "Feature versioning system is disabled.", [])
    finally:
        next(gen, None)


@pytest.mark.parametrize("version", [0, 1, 2])
def test_delegation_tokens_not_allowed_on_plaintext(module_broker, version):
    bootstrap = module_broker.bootstrap
    created = request(bootstrap, 38, version, {"renewers": [], "max_lifetime_ms": -1})
    assert (created.error_code, created.principal_type, created.principal_name, created.token_id, created.hmac,
            created.expiry_timestamp_ms) == (DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, "User", "ANONYMOUS", "", b"", -1)
    assert request(bootstrap, 39, version, {"hmac": b"x", "renew_period_ms": 1}).error_code == 64
    assert request(bootstrap, 40, version, {"hmac": b"x", "expiry_time_period_ms": 1}).error_code == 64
    described = request(bootstrap, 41, version, {"owners": None})
    assert (described.error_code, described.tokens) == (DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, [])
