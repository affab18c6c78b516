"""Config entries as Kafka 2.8 answers them in DescribeConfigs and CreateTopics v5 (apache/kafka
``core/src/main/scala/kafka/server/ZkAdminManager.scala``: ``createTopicConfigEntry``, ``createBrokerConfigEntry``,
``configSynonyms``).

An entry's synonyms are the keys that could give it its value, found layer by layer (the topic's override, then
the broker's per-broker dynamic, cluster-default dynamic, server.properties and built-in default layers), each only
where it is set; its source is its first synonym's, DEFAULT_CONFIG when it has none.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kbroker.config.broker import DEFS
from kbroker.config.dynamic import DynamicBrokerConfig
from kbroker.config.topic import KEYS as LOG_KEYS
from kbroker.handlers.config_types import (
    BROKER_DEFAULTS,
    DYNAMIC_BROKER_KEYS,
    NULL_DEFAULT_KEYS,
    TOPIC_SYNONYMS,
    TOPIC_TYPES,
    ConfigType,
    broker_doc,
    broker_synonyms,
    broker_type,
    is_sensitive,
    kafka_string,
    topic_doc,
)
from kbroker.protocol import message_types as msg

# DescribeConfigsResponse.ConfigSource
TOPIC_CONFIG = 1
DYNAMIC_BROKER_CONFIG = 2
DYNAMIC_DEFAULT_BROKER_CONFIG = 3
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5

_LOG_BROKER_KEYS = [bk for k in LOG_KEYS for bk in k.broker_keys]


@dataclass(frozen=True)
class Synonym:
    name: str
    value: str | None
    source: int

    def wire(self) -> msg.DescribeConfigsResponse_Synonym:
        return {"name": self.name, "value": self.value, "source": self.source}


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str | None  # None: unset with no default, or sensitive
    read_only: bool
    sensitive: bool
    config_type: ConfigType
    documentation: str | None
    synonyms: list[Synonym] = field(default_factory=list)

    @property
    def source(self) -> int:
        return self.synonyms[0].source if self.synonyms else DEFAULT_CONFIG

    def wire(self, include_synonyms: bool, include_documentation: bool) -> msg.DescribeConfigsResponse_ResourceResult:
        """The DescribeConfigs ResourceResult (a version ignores the fields it lacks)."""
        return {"name": self.name, "value": self.value, "read_only": self.read_only,
                "is_default": self.source == DEFAULT_CONFIG, "config_source": self.source,
                "is_sensitive": self.sensitive,
                "synonyms": [s.wire() for s in self.synonyms] if include_synonyms else [],
                "config_type": int(self.config_type),
                "documentation": self.documentation if include_documentation else None}


def _layers(dynamic: DynamicBrokerConfig) -> list[tuple[Mapping[str, str], int]]:
    return [(dynamic.per_broker, DYNAMIC_BROKER_CONFIG), (dynamic.cluster_default, DYNAMIC_DEFAULT_BROKER_CONFIG),
            (dynamic.static.raw, STATIC_BROKER_CONFIG), (BROKER_DEFAULTS, DEFAULT_CONFIG)]


def config_synonyms(dynamic: DynamicBrokerConfig, name: str, sensitive: bool) -> list[Synonym]:
    """Kafka's configSynonyms: every layer, most specific first, then within it every synonym of ``name`` that it
    sets; what comes before the first entry named ``name`` itself is dropped (so a listener override is no synonym
    of the base key, and ``log.retention.hours`` none of ``log.retention.ms`` when the latter is set nowhere)."""
    found = [Synonym(s, None if sensitive else layer[s].strip(), source)
             for layer, source in _layers(dynamic) for s in broker_synonyms(name) if s in layer]
    for i, synonym in enumerate(found):
        if synonym.name == name:
            return found[i:]
    return []


def topic_entries(dynamic: DynamicBrokerConfig, overrides: Mapping[str, str]) -> list[ConfigEntry]:
    """Every topic key, with the topic's overrides over the broker's current defaults."""
    declared = dynamic.current.log.topic_values().keys()
    applied = {k: v for k, v in overrides.items() if k in declared}
    values: dict[str, str | None] = dict(dynamic.current.log.with_overrides(applied).topic_values())
    for key, text in overrides.items():
        values.setdefault(key, text)  # set in ZooKeeper by another tool: a key kbroker does not declare
    entries = []
    for name, value in sorted(values.items()):
        config_type = TOPIC_TYPES.get(name, ConfigType.UNKNOWN)
        sensitive = is_sensitive(config_type)
        shown = None if sensitive else value
        synonyms = [Synonym(name, shown, TOPIC_CONFIG)] if name in overrides else []
        broker_key = TOPIC_SYNONYMS.get(name)
        if broker_key is not None:
            synonyms += config_synonyms(dynamic, broker_key, sensitive)
        entries.append(ConfigEntry(name, shown, False, sensitive, config_type, topic_doc(name), synonyms))
    return entries


def _top_value(dynamic: DynamicBrokerConfig, name: str) -> str | None:
    for layer, _ in _layers(dynamic)[:3]:
        if name in layer:
            return layer[name].strip()
    return None


def _broker_values(dynamic: DynamicBrokerConfig) -> dict[str, str | None]:
    """Every broker key with its current value: the declared keys (their typed value in Kafka's string form; null
    if unset with a null default), the log layer's broker keys, and any other key a layer sets."""
    current = dynamic.current
    out: dict[str, str | None] = {}
    for d in DEFS:
        unset = _top_value(dynamic, d.key) is None
        out[d.key] = None if unset and d.key in NULL_DEFAULT_KEYS else kafka_string(current.values[d.attr])
    for key in _LOG_BROKER_KEYS:
        value = _top_value(dynamic, key)
        out[key] = value if value is not None else BROKER_DEFAULTS.get(key)
    for key in dynamic.effective_raw():  # Kafka lists what server.properties or ZooKeeper set, known or not
        if key not in out:
            out[key] = _top_value(dynamic, key)
    return out


def broker_entries(dynamic: DynamicBrokerConfig, per_broker: bool) -> list[ConfigEntry]:
    """A broker's configs (``per_broker``: DescribeConfigs names its id), or the cluster-wide dynamic defaults
    (the empty name): only the keys set there, with only that layer's synonyms."""
    values = _broker_values(dynamic) if per_broker else {k: v.strip() for k, v in dynamic.cluster_default.items()}
    entries = []
    for name, value in sorted(values.items()):
        config_type = broker_type(name)
        sensitive = is_sensitive(config_type)
        synonyms = config_synonyms(dynamic, name, sensitive)
        if not per_broker:
            synonyms = [s for s in synonyms if s.source == DYNAMIC_DEFAULT_BROKER_CONFIG]
        entries.append(ConfigEntry(name, None if sensitive else value, name not in DYNAMIC_BROKER_KEYS, sensitive,
                                   config_type, broker_doc(name), synonyms))
    return entries


def wanted(entries: Iterable[ConfigEntry], names: list[str] | None) -> list[ConfigEntry]:
    """The entries a request names (null: all of them)."""
    return list(entries) if names is None else [e for e in entries if e.name in names]
