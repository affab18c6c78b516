"""Dynamic broker configs (Kafka's KIP-226): the layers of a broker's configuration and its current value.

Kafka keeps broker configs changed at run time in ZooKeeper, per broker at ``/config/brokers/<id>`` and for every
broker at ``/config/brokers/<default>``. The value a broker runs with is, key by key, the first layer that sets it:

    DYNAMIC_BROKER_CONFIG (per broker) > DYNAMIC_DEFAULT_BROKER_CONFIG > STATIC_BROKER_CONFIG > DEFAULT_CONFIG

This module holds the layers and the resulting typed ``BrokerConfig`` (``current``); it knows nothing of ZooKeeper.
Whoever reads the znodes calls ``update`` (or ``apply_entity`` with the entity path of a change notice); the parts
that apply a change at run time subscribe with ``subscribe`` and get the new config and the names of the keys whose
effective value changed. ``update`` runs on the broker's event loop (``apply_entity`` hops there with
``call_soon_threadsafe`` when called from the store's thread), so subscribers may touch loop-owned state directly.

Which keys may change at run time, and at which level, is Kafka 2.8's (apache/kafka
``core/src/main/scala/kafka/server/DynamicBrokerConfig.scala``, ``DynamicConfig.scala``): ``validate`` refuses the
rest with Kafka's messages before anything is written.
"""
from __future__ import annotations

import asyncio
import logging
import re
import threading
from collections.abc import Callable, Iterable, Mapping

from kbroker.config.broker import BrokerConfig, build_config, declared_keys, key_definition

log = logging.getLogger(__name__)

PER_BROKER_SOURCE = "/config/brokers/{id}"
DEFAULT_SOURCE = "/config/brokers/<default>"
DEFAULT_ENTITY = "<default>"

# (new config, keys whose effective value changed)
Subscriber = Callable[[BrokerConfig, frozenset[str]], None]
# (the config an alter would give, keys it changes): raises ValueError with the reason to refuse it
Validator = Callable[[BrokerConfig, frozenset[str]], None]

# -- Kafka 2.8's dynamic keys ---------------------------------------------------------------------------------
# SslConfigs.RECONFIGURABLE_CONFIGS: only per listener (listener.name.<l>.<key>), only per broker
SECURITY_KEYS = frozenset({
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password",
    "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.truststore.certificates"})
# DynamicListenerConfig.ReconfigurableConfigs
LISTENER_KEYS = frozenset({
    "advertised.listeners", "listeners", "listener.security.protocol.map",
    "principal.builder.class", "ssl.protocol", "ssl.provider", "ssl.cipher.suites", "ssl.enabled.protocols",
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password", "ssl.keymanager.algorithm",
    "ssl.trustmanager.algorithm", "ssl.endpoint.identification.algorithm", "ssl.secure.random.implementation",
    "ssl.client.auth", "ssl.engine.factory.class",
    "sasl.mechanism.inter.broker.protocol", "sasl.jaas.config", "sasl.enabled.mechanisms",
    "sasl.kerberos.service.name", "sasl.kerberos.kinit.cmd", "sasl.kerberos.ticket.renew.window.factor",
    "sasl.kerberos.ticket.renew.jitter", "sasl.kerberos.min.time.before.relogin",
    "sasl.kerberos.principal.to.local.rules", "sasl.login.refresh.window.factor", "sasl.login.refresh.window.jitter",
    "sasl.login.refresh.min.period.seconds", "sasl.login.refresh.buffer.seconds",
    "max.connections", "max.connection.creation.rate"})
CLUSTER_LEVEL_LISTENER_KEYS = frozenset({"max.connections", "max.connection.creation.rate"})
# LogCleaner.ReconfigurableConfigs
CLEANER_KEYS = frozenset({
    "log.cleaner.threads", "log.cleaner.dedupe.buffer.size", "log.cleaner.io.buffer.load.factor",
    "log.cleaner.io.buffer.size", "message.max.bytes", "log.cleaner.io.max.bytes.per.second",
    "log.cleaner.backoff.ms"})
