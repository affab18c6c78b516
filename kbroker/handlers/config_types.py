"""What Kafka 2.8 tells a client about each config key besides its value: its type (DescribeConfigs v3+,
KIP-569), its synonyms (the broker keys standing behind a topic key or a listener override) and whether it can
change at run time. Facts from apache/kafka 2.8 ``KafkaConfig.scala``, ``log/LogConfig.scala`` (the key types and
``TopicConfigSynonyms``) and ``DynamicBrokerConfig.scala`` (``brokerConfigSynonyms``, ``AllDynamicConfigs``); the
one-line docs are the ones declared with each key in ``kbroker.config.broker`` and ``kbroker.config.topic``."""
from __future__ import annotations

import re
from enum import IntEnum
from typing import Any

from kbroker.config.broker import DEFS
from kbroker.config.dynamic import ALL_DYNAMIC_KEYS, REPLICATION_QUOTA_KEYS
from kbroker.config.topic import KEYS as LOG_KEYS
from zk_compat.jvm import java_double


class ConfigType(IntEnum):
    """DescribeConfigsResponse.ConfigType: the ``config_type`` of a v3+ answer."""
    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


B, S, INT, SH, L, D, LS, P = (ConfigType.BOOLEAN, ConfigType.STRING, ConfigType.INT, ConfigType.SHORT, ConfigType.LONG,
                            ConfigType.DOUBLE, ConfigType.LIST, ConfigType.PASSWORD)

# Every topic-level key of Kafka 2.8's LogConfig (its non-internal ones) with its type.
TOPIC_TYPES: dict[str, ConfigType] = {
    "segment.bytes": INT, "segment.ms": L, "segment.jitter.ms": L, "segment.index.bytes": INT, "flush.messages": L,
    "flush.ms": L, "retention.bytes": L, "retention.ms": L, "max.message.bytes": INT, "index.interval.bytes": INT,
    "delete.retention.ms": L, "min.compaction.lag.ms": L, "max.compaction.lag.ms": L, "file.delete.delay.ms": L,
    "min.cleanable.dirty.ratio": D, "cleanup.policy": LS, "unclean.leader.election.enable": B,
    "min.insync.replicas": INT, "compression.type": S, "preallocate": B, "message.format.version": S,
    "message.timestamp.type": S, "message.timestamp.difference.max.ms": L,
    "leader.replication.throttled.replicas": LS, "follower.replication.throttled.replicas": LS,
    "message.downconversion.enable": B,
}

