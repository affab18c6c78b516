"""The issue's legacy gzip round trip on a single ZooKeeper-mode broker (a real ZooKeeper and a broker
process), the only setup in which "20 messages acknowledged, then a group consumer reads none of them in
30 s" could be reproduced. There it does not depend on the codec or the message format at all: a
ZooKeeper-mode broker keeps Kafka's default ``offsets.topic.replication.factor=3``, so with one live
broker ``__consumer_offsets`` cannot be created and every FindCoordinator answers
COORDINATOR_NOT_AVAILABLE, which librdkafka retries silently for ever. Kafka 2.8 does exactly the same
(which is why its shipped server.properties sets the factor to 1) and logs, on the broker, which setting
is short; this broker said nothing anywhere. Now it logs a warning naming the setting, and with the
factor at 1 the round trip works in every direction the issue names."""
from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer

from tests.cluster.conftest import Cluster
from tests.raw_client import request

from .helpers import create_topic
from .test_legacy_codecs import check, consume, legacy, produce

FIND_COORDINATOR = 10
COORDINATOR_NOT_AVAILABLE = 15


def _single_broker(zookeeper_server, tmp_path_factory, name: str, overrides: dict[str, str]) -> Iterator[Cluster]:
    c = Cluster(zookeeper_server, tmp_path_factory.mktemp(name), size=1, overrides=overrides)
    try:
        c.start()
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def kafka_defaults(zookeeper_server, tmp_path_factory) -> Iterator[Cluster]:
    """One broker with Kafka's defaults for the internal topics' replication factors (3)."""
    yield from _single_broker(zookeeper_server, tmp_path_factory, "legacy-zk-defaults",
                              {"offsets.topic.replication.factor": "3", "auto.create.topics.enable": "true"})


@pytest.fixture(scope="module")
def single_broker_settings(zookeeper_server, tmp_path_factory) -> Iterator[Cluster]:
    """One broker as Kafka's shipped server.properties sets it up (internal topics with one replica)."""
    yield from _single_broker(zookeeper_server, tmp_path_factory, "legacy-zk-single",
                              {"offsets.topic.replication.factor": "1", "auto.create.topics.enable": "true"})


def test_too_few_brokers_for_the_offsets_topic_is_said_to_the_client_and_in_the_broker_log(kafka_defaults):
    broker = kafka_defaults.brokers[1]
    topic = "legacy-gzip-defaults"
    create_topic(broker.bootstrap, topic, 1, {"message.timestamp.type": "CreateTime"})
    produce(broker.bootstrap, topic, "gzip", legacy("0.10.1.0"))  # acknowledged: producing needs no coordinator

    for version in (0, 1, 2, 3):
        answer = request(broker.bootstrap, FIND_COORDINATOR, version, {"key": "any-group", "key_type": 0})
        assert answer.error_code == COORDINATOR_NOT_AVAILABLE, answer
        if version >= 1:
            assert "offsets.topic.replication.factor=3" in answer.error_message, answer

    # the group consumer never gets a coordinator, as on Kafka: it reads nothing, and fails nothing
    started = time.monotonic()
    assert consume_briefly(broker.bootstrap, topic) == []
    assert time.monotonic() - started < 30

    log = broker.log()
    warnings = [line for line in log.splitlines()
                if "WARNING" in line and "configured via 'offsets.topic.replication.factor'" in line]
    assert warnings, log[-4000:]
    assert "1 live broker(s) do not meet the required replication factor 3 for __consumer_offsets" in warnings[0]
    assert len(warnings) == 1, "once a minute, not once a request"


def consume_briefly(bootstrap: str, topic: str) -> list:
    """What a group consumer reads in 8 s (it keeps asking for a coordinator meanwhile)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "legacy-defaults",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe([topic])
        got = []
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.offset())
        return got
    finally:
        consumer.close()


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4"])
def test_legacy_producer_read_by_group_consumers_in_zookeeper_mode(single_broker_settings, codec):
    """The issue's case and its neighbours: a 0.10.1.0 (magic 1) producer with an auto-created topic
    (Metadata v2, no ApiVersions), read by modern and legacy group consumers."""
    bootstrap = single_broker_settings.brokers[1].bootstrap
    topic = f"legacy-zk-{codec}"
    window = produce(bootstrap, topic, codec, legacy("0.10.1.0"))
    check(consume(bootstrap, topic, {}, group=True), "CreateTime", window, produced=1)
    for fallback in ("0.10.1.0", "0.10.0.0"):
        check(consume(bootstrap, topic, legacy(fallback), group=True), "CreateTime", window, produced=1, read=1)