# DynamicLogConfig.ReconfigurableConfigs: the broker synonym of every topic config (LogConfig.TopicConfigSynonyms,
# whose broker names are the finest unit: log.retention.ms, not .hours), less the message format version
LOG_DEFAULT_KEYS = frozenset({
    "log.segment.bytes", "log.roll.ms", "log.roll.jitter.ms", "log.index.size.max.bytes",
    "log.flush.interval.messages", "log.flush.interval.ms", "log.retention.bytes", "log.retention.ms",
    "message.max.bytes", "log.index.interval.bytes", "log.cleaner.delete.retention.ms",
    "log.cleaner.min.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms", "log.segment.delete.delay.ms",
    "log.cleaner.min.cleanable.ratio", "log.cleanup.policy", "unclean.leader.election.enable",
    "min.insync.replicas", "compression.type", "log.preallocate", "log.message.timestamp.type",
    "log.message.timestamp.difference.max.ms", "log.message.downconversion.enable"})
# DynamicThreadPool.ReconfigurableConfigs, SocketServer.ReconfigurableConfigs, DynamicConfig.Broker's own keys
THREAD_POOL_KEYS = frozenset({"num.io.threads", "num.network.threads", "num.replica.fetchers",
                              "num.recovery.threads.per.data.dir", "background.threads"})
SOCKET_SERVER_KEYS = frozenset({"max.connections.per.ip", "max.connections.per.ip.overrides", "max.connections",
                                "max.connection.creation.rate"})
REPLICATION_QUOTA_KEYS = frozenset({"leader.replication.throttled.rate", "follower.replication.throttled.rate",
                                    "replica.alter.log.dirs.io.max.bytes.per.second"})
ALL_DYNAMIC_KEYS = (SECURITY_KEYS | CLEANER_KEYS | LOG_DEFAULT_KEYS | THREAD_POOL_KEYS | {"metric.reporters"}
                    | LISTENER_KEYS | SOCKET_SERVER_KEYS | REPLICATION_QUOTA_KEYS)
PER_BROKER_KEYS = (SECURITY_KEYS | LISTENER_KEYS) - CLUSTER_LEVEL_LISTENER_KEYS
# Kafka broker keys this broker knows (KafkaConfig.configNames, as far as they are declared here): any of them not
# dynamic is refused; a key Kafka does not know is stored as it is (Kafka allows custom keys).
KNOWN_KEYS = declared_keys() | {
    "log.message.format.version", "zookeeper.set.acl", "password.encoder.secret", "inter.broker.protocol.version",
    "reserved.broker.max.id", "broker.id.generation.enable", "control.plane.listener.name", "log.roll.hours",
    "log.retention.hours", "log.retention.minutes", "log.roll.jitter.hours"}
NON_DYNAMIC_KEYS = KNOWN_KEYS - ALL_DYNAMIC_KEYS

# ConfigDef.Type.LIST among them: IncrementalAlterConfigs may APPEND to and SUBTRACT from these only
LIST_KEYS = frozenset({"log.cleanup.policy", "ssl.cipher.suites", "ssl.enabled.protocols", "sasl.enabled.mechanisms",
                       "metric.reporters", "sasl.kerberos.principal.to.local.rules"})

_LISTENER_KEY = re.compile(r"listener\.name\.[^.]*\.(.*)")
# ConfigDef types of the numeric dynamic keys that are not INT, for Kafka's "Not a number of type ..." message
_LONG_KEYS = frozenset({
    "log.retention.ms", "log.retention.bytes", "log.roll.ms", "log.roll.jitter.ms", "log.flush.interval.messages",
    "log.flush.interval.ms", "log.segment.delete.delay.ms", "log.cleaner.delete.retention.ms",
    "log.cleaner.min.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms",
    "log.message.timestamp.difference.max.ms", "log.cleaner.dedupe.buffer.size", "log.cleaner.backoff.ms",
    "sasl.kerberos.min.time.before.relogin"} | REPLICATION_QUOTA_KEYS)