# Broker keys whose Kafka type is not the one their parsed value suggests (an int that is a LONG or a SHORT, a
# secret, a comma list Kafka keeps as a STRING), and the log.* keys, whose typed values live in LogConfig.
_BROKER_TYPES: dict[str, ConfigType] = {
    "log.dirs": S, "connections.max.idle.ms": L, "offsets.retention.check.interval.ms": L,
    "offsets.topic.replication.factor": SH, "transaction.state.log.replication.factor": SH,
    "log.retention.check.interval.ms": L, "log.flush.scheduler.interval.ms": L, "replica.lag.time.max.ms": L,
    "leader.imbalance.check.interval.seconds": L, "controlled.shutdown.retry.backoff.ms": L,
    "connections.max.reauth.ms": L, "leader.replication.throttled.rate": L, "follower.replication.throttled.rate": L,
    "replica.alter.log.dirs.io.max.bytes.per.second": L, "offsets.zookeeper.mirror.interval.ms": L,
    "sasl.jaas.config": P, "ssl.keystore.password": P, "ssl.key.password": P, "ssl.truststore.password": P,
    "ssl.keystore.key": P, "ssl.keystore.certificate.chain": P, "ssl.truststore.certificates": P,
    # keys kbroker accepts without using them: listed only when set
    "num.recovery.threads.per.data.dir": INT, "num.replica.fetchers": INT, "log.cleaner.threads": INT,
    "queued.max.requests": INT, "background.threads": INT, "inter.broker.protocol.version": S,
    "zookeeper.set.acl": B, "zookeeper.max.in.flight.requests": INT, "log.cleaner.dedupe.buffer.size": L,
    "fetch.purgatory.purge.interval.requests": INT, "producer.purgatory.purge.interval.requests": INT,
    # dynamic keys Kafka declares that kbroker stores without using (a key of no known type would be answered as
    # sensitive, and kafka-configs.sh --alter then asks for its value again: "All sensitive broker config entries
    # must be specified")
    "log.cleaner.io.buffer.load.factor": D, "log.cleaner.io.buffer.size": INT, "max.connection.creation.rate": INT,
    "metric.reporters": LS, "principal.builder.class": ConfigType.CLASS, "sasl.kerberos.kinit.cmd": S,
    "sasl.kerberos.min.time.before.relogin": L, "sasl.kerberos.principal.to.local.rules": LS,
    "sasl.kerberos.service.name": S, "sasl.kerberos.ticket.renew.jitter": D,
    "sasl.kerberos.ticket.renew.window.factor": D, "sasl.login.refresh.buffer.seconds": SH,
    "sasl.login.refresh.min.period.seconds": SH, "sasl.login.refresh.window.factor": D,
    "sasl.login.refresh.window.jitter": D, "ssl.engine.factory.class": ConfigType.CLASS,
    "ssl.keymanager.algorithm": S, "ssl.provider": S, "ssl.secure.random.implementation": S,
    "ssl.trustmanager.algorithm": S,
    # the broker defaults of the topic keys
    "log.segment.bytes": INT, "log.roll.ms": L, "log.roll.hours": INT, "log.roll.jitter.ms": L,
    "log.roll.jitter.hours": INT,
    "log.retention.ms": L, "log.retention.minutes": INT, "log.retention.hours": INT, "log.retention.bytes": L,
    "log.index.size.max.bytes": INT, "log.index.interval.bytes": INT, "log.flush.interval.messages": L,
    "log.flush.interval.ms": L, "log.message.timestamp.type": S, "message.max.bytes": INT,
    "log.segment.delete.delay.ms": L, "log.cleanup.policy": LS, "min.insync.replicas": INT,
    "unclean.leader.election.enable": B, "compression.type": S, "log.message.timestamp.difference.max.ms": L,
    "log.cleaner.min.cleanable.ratio": D, "log.cleaner.delete.retention.ms": L,
    "log.cleaner.min.compaction.lag.ms": L, "log.cleaner.max.compaction.lag.ms": L, "log.cleaner.enable": B,
    "log.cleaner.backoff.ms": L, "log.preallocate": B, "log.message.format.version": S,
    "log.message.downconversion.enable": B,
}


def _type_of_value(value: Any) -> ConfigType:
    if isinstance(value, bool):
        return B
    if isinstance(value, int):
        return INT
    if isinstance(value, float):
        return D
    if isinstance(value, list):
        return LS
    return S


BROKER_TYPES: dict[str, ConfigType] = {d.key: _type_of_value(d.default) for d in DEFS} | _BROKER_TYPES

# Kafka's ListenerConfigRegex, and the keys a listener sets per SASL mechanism (listener.name.<l>.<mech>.<key>).
_LISTENER_OVERRIDE = re.compile(r"listener\.name\.[^.]*\.(.*)")
_MECHANISM_CONFIGS = ("sasl.jaas.config", "sasl.login.callback.handler.class", "sasl.login.class",
                      "sasl.server.callback.handler.class")


def broker_synonyms(name: str) -> list[str]:
    """Kafka's ``brokerConfigSynonyms(name, matchListenerOverride = true)``: the keys that may set ``name``'s
    value, most specific first."""
    for group in (("log.roll.ms", "log.roll.hours"), ("log.roll.jitter.ms", "log.roll.jitter.hours"),
                  ("log.retention.ms", "log.retention.minutes", "log.retention.hours")):
        if name in group:
            return list(group)
    if name == "log.flush.interval.ms":  # log.flush.scheduler.interval.ms is its default
        return [name, "log.flush.scheduler.interval.ms"]
    match = _LISTENER_OVERRIDE.fullmatch(name)
    if match:
        base = match.group(1)
        return [name, next((m for m in _MECHANISM_CONFIGS if base.endswith(m)), base)]
    return [name]


