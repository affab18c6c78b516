"""Metadata auto-creation in ZooKeeper mode (a real ZooKeeper and a broker process, auto.create.topics.enable):
pykafka's ``KafkaClient(hosts=...).topics[name]`` on a fresh name. pykafka retries while the topic answers
LEADER_NOT_AVAILABLE (being created) and fails with LeaderNotFoundError on a topic answered error 0 whose
partitions have no leader, which is what this broker answered for ~0.2 s after creating it. Kafka answers
LEADER_NOT_AVAILABLE with no partitions until the controller announces the leaders, all at once."""
from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from tests.cluster.conftest import Cluster
from tests.integration.test_legacy_clients import import_pykafka
from tests.raw_client import metadata

NAMES = 5


@pytest.fixture(scope="module")
def zk_broker(zookeeper_server, tmp_path_factory) -> Iterator[Cluster]:
    c = Cluster(zookeeper_server, tmp_path_factory.mktemp("auto-create-zk"), size=1,
                overrides={"auto.create.topics.enable": "true", "num.partitions": "4"})
    try:
        c.start()
        yield c
    finally:
        c.stop()


def test_pykafka_gets_a_topic_metadata_auto_creates(zk_broker):
    pykafka = import_pykafka()
    client = pykafka.KafkaClient(hosts=zk_broker.bootstrap, broker_version="0.10.1")
    for _ in range(NAMES):
        name = f"new-topic-{uuid.uuid4().hex[:8]}".encode()
        topic = client.topics[name]
        assert sorted(topic.partitions) == [0, 1, 2, 3]
        assert all(p.leader.id == 1 for p in topic.partitions.values())


@pytest.mark.parametrize("version", [0, 1, 4, 7, 9, 11])
def test_an_auto_created_topic_has_no_partitions_until_every_leader_is_known(zk_broker, version):
    """Every answer while the topic is being created is topic-level LEADER_NOT_AVAILABLE without
    partitions; the first answer with partitions has all four, each with its leader."""
    name = f"auto-{version}-{uuid.uuid4().hex[:8]}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        answer = metadata(zk_broker.brokers[1].bootstrap, [name], version=version, auto_create=True).topics[0]
        if answer.error_code == 5:
            assert answer.partitions == [], answer
            continue
        assert answer.error_code == 0, answer
        assert [(p.partition_index, p.error_code, p.leader_id) for p in answer.partitions] == \
            [(i, 0, 1) for i in range(4)], answer
        return
    pytest.fail(f"{name} never got its leaders")