_DOUBLE_KEYS = frozenset({"log.cleaner.min.cleanable.ratio", "log.cleaner.io.max.bytes.per.second",
                          "log.cleaner.io.buffer.load.factor"})


class DynamicConfigError(ValueError):
    """A dynamic config Kafka refuses (its ConfigException): the message is Kafka's."""


class PasswordConfigError(DynamicConfigError):
    """A password config to write (Kafka stores them encrypted with password.encoder.secret)."""


def base_name(key: str) -> str:
    """``listener.name.<l>.<key>`` -> ``<key>``; other keys unchanged."""
    found = _LISTENER_KEY.fullmatch(key)
    return found.group(1) if found else key


def is_listener_keystore(key: str) -> bool:
    """``listener.name.<l>.ssl.keystore.location`` and the other keys of a listener's key material."""
    return key != base_name(key) and base_name(key) in SECURITY_KEYS


def default_text(key: str) -> str:
    """A key's default as Kafka writes it (a list comma-separated); "" when not declared here."""
    found = key_definition(base_name(key))
    if found is None:
        return ""
    value = found[0]
    if isinstance(value, list):
        return ",".join(map(str, value))
    return str(value).lower() if isinstance(value, bool) else str(value)


def hide_passwords(text: str, props: Mapping[str, str]) -> str:
    """``text`` (an error to log) with the value of every password key of ``props`` hidden, as Kafka never logs them."""
    for key, value in props.items():
        if value and is_password(key):
            text = text.replace(value, "[hidden]")
    return text


def is_password(key: str) -> bool:
    """Kafka's PASSWORD-typed keys (stored encrypted; never shown)."""
    name = base_name(key)
    return (name.endswith(".password") or name in ("sasl.jaas.config", "ssl.keystore.key",
                                                    "ssl.keystore.certificate.chain", "ssl.truststore.certificates")
            or name.endswith(".sasl.jaas.config"))


def _set(keys: Iterable[str]) -> str:
    """A Scala Set's toString, as Kafka's messages show it."""
    return "Set(" + ", ".join(sorted(keys)) + ")"


def check_keys(props: Mapping[str, str], per_broker: bool) -> None:
    """DynamicBrokerConfig.validateConfigs' key checks, in Kafka's order, with its messages."""
    keys = set(props)
    non_dynamic = keys & NON_DYNAMIC_KEYS
    if non_dynamic:
        raise DynamicConfigError(f"Cannot update these configs dynamically: {_set(non_dynamic)}")
    bare_security = keys & SECURITY_KEYS
    if bare_security:
        raise DynamicConfigError("These security configs can be dynamically updated only per-listener using the "
                                 f"listener prefix: {_set(bare_security)}")
    for key, value in props.items():
        check_value(key, value)
    if not per_broker:
        per_broker_only = (keys & PER_BROKER_KEYS) | {
            k for k in keys if _LISTENER_KEY.fullmatch(k) and base_name(k) not in CLUSTER_LEVEL_LISTENER_KEYS}
        if per_broker_only:
            raise DynamicConfigError("Cannot update these configs at default cluster level, broker id must be "
                                     f"specified: {_set(per_broker_only)}")


def check_value(key: str, value: str) -> None:
    """The value's type and bounds as Kafka's ConfigDef checks them (listener-prefixed keys by their base name);
    keys this broker does not declare are taken as they are."""
    name = base_name(key)
    definition = key_definition(name)
    if definition is None:
        return
    try:
        build_config({name: (value, name)})
        return
    except ValueError:
        pass
    default, rule = definition
    text = value.strip()
    if isinstance(default, bool):
        reason = "Expected value to be either true or false"
    elif isinstance(default, (int, float)):
        kind = "DOUBLE" if name in _DOUBLE_KEYS or isinstance(default, float) else \
            "LONG" if name in _LONG_KEYS else "INT"
        try:
            float(text) if kind == "DOUBLE" else int(text)
        except ValueError:
            reason = f"Not a number of type {kind}"
        else:
            bound = re.search(r">= (-?[0-9.]+)", rule)
            reason = f"Value must be at least {bound.group(1)}" if bound else f"Expected {rule}"
    else:
        reason = f"Expected {rule}" if rule else "Invalid value"
    raise DynamicConfigError(f"Invalid value {value} for configuration {name}: {reason}")


