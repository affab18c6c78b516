"""DescribeConfigs entries over the dynamic broker config layers (KIP-226), as Kafka 2.8's configSynonyms lists
them: per-broker dynamic (2), cluster-default dynamic (3), server.properties (4), default (5), each only where it
sets a synonym; a topic's override (1) comes first. The layers are a real DynamicBrokerConfig, filled as the
ZooKeeper side fills it."""
from __future__ import annotations

from kbroker.config.broker import build_config
from kbroker.config.dynamic import DynamicBrokerConfig
from kbroker.handlers.config_entries import ConfigEntry, broker_entries, topic_entries
from kbroker.handlers.config_types import ConfigType

STATIC = {"log.retention.hours": "24", "log.segment.bytes": "2000000", "broker.id": "1"}


def _layers() -> DynamicBrokerConfig:
    dynamic = DynamicBrokerConfig(build_config({k: (v, "server.properties") for k, v in STATIC.items()}), 1)
    dynamic.update(per_broker={"log.segment.bytes": "3000000", "log.retention.ms": "1000",
                               "listener.name.plaintext.ssl.key.password": "secret"},
                   cluster_default={"log.segment.bytes": "4000000", "log.cleanup.policy": "compact",
                                    "num.io.threads": "16"})
    return dynamic


def _by_name(entries: list[ConfigEntry]) -> dict[str, ConfigEntry]:
    return {e.name: e for e in entries}


def _synonyms(entry: ConfigEntry) -> list[tuple[str, str | None, int]]:
    return [(s.name, s.value, s.source) for s in entry.synonyms]


def test_topic_entries_take_their_source_from_the_dynamic_layers():
    topic = _by_name(topic_entries(_layers(), {"max.message.bytes": "5000"}))
    assert (topic["segment.bytes"].value, topic["segment.bytes"].source) == ("3000000", 2)
    assert _synonyms(topic["segment.bytes"]) == [
        ("log.segment.bytes", "3000000", 2), ("log.segment.bytes", "4000000", 3),
        ("log.segment.bytes", "2000000", 4), ("log.segment.bytes", "1073741824", 5)]
    # log.retention.ms is set (per broker): the coarser synonyms of the lower layers follow it
    assert (topic["retention.ms"].value, topic["retention.ms"].source) == ("1000", 2)
    assert _synonyms(topic["retention.ms"]) == [
        ("log.retention.ms", "1000", 2), ("log.retention.hours", "24", 4), ("log.retention.hours", "168", 5)]
    assert (topic["cleanup.policy"].value, topic["cleanup.policy"].source) == ("compact", 3)
    assert _synonyms(topic["cleanup.policy"]) == [("log.cleanup.policy", "compact", 3),
                                                  ("log.cleanup.policy", "delete", 5)]
    assert _synonyms(topic["max.message.bytes"]) == [("max.message.bytes", "5000", 1),
                                                     ("message.max.bytes", "1048588", 5)]
    assert (topic["flush.ms"].source, topic["flush.ms"].synonyms) == (5, [])
    assert topic["retention.ms"].config_type == ConfigType.LONG
    assert not any(e.read_only or e.sensitive for e in topic.values())


def test_broker_entries_per_broker_and_cluster_default():
    dynamic = _layers()
    mine = _by_name(broker_entries(dynamic, per_broker=True))
    assert (mine["num.io.threads"].value, mine["num.io.threads"].source, mine["num.io.threads"].read_only) == (
        "16", 3, False)
    assert _synonyms(mine["num.io.threads"]) == [("num.io.threads", "16", 3), ("num.io.threads", "8", 5)]
    assert (mine["log.retention.ms"].value, mine["log.retention.ms"].source) == ("1000", 2)
    assert (mine["log.retention.hours"].value, mine["log.retention.hours"].read_only) == ("24", True)
    secret = mine["listener.name.plaintext.ssl.key.password"]
    assert (secret.value, secret.sensitive, secret.config_type) == (None, True, ConfigType.PASSWORD)
    assert _synonyms(secret) == [("listener.name.plaintext.ssl.key.password", None, 2)]
    assert mine["broker.id"].source == 4 and mine["broker.id"].read_only
    cleaner_rate = mine["log.cleaner.io.max.bytes.per.second"]  # a DOUBLE written as Java's Double.toString
    assert (cleaner_rate.value, cleaner_rate.config_type) == ("1.7976931348623157E308", ConfigType.DOUBLE)

    defaults = _by_name(broker_entries(dynamic, per_broker=False))
    assert sorted(defaults) == ["log.cleanup.policy", "log.segment.bytes", "num.io.threads"]
    assert [(e.value, e.source, _synonyms(e)) for e in defaults.values()] == [
        ("compact", 3, [("log.cleanup.policy", "compact", 3)]),
        ("4000000", 3, [("log.segment.bytes", "4000000", 3)]),
        ("16", 3, [("num.io.threads", "16", 3)])]


def test_a_removed_dynamic_value_falls_back_to_the_layers_below():
    dynamic = _layers()
    dynamic.update(per_broker={}, cluster_default={})
    topic = _by_name(topic_entries(dynamic, {}))
    assert (topic["segment.bytes"].value, topic["segment.bytes"].source) == ("2000000", 4)
    assert (topic["retention.ms"].value, topic["retention.ms"].source, topic["retention.ms"].synonyms) == (
        str(24 * 3600_000), 5, [])
    assert broker_entries(dynamic, per_broker=False) == []


def test_overrides_another_tool_wrote_are_listed_as_kafka_would():
    """A topic's znode may hold keys kbroker does not apply (written by Kafka's own tools): Kafka 2.8 lists a
    LogConfig key with its type, and a key of no known type as sensitive (null)."""
    topic = _by_name(topic_entries(_layers(), {"preallocate": "true", "custom.key": "v", "retention.ms": "5"}))
    assert (topic["preallocate"].value, topic["preallocate"].config_type, topic["preallocate"].source) == (
        "true", ConfigType.BOOLEAN, 1)
    custom = topic["custom.key"]
    assert (custom.value, custom.sensitive, custom.config_type, _synonyms(custom)) == (
        None, True, ConfigType.UNKNOWN, [("custom.key", None, 1)])
    assert topic["retention.ms"].value == "5"
