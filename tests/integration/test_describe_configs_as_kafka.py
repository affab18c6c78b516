"""DescribeConfigs answers as Kafka 2.8 gives them (ZkAdminManager.describeConfigs), through kafka-python's and
confluent-kafka's admin clients and a raw v4 request, against one real broker started with a few static keys:

- each key's type (v3+, KIP-569) and, when asked, its documentation;
- a topic key's synonyms: its override, then its broker synonym in each layer that sets it, with Kafka's drop of
  what precedes the synonym's own name (retention.ms has none while only log.retention.hours is set anywhere);
- a broker key's source, synonyms (listener overrides), read_only (false for dynamically updatable keys) and
  sensitivity; a key server.properties does not set is DEFAULT_CONFIG, a null-default one with a null value;
- the empty broker name describes only the cluster-wide dynamic defaults.
"""
from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic, ResourceType

from kbroker.config.broker import DEFS
from kbroker.config.topic import KEYS
from tests.integration.conftest import _make_broker
from tests.raw_client import request

STATIC = {"log.segment.bytes": "2000000", "log.retention.hours": "24",
          "listener.name.plaintext.ssl.keystore.type": "PEM", "ssl.truststore.password": "secret"}


@pytest.fixture(scope="module")
def static_broker(tmp_path_factory) -> Iterator:
    yield from _make_broker(tmp_path_factory.mktemp("describe-configs"), STATIC)


def _topic(broker, configs: dict[str, str] | None = None) -> str:
    name = f"described-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, 1, 1, config=configs or {})])[name].result(30)
    return name


def _kafka_python(broker, resource_type, name: str) -> dict:
    from kafka.admin import ConfigResource as KpResource, KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30000)
    try:
        found = admin.describe_configs([KpResource(resource_type, name)], include_synonyms=True, config_filter="all")
    finally:
        admin.close()
    return next(iter(next(iter(found.values())).values()))


def _synonyms(entry: dict) -> list[tuple[str, str | None, str]]:
    return [(s["name"], s["value"], s["source"]) for s in entry["synonyms"]]