def broker_type(name: str) -> ConfigType:
    """The key's type; a listener override has its base key's. UNKNOWN for a key Kafka does not declare."""
    for synonym in (name, *broker_synonyms(name)):
        if synonym in BROKER_TYPES:
            return BROKER_TYPES[synonym]
    return ConfigType.UNKNOWN


def is_sensitive(config_type: ConfigType) -> bool:
    """Kafka's maybeSensitive: a password, or a key of unknown type (it might hold one)."""
    return config_type in (ConfigType.PASSWORD, ConfigType.UNKNOWN)


# The broker key behind each topic key (Kafka's LogConfig.TopicConfigSynonyms): the first broker key declared.
TOPIC_SYNONYMS: dict[str, str] = {k.topic_key: k.broker_keys[0] for k in LOG_KEYS if k.topic_key and k.broker_keys}

# Broker keys Kafka 2.8 can change without a restart (DynamicBrokerConfig.AllDynamicConfigs): DescribeConfigs
# answers them read_only=false, every other broker key read_only=true. The replication throttle rates are
# DynamicConfig.Broker's own keys, not in AllDynamicConfigs: Kafka answers them read-only though they change.
DYNAMIC_BROKER_KEYS: frozenset[str] = ALL_DYNAMIC_KEYS - REPLICATION_QUOTA_KEYS

# Broker keys whose Kafka default is null: unset, DescribeConfigs answers them null with no DEFAULT_CONFIG synonym
# (kbroker's "" stands for "not set" there, e.g. advertised.listeners falls back to listeners).
NULL_DEFAULT_KEYS: frozenset[str] = frozenset({
    "advertised.listeners", "log.dirs", "broker.rack", "inter.broker.listener.name", "zookeeper.connect",
    "sasl.jaas.config", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.truststore.location", "ssl.truststore.password", "ssl.keystore.certificate.chain", "ssl.keystore.key",
    "ssl.truststore.certificates",
})


def kafka_string(value: Any) -> str:
    """A typed value as Kafka's ConfigDef.convertToString writes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return java_double(value)
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)


def _log_broker_defaults() -> dict[str, str]:
    """The log.* keys' defaults: on the coarsest key of a group (log.retention.hours=168; log.retention.ms and
    log.retention.minutes have none), as KafkaConfig declares them."""
    out = {}
    for key in LOG_KEYS:
        if not key.broker_keys:
            continue
        last, scale = key.broker_keys[-1], (key.broker_scale[-1] if key.broker_scale else 1)
        default = key.default // scale if scale != 1 else key.default
        out[last] = kafka_string(default)
    out.pop("log.flush.interval.ms", None)  # null: log.flush.scheduler.interval.ms stands in
    return out


# Kafka's staticDefaultConfigs: every broker key with a non-null default, as a string.
BROKER_DEFAULTS: dict[str, str] = {
    d.key: kafka_string(d.default) for d in DEFS if d.key not in NULL_DEFAULT_KEYS} | _log_broker_defaults()

_BROKER_DOCS = {d.key: d.doc for d in DEFS if d.doc}
_TOPIC_DOCS = {k.topic_key: k.doc for k in LOG_KEYS if k.topic_key and k.doc}


def _log_broker_docs() -> dict[str, str]:
    out = {}
    for key in LOG_KEYS:
        units = ("", " (in minutes)", " (in hours)") if len(key.broker_keys) == 3 else ("", " (in hours)")
        for i, broker_key in enumerate(key.broker_keys):
            unit = units[i] if len(key.broker_keys) > 1 else ""
            where = f"; the default of topic config {key.topic_key}" if key.topic_key else ""
            out[broker_key] = f"{key.doc}{unit}{where}"
    return out


_BROKER_DOCS = _log_broker_docs() | _BROKER_DOCS


def broker_doc(name: str) -> str | None:
    return _BROKER_DOCS.get(name)


def topic_doc(name: str) -> str | None:
    return _TOPIC_DOCS.get(name)