def usable(props: Mapping[str, str], per_broker: bool, where: str) -> dict[str, str]:
    """A layer as read from ZooKeeper less what Kafka ignores there (removeInvalidConfigs): non-dynamic keys,
    security keys without a listener prefix, per-broker keys at the default level, malformed values."""
    out = {}
    for key, value in props.items():
        try:
            check_keys({key: value}, per_broker)
        except DynamicConfigError as exc:
            log.error("%s: %s is ignored: %s", where, key, hide_passwords(str(exc), {key: value}))
            continue
        out[key] = value
    return out


class DynamicBrokerConfig:
    """The static config (server.properties and --override) under the two dynamic layers."""

    def __init__(self, static: BrokerConfig, broker_id: int) -> None:
        self.static = static
        self.broker_id = broker_id
        self.per_broker: dict[str, str] = {}       # /config/brokers/<id>
        self.cluster_default: dict[str, str] = {}  # /config/brokers/<default>
        self.current = static
        self._subscribers: list[Subscriber] = []
        self._validators: list[Validator] = []
        self._lock = threading.RLock()
        try:  # the loop update() runs on (None outside one: callers are then on the owner's thread)
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None

    @property
    def static_values(self) -> dict[str, str]:
        """The keys server.properties (or --override) set, as written."""
        return dict(self.static.raw)

    def subscribe(self, subscriber: Subscriber) -> None:
        self._subscribers.append(subscriber)

    def add_validator(self, validator: Validator) -> None:
        """A part's check of a change before it is written (Kafka's validateReconfiguration)."""
        self._validators.append(validator)

    def reconfigurable(self, check: Validator, apply: Subscriber) -> None:
        """A part that checks a change before it is written and applies it after (Kafka's BrokerReconfigurable)."""
        self.add_validator(check)
        self.subscribe(apply)

    # -- the write path: validate, then the store's notices come back through apply_entity -------------------

    def validate(self, props: Mapping[str, str], per_broker: bool, reloaded: Iterable[str] = ()) -> None:
        """A new layer (per broker, or the cluster default) as Kafka's DynamicBrokerConfig.validate checks it:
        the keys, their values, the config the layers would give and each part's own check (``reloaded``: keys
        whose files are read again though their values stay). Raises DynamicConfigError with Kafka's message."""
        check_keys(props, per_broker)
        mine, default = (props, None) if per_broker else (None, props)
        try:
            new = self.build(mine, default)
        except ValueError as exc:
            raise DynamicConfigError(str(exc)) from None
        changed = self._changed(self.effective_raw(), self.effective_raw(mine, default)) | frozenset(reloaded)
        self._check_cleaner_threads(new)
        for validator in self._validators:
            try:
                validator(new, changed)
            except ValueError as exc:
                raise DynamicConfigError(str(exc)) from None

    def _check_cleaner_threads(self, new: BrokerConfig) -> None:
        """LogCleaner.validateReconfiguration: at least one, at most double, at least half the current."""
        threads, current = new.log_cleaner_threads, self.current.log_cleaner_threads
        if threads == current:
            return
        if threads < 1:
            raise DynamicConfigError("Log cleaner threads should be at least 1")
        if threads < current // 2:
            raise DynamicConfigError(f"Log cleaner threads cannot be reduced to less than half the current value "
                                     f"{current}")
        if threads > current * 2:
            raise DynamicConfigError(f"Log cleaner threads cannot be increased to more than double the current "
                                     f"value {current}")

    @staticmethod
    def persistent(props: Mapping[str, str], per_broker: bool) -> dict[str, str]:
        """What goes into the znode (toPersistentProps). Kafka stores password configs encrypted with
        password.encoder.secret, which this broker does not implement: they are refused as Kafka refuses
        them without a secret."""
        passwords = [k for k in props if is_password(k)]
        if passwords:
            if not per_broker:
                raise PasswordConfigError("Password config can be defined only at broker level")
            raise PasswordConfigError("Password encoder secret not configured")
        return dict(props)

    def apply_entity(self, entity: str, configs: Mapping[str, str]) -> None:
        """A ``brokers/<id>`` or ``brokers/<default>`` entity as (re)read from the store (BrokerConfigHandler):
        this broker's own layer or the cluster default; another broker's is none of its business. Callable from
        any thread: the update runs on the loop."""
        kind, _, name = entity.partition("/")
        if kind != "brokers":
            return
        if name == DEFAULT_ENTITY:
            layer = usable(configs, False, DEFAULT_SOURCE)
            self._on_loop(lambda: self.update(cluster_default=layer))
        elif name.strip() == str(self.broker_id):
            layer = usable(configs, True, PER_BROKER_SOURCE.format(id=self.broker_id))
            self._on_loop(lambda: self.update(per_broker=layer))

    def reload_files(self, keys: Iterable[str]) -> None:
        """Tell the subscribers these keys changed though their values did not: an alter naming the same
        keystore file again makes the broker read the file again (reloadUpdatedFilesWithoutConfigChange)."""
        changed = frozenset(keys)
        if changed:
            self._notify(self.current, changed)

    def _on_loop(self, fn: Callable[[], object]) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            fn()
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            fn()
        else:
            loop.call_soon_threadsafe(fn)

    @staticmethod
    def _changed(old: Mapping[str, tuple[str, str]], new: Mapping[str, tuple[str, str]]) -> frozenset[str]:
        """Keys set in one and not the other, or to another value (where they come from aside)."""
        before, after = ({k: v for k, (v, _) in raw.items()} for raw in (old, new))
        return frozenset(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))

    def effective_raw(self, per_broker: Mapping[str, str] | None = None,
                      cluster_default: Mapping[str, str] | None = None) -> dict[str, tuple[str, str]]:
        """Every set key -> (value, where it came from), the higher layers over the lower."""
        raw = {k: (v, "server.properties") for k, v in self.static.raw.items()}
        default = self.cluster_default if cluster_default is None else cluster_default
        mine = self.per_broker if per_broker is None else per_broker
        raw.update({k: (v, DEFAULT_SOURCE) for k, v in default.items()})
        raw.update({k: (v, PER_BROKER_SOURCE.format(id=self.broker_id)) for k, v in mine.items()})
        return raw

    def build(self, per_broker: Mapping[str, str] | None = None,
              cluster_default: Mapping[str, str] | None = None) -> BrokerConfig:
        """The config these layers give (ConfigError if a value is malformed): validation before a write."""
        return build_config(self.effective_raw(per_broker, cluster_default))

    def update(self, per_broker: Mapping[str, str] | None = None,
               cluster_default: Mapping[str, str] | None = None) -> frozenset[str]:
        """New contents of one or both dynamic layers (None: unchanged). Rebuilds ``current`` and tells the
        subscribers which keys changed. A layer that does not parse is refused whole (logged, old config kept)."""
        with self._lock:
            new_mine = dict(self.per_broker if per_broker is None else per_broker)
            new_default = dict(self.cluster_default if cluster_default is None else cluster_default)
            try:
                new = self.build(new_mine, new_default)
            except ValueError as exc:
                log.error("dynamic broker configs refused, keeping the current ones: %s",
                          hide_passwords(str(exc), {**new_default, **new_mine}))
                return frozenset()
            old_raw = self.effective_raw()
            self.per_broker, self.cluster_default = new_mine, new_default
            changed = self._changed(old_raw, self.effective_raw())
            self.current = new
        if changed:
            log.info("broker %d: dynamic configs changed: %s", self.broker_id, ", ".join(sorted(changed)))
            self._notify(new, changed)
        return changed

    def _notify(self, new: BrokerConfig, changed: frozenset[str]) -> None:
        for subscriber in self._subscribers:
            try:
                subscriber(new, changed)
            except Exception:
                log.exception("applying dynamic broker configs %s failed", sorted(changed))