def test_topic_config_types_and_synonyms_through_kafka_python(static_broker):
    from kafka.admin import ConfigResourceType

    topic = _topic(static_broker, {"max.message.bytes": "5000"})
    configs = _kafka_python(static_broker, ConfigResourceType.TOPIC, topic)
    types = {name: entry["config_type"] for name, entry in configs.items()}
    assert types["retention.ms"] == types["retention.bytes"] == types["segment.ms"] == "LONG"
    assert types["segment.bytes"] == types["max.message.bytes"] == types["min.insync.replicas"] == "INT"
    assert types["cleanup.policy"] == types["leader.replication.throttled.replicas"] == "LIST"
    assert types["min.cleanable.dirty.ratio"] == "DOUBLE"
    assert types["unclean.leader.election.enable"] == "BOOLEAN"
    assert types["compression.type"] == "STRING"

    assert _synonyms(configs["max.message.bytes"]) == [
        ("max.message.bytes", "5000", "DYNAMIC_TOPIC_CONFIG"), ("message.max.bytes", "1048588", "DEFAULT_CONFIG")]
    assert configs["max.message.bytes"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert _synonyms(configs["segment.bytes"]) == [
        ("log.segment.bytes", "2000000", "STATIC_BROKER_CONFIG"), ("log.segment.bytes", "1073741824", "DEFAULT_CONFIG")]
    assert configs["segment.bytes"]["config_source"] == "STATIC_BROKER_CONFIG"
    assert configs["segment.bytes"]["value"] == "2000000"
    # log.retention.ms is set nowhere: Kafka drops log.retention.hours' synonyms, and the entry is DEFAULT_CONFIG
    # though its value comes from the static log.retention.hours
    assert configs["retention.ms"]["value"] == str(24 * 3600_000)
    assert _synonyms(configs["retention.ms"]) == []
    assert configs["retention.ms"]["config_source"] == "DEFAULT_CONFIG"
    assert _synonyms(configs["cleanup.policy"]) == [("log.cleanup.policy", "delete", "DEFAULT_CONFIG")]
    assert _synonyms(configs["leader.replication.throttled.replicas"]) == []  # no broker synonym


def test_broker_entries_through_kafka_python(static_broker):
    from kafka.admin import ConfigResourceType

    configs = _kafka_python(static_broker, ConfigResourceType.BROKER, "0")
    advertised = configs["advertised.listeners"]  # not set: Kafka's default is null
    assert (advertised["value"], advertised["config_source"], advertised["synonyms"]) == (None, "DEFAULT_CONFIG", [])
    assert configs["listeners"]["config_source"] == "STATIC_BROKER_CONFIG"
    assert configs["listeners"]["value"] == f"PLAINTEXT://{static_broker.bootstrap}"
    assert configs["num.io.threads"]["config_source"] == "DEFAULT_CONFIG"
    assert _synonyms(configs["num.io.threads"]) == [("num.io.threads", "8", "DEFAULT_CONFIG")]
    # read_only as Kafka: false for the keys DynamicBrokerConfig can change at run time
    assert configs["num.io.threads"]["read_only"] is False
    assert configs["log.segment.bytes"]["read_only"] is False
    assert configs["broker.id"]["read_only"] is True
    assert configs["log.retention.hours"]["read_only"] is True
    assert _synonyms(configs["log.retention.hours"]) == [
        ("log.retention.hours", "24", "STATIC_BROKER_CONFIG"), ("log.retention.hours", "168", "DEFAULT_CONFIG")]
    assert (configs["log.retention.ms"]["value"], configs["log.retention.ms"]["config_source"]) == (
        None, "DEFAULT_CONFIG")
    # a listener override is listed with its base key as a synonym
    override = configs["listener.name.plaintext.ssl.keystore.type"]
    assert _synonyms(override) == [("listener.name.plaintext.ssl.keystore.type", "PEM", "STATIC_BROKER_CONFIG"),
                                   ("ssl.keystore.type", "JKS", "DEFAULT_CONFIG")]
    assert override["config_type"] == "STRING"
    # passwords: null, sensitive, PASSWORD, also in the synonyms
    password = configs["ssl.truststore.password"]
    assert (password["value"], password["is_sensitive"], password["config_type"]) == (None, True, "PASSWORD")
    assert _synonyms(password) == [("ssl.truststore.password", None, "STATIC_BROKER_CONFIG")]
    assert configs["offsets.topic.replication.factor"]["config_type"] == "SHORT"
    assert configs["advertised.listeners"]["config_type"] == "STRING"
    assert configs["sasl.enabled.mechanisms"]["config_type"] == "LIST"


def test_documentation_only_when_asked(static_broker):
    topic = _topic(static_broker)
    resources = [{"resource_type": 2, "resource_name": topic, "configuration_keys": ["retention.ms"]},
                 {"resource_type": 4, "resource_name": "0", "configuration_keys": ["num.io.threads"]}]
    docs = {k.topic_key: k.doc for k in KEYS} | {d.key: d.doc for d in DEFS}
    for asked in (True, False):
        answer = request(static_broker.bootstrap, 32, 4, {"resources": resources, "include_synonyms": False,
                                                          "include_documentation": asked})
        for result, key in zip(answer.results, ("retention.ms", "num.io.threads")):
            assert result.error_code == 0
            [entry] = result.configs
            assert entry.name == key and entry.config_type in (3, 5)
            assert entry.documentation == (docs[key] if asked else None)
    everything = request(static_broker.bootstrap, 32, 4, {"include_synonyms": False, "include_documentation": True,
                                                          "resources": [{**r, "configuration_keys": None}
                                                                        for r in resources]})
    undocumented = [c.name for r in everything.results for c in r.configs
                    if not c.documentation and not c.name.startswith("listener.name.")]
    assert undocumented == []  # as Kafka, every key it declares has its doc (a listener override has none)


def test_the_empty_broker_name_describes_the_cluster_defaults(static_broker):
    answer = request(static_broker.bootstrap, 32, 4, {"resources": [
        {"resource_type": 4, "resource_name": "", "configuration_keys": None},
        {"resource_type": 4, "resource_name": "7", "configuration_keys": None}], "include_synonyms": True})
    empty, other = answer.results
    assert (empty.error_code, empty.configs) == (0, [])  # no /config/brokers/<default> set
    assert other.error_code == 42  # INVALID_REQUEST: another broker's id
    assert other.error_message == "Unexpected broker id, expected 0 or empty string, but received 7"


def test_confluent_kafka_sees_sources_and_synonyms(static_broker):
    topic = _topic(static_broker, {"retention.ms": "3600000"})
    admin = AdminClient({"bootstrap.servers": static_broker.bootstrap})
    resource = ConfigResource(ResourceType.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(30)
    retention = configs["retention.ms"]
    assert retention.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert [(s.name, s.value, s.source) for s in retention.synonyms.values()] == [
        ("retention.ms", "3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)]
    segment = configs["segment.bytes"]
    assert segment.source == ConfigSource.STATIC_BROKER_CONFIG.value and not segment.is_default
    assert configs["flush.ms"].source == ConfigSource.DEFAULT_CONFIG.value and configs["flush.ms"].is_default


@pytest.fixture
def dynamic_broker(tmp_path) -> Iterator:
    yield from _make_broker(tmp_path, {"broker.id": "5", **STATIC})


def _incremental(admin: AdminClient, resource_type: ResourceType, name: str, configs: dict[str, str]) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry

    resource = ConfigResource(resource_type, name, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    admin.incremental_alter_configs([resource])[resource].result(30)


def test_dynamic_broker_configs_show_their_layers(dynamic_broker):
    """IncrementalAlterConfigs at the cluster default and on the broker itself (confluent-kafka), then
    DescribeConfigs of the broker, of the cluster default and of a topic: each value from its layer, the layers
    below it as its synonyms, as Kafka 2.8 answers them."""
    admin = AdminClient({"bootstrap.servers": dynamic_broker.bootstrap})
    topic = _topic(dynamic_broker)
    # (confluent-kafka refuses the empty name of the cluster default: a raw IncrementalAlterConfigs sets it)
    answer = request(dynamic_broker.bootstrap, 44, 0, {"validate_only": False, "resources": [{
        "resource_type": 4, "resource_name": "", "configs": [
            {"name": "log.segment.bytes", "config_operation": 0, "value": "3000000"},
            {"name": "log.retention.ms", "config_operation": 0, "value": "7200000"}]}]})
    assert [(r.error_code, r.error_message) for r in answer.responses] == [(0, None)]
    _incremental(admin, ResourceType.BROKER, "5", {"log.segment.bytes": "4000000"})
    broker = ConfigResource(ResourceType.BROKER, "5")
    deadline = time.monotonic() + 15
    while True:  # the broker follows /config/brokers through its change notices
        configs = admin.describe_configs([broker])[broker].result(30)
        if configs["log.segment.bytes"].value == "4000000" and configs["log.retention.ms"].value == "7200000":
            break
        assert time.monotonic() < deadline, {k: configs[k].value for k in ("log.segment.bytes", "log.retention.ms")}
        time.sleep(0.2)

    assert configs["log.segment.bytes"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    assert configs["log.retention.ms"].source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    assert not configs["log.segment.bytes"].is_read_only
    # (confluent-kafka keys synonyms by name, so the layers of one key collapse: kafka-python lists them)
    from kafka.admin import ConfigResourceType

    mine = _kafka_python(dynamic_broker, ConfigResourceType.BROKER, "5")
    segment_layers = [("log.segment.bytes", "4000000", "DYNAMIC_BROKER_CONFIG"),
                      ("log.segment.bytes", "3000000", "DYNAMIC_DEFAULT_BROKER_CONFIG"),
                      ("log.segment.bytes", "2000000", "STATIC_BROKER_CONFIG"),
                      ("log.segment.bytes", "1073741824", "DEFAULT_CONFIG")]
    retention_layers = [("log.retention.ms", "7200000", "DYNAMIC_DEFAULT_BROKER_CONFIG"),
                        ("log.retention.hours", "24", "STATIC_BROKER_CONFIG"),
                        ("log.retention.hours", "168", "DEFAULT_CONFIG")]
    assert _synonyms(mine["log.segment.bytes"]) == segment_layers
    assert _synonyms(mine["log.retention.ms"]) == retention_layers

    cluster_default = request(dynamic_broker.bootstrap, 32, 4, {"resources": [
        {"resource_type": 4, "resource_name": "", "configuration_keys": None}], "include_synonyms": True})
    assert [(c.name, c.value, c.config_source, [(s.name, s.value, s.source) for s in c.synonyms])
            for c in cluster_default.results[0].configs] == [
        ("log.retention.ms", "7200000", 3, [("log.retention.ms", "7200000", 3)]),
        ("log.segment.bytes", "3000000", 3, [("log.segment.bytes", "3000000", 3)])]

    described = ConfigResource(ResourceType.TOPIC, topic)
    topic_configs = admin.describe_configs([described])[described].result(30)
    assert (topic_configs["segment.bytes"].value, topic_configs["segment.bytes"].source) == (
        "4000000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert (topic_configs["retention.ms"].value, topic_configs["retention.ms"].source) == (
        "7200000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    topic_entries = _kafka_python(dynamic_broker, ConfigResourceType.TOPIC, topic)
    assert _synonyms(topic_entries["segment.bytes"]) == segment_layers
    assert _synonyms(topic_entries["retention.ms"]) == retention_layers


def test_create_topics_v5_answers_the_same_entries(static_broker):
    """CreateTopics v5+ answers the new topic's configs as DescribeConfigs would (Kafka's createTopicConfigEntry):
    a given key TOPIC_CONFIG, a key server.properties sets STATIC_BROKER_CONFIG, the others DEFAULT_CONFIG."""
    name = f"created-{uuid.uuid4().hex[:8]}"
    answer = request(static_broker.bootstrap, 19, 5, {"topics": [{
        "name": name, "num_partitions": 1, "replication_factor": 1, "assignments": [],
        "configs": [{"name": "cleanup.policy", "value": "delete,compact"}]}], "timeout_ms": 30_000,
        "validate_only": True})
    [created] = answer.topics
    assert created.error_code == 0
    configs = {c.name: (c.value, c.config_source, c.read_only, c.is_sensitive) for c in created.configs}
    assert configs["cleanup.policy"] == ("delete,compact", 1, False, False)
    assert configs["segment.bytes"] == ("2000000", 4, False, False)
    assert configs["retention.ms"] == (str(24 * 3600_000), 5, False, False)  # log.retention.ms is set nowhere
    assert configs["max.message.bytes"] == ("1048588", 5, False, False)


def test_a_dynamic_key_kafka_declares_but_kbroker_does_not_use_is_shown_with_its_type(dynamic_broker):
    """librdkafka's admin client sets sasl.kerberos.min.time.before.relogin (Kafka: a LONG, dynamically updatable):
    described back it is no secret, so kafka-configs.sh can alter the broker again without giving it anew."""
    admin = AdminClient({"bootstrap.servers": dynamic_broker.bootstrap})
    _incremental(admin, ResourceType.BROKER, "5", {"sasl.kerberos.min.time.before.relogin": "60001"})
    deadline = time.monotonic() + 15
    while True:
        answer = request(dynamic_broker.bootstrap, 32, 3, {"resources": [{
            "resource_type": 4, "resource_name": "5", "configuration_keys": ["sasl.kerberos.min.time.before.relogin"]}],
            "include_synonyms": False, "include_documentation": False})
        [entry] = answer.results[0].configs or [None]
        if entry is not None and entry.config_source == 2:
            break
        assert time.monotonic() < deadline, entry
        time.sleep(0.2)
    assert (entry.value, entry.is_sensitive, entry.config_type) == ("60001", False, 5)  # 5: LONG
