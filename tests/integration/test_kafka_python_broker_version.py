"""kafka-python infers the broker's version from its ApiVersions answer (kafka/protocol/broker_version_data.py
infer_broker_version_from_api_versions: ListOffsets v7 means 3.0, Produce v9 2.8) and picks its defaults and
request versions by it (a pre-3.0 broker gets session.timeout.ms 30000, not KIP-735's 45000). kbroker advertised
ListOffsets v7, so kafka-python took it for a Kafka 3.0 (issue 30); it must see a 2.8, with Kafka 2.8's
ApiVersions.
"""
from __future__ import annotations

from .clients import DEADLINE
from .test_admin import produce_plain


def test_kafka_python_sees_a_kafka_2_8(broker):
    from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
    from kafka.admin import NewTopic
    from kafka.protocol.broker_version_data import BROKER_API_VERSIONS
    from kafka.structs import OffsetAndMetadata

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="kp-version", enable_auto_commit=False,
                             request_timeout_ms=int(DEADLINE * 1000))
    try:
        assert consumer.config["api_version"] == (2, 8)
        # kafka-python's pre-3.0 default (a 2.8 broker's group.max.session.timeout.ms is 30000), not 45000
        assert consumer.config["session_timeout_ms"] == 30000
        api_versions = consumer._manager.broker_version_data.api_versions
        assert api_versions[2] == (0, 6)  # ListOffsets
        # the whole answer is what kafka-python recorded from a real Kafka 2.8 broker
        assert api_versions == BROKER_API_VERSIONS[(2, 8)]
    finally:
        consumer.close()

    # the admin client on the versions it then picks: FindCoordinator v3 (not v4's batch), OffsetFetch v7
    topic = "kp-version"
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=int(DEADLINE * 1000))
    try:
        assert admin._manager.broker_version == (2, 8)
        admin.create_topics([NewTopic(topic, 1, 1)])
        produce_plain(broker.bootstrap, topic, 0, 5)
        committer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="kp-version",
                                  enable_auto_commit=False, request_timeout_ms=int(DEADLINE * 1000))
        try:
            committer.commit({TopicPartition(topic, 0): OffsetAndMetadata(3, "", -1)})
        finally:
            committer.close()
        offsets = admin.list_group_offsets({"kp-version": None})["kp-version"]
        assert {tp: o.offset for tp, o in offsets.items()} == {TopicPartition(topic, 0): 3}
    finally:
        admin.close()
