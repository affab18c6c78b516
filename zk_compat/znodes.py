"""Kafka's ZooKeeper layout (ZooKeeper mode, Kafka 2.x): one class per znode, named after the path.

Each class has ``path(...)``; those that carry data also have ``encode(...) -> bytes`` and
``decode(...)``, which returns one of the small dataclasses below. The facts (paths, JSON keys,
versions, which values are strings) are Kafka's (apache/kafka
``core/src/main/scala/kafka/zk/ZkData.scala``).

Encoding produces the bytes Kafka 2.8 writes, including key order: Jackson walks Scala/Java hash
maps, so the order on disk is a hash order, which ``_jvm_order`` reproduces for the Scala 2.13
build (see there for what was checked against real clusters). Compact JSON, 64-bit values as
decimal strings, ``/controller`` in its 2.x form (``"version":1``).

Decoding accepts what any Kafka 2.x (and the 0.8-1.x versions still found in old clusters)
wrote, in any key order, and raises ``ValueError`` naming the znode on anything else.

Topic-partitions are plain ``(topic, partition)`` tuples; ``kbroker.log.names.TopicPartition``
is a NamedTuple and compares equal to them.

One module, as Kafka's ZkData.scala is one file: the znode classes share the JSON helpers and the JVM
key order above, and the layout is checked as a whole against Kafka's (a path next to its neighbours).
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote_plus

from zk_compat import _json
from zk_compat._jvm_order import (
    java_hashmap_order,
    java_properties_order,
    scala_immutable_map_order,
    scala_mutable_map_order,
)

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1

# Kafka's SecurityProtocol names, the listener map used when a v2/v3 registration has none.
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")

# Entity types under /config (Kafka's ConfigType.ALL) and the name of the default entity.
CONFIG_ENTITY_TYPES = ("topics", "clients", "users", "brokers", "ips")
DEFAULT_CONFIG_ENTITY = "<default>"


# ---------------------------------------------------------------------------------------------
# decoding helpers

def _name(kind: str, value: str) -> str:
    """A path segment taken from a caller (topic, group, ...): refuse what would change the path."""
    if not isinstance(value, str) or not value or "/" in value or value in (".", "..") or "\x00" in value:
        raise ValueError(f"invalid {kind} for a znode path: {value!r}")
    return value


def _object(data: bytes | None, path: str) -> dict[str, Any]:
    if not data:
        raise ValueError(f"{path}: the znode has no data, expected a JSON object")
    js = _json.loads(data, path)
    if not isinstance(js, dict):
        raise ValueError(f"{path}: expected a JSON object, got {_json._preview(data)}")
    return js


def _bad(path: str, key: str, what: str, value: Any) -> ValueError:
    return ValueError(f"{path}: {key!r} must be {what}, got {value!r}")


def _absent(path: str, key: str, default: Any) -> Any:
    """What a reader below returns for a missing key: its ``default``, or (``...``: the key is
    required) a ValueError."""
    if default is ...:
        raise ValueError(f"{path}: missing {key!r}")
    return default


def _int(obj: Mapping[str, Any], key: str, path: str, default: Any = ..., *,
         lo: int = INT32_MIN, hi: int = INT32_MAX) -> Any:
    if key not in obj:
        return _absent(path, key, default)
    value = obj[key]
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise _bad(path, key, "an integer" if hi == INT32_MAX else f"an integer in [{lo}, {hi}]", value)
    return value


def _long_text(obj: Mapping[str, Any], key: str, path: str, default: Any = ...) -> Any:
    """A 64-bit value Kafka writes as a decimal string (older writers: a number)."""
    if key not in obj:
        return _absent(path, key, default)
    value = obj[key]
    if isinstance(value, str) and _DECIMAL.fullmatch(value):
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not INT64_MIN <= value <= INT64_MAX:
        raise _bad(path, key, "a 64-bit decimal string", obj[key])
    return value


def _str(obj: Mapping[str, Any], key: str, path: str, default: Any = ..., *, nullable: bool = False) -> Any:
    if key not in obj:
        return _absent(path, key, default)
    value = obj[key]
    if value is None and nullable:
        return None
    if not isinstance(value, str):
        raise _bad(path, key, "a string", value)
    return value


def _int_list(value: Any, path: str, key: str) -> list[int]:
    if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) and INT32_MIN <= v <= INT32_MAX for v in value):
        raise _bad(path, key, "a list of integers", value)
    return list(value)


def _dict(obj: Mapping[str, Any], key: str, path: str, default: Any = ...) -> Any:
    if key not in obj:
        return _absent(path, key, default)
    value = obj[key]
    if not isinstance(value, dict):
        raise _bad(path, key, "a JSON object", value)
    return value


def _partition_key(key: str, path: str, where: str) -> int:
    if not _UNSIGNED.fullmatch(key) or int(key) > INT32_MAX:
        raise ValueError(f"{path}: partition id {key!r} in {where!r} is not a non-negative integer")
    return int(key)


def _topic_partitions(obj: Mapping[str, Any], path: str) -> list[tuple[str, int]]:
    """The ``"partitions":[{"topic":..,"partition":..}, ...]`` list of several admin znodes."""
    entries = obj.get("partitions")
    if not isinstance(entries, list):
        raise _bad(path, "partitions", "a list", entries)
    out: list[tuple[str, int]] = []
    for entry in entries:
        if not isinstance(entry, dict):
            raise _bad(path, "partitions", "a list of objects", entries)
        tp = (_str(entry, "topic", path), _int(entry, "partition", path))
        if tp not in out:
            out.append(tp)
    return out


def _tp_list(partitions: Iterable[tuple[str, int]]) -> list[dict[str, Any]]:
    # Map("topic" -> .., "partition" -> ..): two keys keep their order
    return [{"topic": topic, "partition": partition} for topic, partition in partitions]


def _mutable_map_json(values: dict[str, Any], *, initial: int) -> bytes:
    """``values`` as Jackson writes the Scala ``mutable.Map`` Kafka builds from the first
    ``initial`` entries and then grows with the others, one ``+=`` each: in its hash order."""
    keys = list(values)
    order = scala_mutable_map_order(keys[:initial], initial=initial, later=keys[initial:])
    return _json.dumps({k: values[k] for k in order})


_DECIMAL = re.compile(r"[+-]?[0-9]+", re.ASCII)
_UNSIGNED = re.compile(r"[0-9]+", re.ASCII)


def parse_sequence_number(name: str, prefix: str) -> int:
    """``config_change_0000000012`` -> 12 (a child name or a full path)."""
    base = name.rsplit("/", 1)[-1]
    if not base.startswith(prefix) or not _UNSIGNED.fullmatch(base[len(prefix):]):
        raise ValueError(f"{name!r} is not a {prefix}<sequence> znode")
    return int(base[len(prefix):])


def sanitize_entity_name(name: str) -> str:
    """Kafka's ``Sanitizer.sanitize`` for user and client-id names in config paths: URL-encode
    the UTF-8 bytes, keeping only ASCII letters, digits and ``._-`` (so ``*`` -> ``%2A`` and a
    space -> ``%20``). The default entity ``<default>`` is used literally, never sanitized."""
    out = []
    for byte in name.encode("utf-8"):
        ch = chr(byte)
        out.append(ch if ch.isascii() and (ch.isalnum() or ch in "._-") else f"%{byte:02X}")
    return "".join(out)


def desanitize_entity_name(name: str) -> str:
    """Kafka's ``Sanitizer.desanitize`` (``URLDecoder``: ``%XX`` sequences, and ``+`` as a space)."""
    return unquote_plus(name, encoding="utf-8", errors="strict")


# ---------------------------------------------------------------------------------------------
# znodes at fixed paths

class FixedPathZNode:
    """Base of the znode classes at one fixed path: ``PATH``, which ``path()`` returns like
    every znode class's ``path(...)``."""

    PATH = ""

    @classmethod
    def path(cls) -> str:
        return cls.PATH


# container znodes (null data)

class ContainerZNode:
    """A znode that only holds children, at a fixed path, with null data. Each is one instance
    below (``TopicsZNode.path()`` reads like any znode class's)."""

    __slots__ = ("_path",)

    def __init__(self, path: str) -> None:
        self._path = path

    def path(self) -> str:
        return self._path

    def __repr__(self) -> str:
        return f"ContainerZNode({self._path!r})"


BrokersZNode = ContainerZNode("/brokers")
BrokerIdsZNode = ContainerZNode("/brokers/ids")  # an ephemeral child per live broker
TopicsZNode = ContainerZNode("/brokers/topics")
ConfigZNode = ContainerZNode("/config")
AdminZNode = ContainerZNode("/admin")
ClusterZNode = ContainerZNode("/cluster")
DeleteTopicsZNode = ContainerZNode("/admin/delete_topics")  # a child per topic to delete
ConfigEntityChangeNotificationZNode = ContainerZNode("/config/changes")
IsrChangeNotificationZNode = ContainerZNode("/isr_change_notification")
LogDirEventNotificationZNode = ContainerZNode("/log_dir_event_notification")


class DeleteTopicZNode:
    """``/admin/delete_topics/<topic>``: its existence is the request; it has no data."""

    @staticmethod
    def path(topic: str) -> str:
        return f"/admin/delete_topics/{_name('topic', topic)}"


# ---------------------------------------------------------------------------------------------
# /controller, /controller_epoch

@dataclass(frozen=True)
class ControllerInfo:
    broker_id: int
    timestamp_ms: int | None = None


class ControllerZNode(FixedPathZNode):
    """Ephemeral ``/controller``: ``{"version":1,"brokerid":N,"timestamp":"<ms>"}`` (the 2.x form;
    Kafka 3.x writes version 2 with ``kraftControllerEpoch``, which we read but never write)."""

    PATH = "/controller"

    @staticmethod
    def encode(broker_id: int, timestamp_ms: int) -> bytes:
        return _json.dumps({"version": 1, "brokerid": broker_id, "timestamp": str(timestamp_ms)})

    @staticmethod
    def decode(data: bytes | None) -> ControllerInfo:
        path = ControllerZNode.path()
        text = bytes(data or b"").strip()
        if _DECIMAL.fullmatch(text.decode("ascii", "replace")):  # Kafka 0.8.0 wrote a bare id
            return ControllerInfo(_int({"brokerid": int(text)}, "brokerid", path))
        obj = _object(data, path)
        return ControllerInfo(_int(obj, "brokerid", path), _long_text(obj, "timestamp", path, None))


class ControllerEpochZNode(FixedPathZNode):
    """Persistent ``/controller_epoch``: the epoch as bare decimal text; its stat version fences
    every controller write."""

    PATH = "/controller_epoch"

    @staticmethod
    def encode(epoch: int) -> bytes:
        return str(epoch).encode("ascii")

    @staticmethod
    def decode(data: bytes | None) -> int:
        text = bytes(data or b"").decode("utf-8", "replace")
        if not _DECIMAL.fullmatch(text) or not INT32_MIN <= int(text) <= INT32_MAX:
            raise ValueError(f"/controller_epoch: expected a decimal epoch, got {text[:40]!r}")
        return int(text)


# ---------------------------------------------------------------------------------------------
# /brokers/ids/<id>

@dataclass(frozen=True)
class EndPoint:
    """One advertised listener. ``host`` None means "all interfaces" and is written empty."""

    listener_name: str
    host: str | None
    port: int
    security_protocol: str

    @property
    def connection_string(self) -> str:
        if self.host is None or self.host == "":
            hostport = f":{self.port}"
        elif ":" in self.host:
            hostport = f"[{self.host}]:{self.port}"
        else:
            hostport = f"{self.host}:{self.port}"
        return f"{self.listener_name}://{hostport}"

    _PATTERN = re.compile(r"^(.*)://\[?([0-9a-zA-Z\-%._:]*)\]?:(-?[0-9]+)$")

    @classmethod
    def parse(cls, text: str, protocol_map: Mapping[str, str]) -> EndPoint:
        """``LISTENER://host:port``, the security protocol looked up by listener name."""
        m = cls._PATTERN.match(text)
        if m is None:
            raise ValueError(f"unable to parse {text!r} as a broker endpoint")
        listener = m.group(1).upper()
        protocol = protocol_map.get(listener)
        if protocol is None:
            raise ValueError(f"no security protocol defined for listener {listener} in {text!r}")
        host = m.group(2) or None
        return cls(listener, host, int(m.group(3)), protocol)


@dataclass(frozen=True)
class BrokerInfo:
    """A broker registration. ``host``/``port`` are the first PLAINTEXT endpoint (None/-1 if
    there is none), kept at top level for old clients (KafkaOffsetMonitor, pykafka).
    ``features``: name -> (min_version, max_version), empty in 2.8."""

    id: int
    host: str | None
    port: int
    endpoints: tuple[EndPoint, ...]
    listener_security_protocol_map: dict[str, str]
    rack: str | None = None
    jmx_port: int = -1
    timestamp_ms: int | None = None
    version: int = 5
    features: dict[str, tuple[int, int]] = field(default_factory=dict)

    @classmethod
    def from_endpoints(cls, broker_id: int, endpoints: Sequence[EndPoint], *, timestamp_ms: int,
                       rack: str | None = None, jmx_port: int = -1, version: int = 5,
                       features: Mapping[str, tuple[int, int]] | None = None) -> BrokerInfo:
        """Derive ``host``/``port`` and the listener map from the endpoints, as Kafka does."""
        plaintext = next((e for e in endpoints if e.security_protocol == "PLAINTEXT"), None)
        return cls(
            id=broker_id,
            host=plaintext.host if plaintext else None,
            port=plaintext.port if plaintext else -1,
            endpoints=tuple(endpoints),
            listener_security_protocol_map={e.listener_name: e.security_protocol for e in endpoints},
            rack=rack, jmx_port=jmx_port, timestamp_ms=timestamp_ms, version=version,
            features=dict(features or {}),
        )


class BrokerIdZNode:
    """Ephemeral ``/brokers/ids/<id>``, JSON version 5 (IBP >= 2.7-IV0) or 4; reads 1-5."""

    @staticmethod
    def path(broker_id: int) -> str:
        return f"/brokers/ids/{int(broker_id)}"

    @staticmethod
    def encode(info: BrokerInfo) -> bytes:
        if info.version not in (2, 3, 4, 5):
            raise ValueError(f"cannot write broker registration version {info.version} (2-5 only)")
        if info.timestamp_ms is None:
            raise ValueError("a broker registration needs timestamp_ms")
        values: dict[str, Any] = {
            "version": info.version,
            "host": info.host,
            "port": info.port,
            "endpoints": [e.connection_string for e in info.endpoints],
            "jmx_port": info.jmx_port,
            "timestamp": str(info.timestamp_ms),
        }
        if info.rack is not None and info.version >= 3:
            values["rack"] = info.rack
        if info.version >= 4:
            names = [e.listener_name for e in info.endpoints]
            values["listener_security_protocol_map"] = {
                name: info.listener_security_protocol_map[name] for name in scala_immutable_map_order(names)}
        if info.version >= 5:
            values["features"] = {
                name: {"min_version": info.features[name][0], "max_version": info.features[name][1]}
                for name in java_hashmap_order(list(info.features))}
        return _mutable_map_json(values, initial=6)

    @staticmethod
    def decode(broker_id: int, data: bytes | None) -> BrokerInfo:
        path = BrokerIdZNode.path(broker_id)
        obj = _object(data, path)
        version = _int(obj, "version", path)
        jmx_port = _int(obj, "jmx_port", path)
        if version < 1:
            raise ValueError(f"{path}: unsupported broker registration version {version}")
        host = _str(obj, "host", path, None, nullable=True)
        port = _int(obj, "port", path, -1)
        if version == 1:
            if host is None or port < 0:
                raise ValueError(f"{path}: a version 1 registration needs host and port")
            endpoints: tuple[EndPoint, ...] = (EndPoint("PLAINTEXT", host, port, "PLAINTEXT"),)
            protocol_map = {"PLAINTEXT": "PLAINTEXT"}
        else:
            raw_map = _dict(obj, "listener_security_protocol_map", path, None)
            if raw_map is None:
                protocol_map = {p: p for p in SECURITY_PROTOCOLS}
            else:
                protocol_map = {}
                for k, v in raw_map.items():
                    if not isinstance(v, str):
                        raise _bad(path, "listener_security_protocol_map", "a map of strings", raw_map)
                    protocol_map[k.upper()] = v
            raw_endpoints = obj.get("endpoints")
            if not isinstance(raw_endpoints, list) or not all(isinstance(e, str) for e in raw_endpoints):
                raise _bad(path, "endpoints", "a list of strings", raw_endpoints)
            try:
                endpoints = tuple(EndPoint.parse(e, protocol_map) for e in raw_endpoints)
            except ValueError as exc:
                raise ValueError(f"{path}: {exc}") from None
            if raw_map is None:
                protocol_map = {e.listener_name: e.security_protocol for e in endpoints}
        rack = _str(obj, "rack", path, None, nullable=True)
        features: dict[str, tuple[int, int]] = {}
        for name, rng in _dict(obj, "features", path, {}).items():
            if not isinstance(rng, dict):
                raise _bad(path, "features", "a map of version ranges", rng)
            features[name] = (_int(rng, "min_version", path), _int(rng, "max_version", path))
        return BrokerInfo(
            id=int(broker_id), host=host, port=port, endpoints=endpoints,
            listener_security_protocol_map=protocol_map, rack=rack, jmx_port=jmx_port,
            timestamp_ms=_long_text(obj, "timestamp", path, None), version=version, features=features,
        )


class BrokerSequenceIdZNode(FixedPathZNode):
    """``/brokers/seqid``: no meaningful data; an unconditional write's new stat version,
    plus ``reserved.broker.max.id``, is a generated broker id."""

    PATH = "/brokers/seqid"

    @staticmethod
    def encode() -> bytes:
        return b""


# ---------------------------------------------------------------------------------------------
# /brokers/topics/<topic>[/partitions/<p>/state]

@dataclass(frozen=True)
class TopicAssignment:
    """``partitions``: partition -> replicas (preferred leader first). During a reassignment the
    list is target + original replicas and the moving ones are in ``adding_replicas`` /
    ``removing_replicas``. ``topic_id``: 22-character base64url UUID, or None."""

    partitions: dict[int, list[int]]
    adding_replicas: dict[int, list[int]] = field(default_factory=dict)
    removing_replicas: dict[int, list[int]] = field(default_factory=dict)
    topic_id: str | None = None
    version: int = 3


class TopicZNode:
    """``/brokers/topics/<topic>``: the replica assignment. Kafka 2.8 writes version 3 (with
    ``topic_id`` when the topic has one); versions 1 (<= 2.3) and 2 (2.4-2.7) are read."""

    @staticmethod
    def path(topic: str) -> str:
        return f"/brokers/topics/{_name('topic', topic)}"

    @staticmethod
    def _replica_map(replicas: Mapping[int, Sequence[int]]) -> dict[str, list[int]]:
        keys = [str(p) for p in replicas]
        by_key = {str(p): list(r) for p, r in replicas.items()}
        return {k: by_key[k] for k in scala_mutable_map_order(keys)}

    @staticmethod
    def encode(assignment: TopicAssignment) -> bytes:
        values: dict[str, Any] = {
            "version": 3,
            "partitions": TopicZNode._replica_map(assignment.partitions),
            "adding_replicas": TopicZNode._replica_map(
                {p: r for p, r in assignment.adding_replicas.items() if r}),
            "removing_replicas": TopicZNode._replica_map(
                {p: r for p, r in assignment.removing_replicas.items() if r}),
        }
        if assignment.topic_id is not None:
            values["topic_id"] = assignment.topic_id
        return _mutable_map_json(values, initial=4)

    @staticmethod
    def decode(topic: str, data: bytes | None) -> TopicAssignment:
        path = TopicZNode.path(topic)
        obj = _object(data, path)
        version = _int(obj, "version", path, 1)

        def replica_map(key: str) -> dict[int, list[int]]:
            raw = _dict(obj, key, path, {})
            return {_partition_key(p, path, key): _int_list(r, path, f"{key}.{p}") for p, r in raw.items()}

        partitions = dict(sorted(replica_map("partitions").items()))
        topic_id = _str(obj, "topic_id", path, None, nullable=True)
        if topic_id is not None and not _TOPIC_ID.fullmatch(topic_id):
            raise _bad(path, "topic_id", "a 22-character base64url id", topic_id)
        return TopicAssignment(partitions, replica_map("adding_replicas"), replica_map("removing_replicas"),
                               topic_id, version)


_TOPIC_ID = re.compile(r"[A-Za-z0-9_-]{22}", re.ASCII)


class TopicPartitionsZNode:
    @staticmethod
    def path(topic: str) -> str:
        return f"{TopicZNode.path(topic)}/partitions"


class TopicPartitionZNode:
    @staticmethod
    def path(topic: str, partition: int) -> str:
        return f"{TopicPartitionsZNode.path(topic)}/{int(partition)}"


@dataclass(frozen=True)
class PartitionState:
    """Leader and ISR of one partition; ``leader`` -1 means none. The znode's stat version is
    the zkVersion that travels in LeaderAndIsr and fences updates."""

    leader: int
    leader_epoch: int
    isr: list[int]
    controller_epoch: int


class TopicPartitionStateZNode:
    """``/brokers/topics/<t>/partitions/<p>/state``."""

    @staticmethod
    def path(topic: str, partition: int) -> str:
        return f"{TopicPartitionZNode.path(topic, partition)}/state"

    @staticmethod
    def encode(state: PartitionState) -> bytes:
        values = {"version": 1, "leader": state.leader, "leader_epoch": state.leader_epoch,
                  "controller_epoch": state.controller_epoch, "isr": list(state.isr)}
        return _json.dumps({k: values[k] for k in scala_immutable_map_order(list(values))})

    @staticmethod
    def decode(topic: str, partition: int, data: bytes | None) -> PartitionState:
        path = TopicPartitionStateZNode.path(topic, partition)
        obj = _object(data, path)
        if "isr" not in obj:
            raise ValueError(f"{path}: missing 'isr'")
        return PartitionState(
            leader=_int(obj, "leader", path),
            leader_epoch=_int(obj, "leader_epoch", path),
            isr=_int_list(obj["isr"], path, "isr"),
            controller_epoch=_int(obj, "controller_epoch", path),
        )


# ---------------------------------------------------------------------------------------------
# /config/<type>/<name> and /config/changes

class ConfigEntityTypeZNode:
    """``/config/<entity type>``: a container of the entities of one type."""

    @staticmethod
    def path(entity_type: str) -> str:
        return f"/config/{_name('config entity type', entity_type)}"


class ConfigEntityZNode:
    """``/config/<entity type>/<name>``: ``{"version":1,"config":{...}}``, all values strings.
    The name must already be in path form (``sanitize_entity_name`` for users and clients;
    ``users/<u>/clients/<c>`` is written as entity name ``<u>/clients/<c>``)."""

    @staticmethod
    def path(entity_type: str, entity_name: str) -> str:
        if entity_type not in CONFIG_ENTITY_TYPES:
            raise ValueError(f"unknown config entity type {entity_type!r}; one of {CONFIG_ENTITY_TYPES}")
        parts = entity_name.split("/")
        for part in parts:
            _name("config entity name", part)
        return f"/config/{entity_type}/{entity_name}"

    @staticmethod
    def encode(config: Mapping[str, str]) -> bytes:
        for k, v in config.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise TypeError(f"config entries must be str -> str, got {k!r}: {v!r}")
        ordered = {k: config[k] for k in java_properties_order(list(config))}
        return _json.dumps({"version": 1, "config": ordered})

    @staticmethod
    def decode(entity_type: str, entity_name: str, data: bytes | None) -> dict[str, str]:
        path = ConfigEntityZNode.path(entity_type, entity_name)
        if not data:
            return {}
        obj = _object(data, path)
        config = _dict(obj, "config", path, {})
        for k, v in config.items():
            if not isinstance(v, str):
                raise ValueError(f"{path}: config value of {k!r} must be a string, got {v!r}")
        return dict(config)


class ConfigEntityChangeNotificationSequenceZNode:
    """``/config/changes/config_change_<seq>``: ``{"version":2,"entity_path":"topics/foo"}``.
    Decoding also accepts version 1 (``entity_type`` + ``entity_name``, topics/clients only)
    and returns the entity path either way."""

    PREFIX = "config_change_"

    @staticmethod
    def create_path() -> str:
        return f"/config/changes/{ConfigEntityChangeNotificationSequenceZNode.PREFIX}"

    @staticmethod
    def encode(entity_path: str) -> bytes:
        return _json.dumps({"version": 2, "entity_path": entity_path})

    @staticmethod
    def decode(data: bytes | None, path: str = "/config/changes/config_change_") -> str:
        obj = _object(data, path)
        version = _int(obj, "version", path)
        if version == 1:
            entity_type = _str(obj, "entity_type", path)
            if entity_type not in ("topics", "clients"):
                raise ValueError(f"{path}: version 1 notifications only name topics or clients, got {entity_type!r}")
            return f"{entity_type}/{_str(obj, 'entity_name', path)}"
        if version == 2:
            entity_path: str = _str(obj, "entity_path", path)
            if "/" not in entity_path or entity_path.split("/", 1)[0] not in CONFIG_ENTITY_TYPES:
                raise _bad(path, "entity_path", "<entity type>/<name>", entity_path)
            return entity_path
        raise ValueError(f"{path}: unsupported config change notification version {version}")

    @staticmethod
    def sequence_number(name: str) -> int:
        return parse_sequence_number(name, ConfigEntityChangeNotificationSequenceZNode.PREFIX)


# ---------------------------------------------------------------------------------------------
# /admin/reassign_partitions, /admin/preferred_replica_election

class ReassignPartitionsZNode(FixedPathZNode):
    """``/admin/reassign_partitions`` (deprecated since 2.4, still served):
    ``{"version":1,"partitions":[{"topic":..,"partition":..,"replicas":[..]}]}``. Entries are
    written in the order given (Kafka's order there is that of a Scala map of TopicPartition)."""

    PATH = "/admin/reassign_partitions"

    @staticmethod
    def encode(reassignment: Mapping[tuple[str, int], Sequence[int]]) -> bytes:
        return _json.dumps({"version": 1, "partitions": [
            {"topic": topic, "partition": partition, "replicas": list(replicas)}
            for (topic, partition), replicas in reassignment.items()]})

    @staticmethod
    def decode(data: bytes | None) -> dict[tuple[str, int], list[int]]:
        path = ReassignPartitionsZNode.path()
        obj = _object(data, path)
        entries = obj.get("partitions")
        if not isinstance(entries, list):
            raise _bad(path, "partitions", "a list", entries)
        out: dict[tuple[str, int], list[int]] = {}
        for entry in entries:
            if not isinstance(entry, dict) or "replicas" not in entry:
                raise _bad(path, "partitions", "a list of {topic, partition, replicas}", entry)
            out[(_str(entry, "topic", path), _int(entry, "partition", path))] = \
                _int_list(entry["replicas"], path, "replicas")
        return out


class PreferredReplicaElectionZNode(FixedPathZNode):
    """``/admin/preferred_replica_election``: ``{"version":1,"partitions":[{"topic":..,"partition":..}]}``."""

    PATH = "/admin/preferred_replica_election"

    @staticmethod
    def encode(partitions: Iterable[tuple[str, int]]) -> bytes:
        return _json.dumps({"version": 1, "partitions": _tp_list(partitions)})

    @staticmethod
    def decode(data: bytes | None) -> list[tuple[str, int]]:
        path = PreferredReplicaElectionZNode.path()
        return _topic_partitions(_object(data, path), path)


# ---------------------------------------------------------------------------------------------
# notification sequences written by brokers

class IsrChangeNotificationSequenceZNode:
    """``/isr_change_notification/isr_change_<seq>`` (written by leaders only with IBP < 2.7-IV2)."""

    PREFIX = "isr_change_"

    @staticmethod
    def create_path() -> str:
        return f"/isr_change_notification/{IsrChangeNotificationSequenceZNode.PREFIX}"

    @staticmethod
    def encode(partitions: Iterable[tuple[str, int]]) -> bytes:
        return _json.dumps({"version": 1, "partitions": _tp_list(partitions)})

    @staticmethod
    def decode(data: bytes | None, path: str = "/isr_change_notification/isr_change_") -> list[tuple[str, int]]:
        return _topic_partitions(_object(data, path), path)

    @staticmethod
    def sequence_number(name: str) -> int:
        return parse_sequence_number(name, IsrChangeNotificationSequenceZNode.PREFIX)


class LogDirEventNotificationSequenceZNode:
    """``/log_dir_event_notification/log_dir_event_<seq>``: ``{"version":1,"broker":N,"event":1}``
    (event 1 = log directory failure, the only kind). Decodes to the broker id."""

    PREFIX = "log_dir_event_"
    LOG_DIR_FAILURE_EVENT = 1

    @staticmethod
    def create_path() -> str:
        return f"/log_dir_event_notification/{LogDirEventNotificationSequenceZNode.PREFIX}"

    @staticmethod
    def encode(broker_id: int) -> bytes:
        return _json.dumps({"version": 1, "broker": broker_id, "event": 1})

    @staticmethod
    def decode(data: bytes | None, path: str = "/log_dir_event_notification/log_dir_event_") -> int:
        broker_id: int = _int(_object(data, path), "broker", path)
        return broker_id

    @staticmethod
    def sequence_number(name: str) -> int:
        return parse_sequence_number(name, LogDirEventNotificationSequenceZNode.PREFIX)


# ---------------------------------------------------------------------------------------------
# /cluster/id, /latest_producer_id_block, /feature

class ClusterIdZNode(FixedPathZNode):
    """``/cluster/id``: ``{"version":"1","id":"<22-char id>"}`` -- note the version is a string."""

    PATH = "/cluster/id"

    @staticmethod
    def encode(cluster_id: str) -> bytes:
        return _json.dumps({"version": "1", "id": cluster_id})

    @staticmethod
    def decode(data: bytes | None) -> str:
        path = ClusterIdZNode.path()
        cluster_id: str = _str(_object(data, path), "id", path)
        return cluster_id


@dataclass(frozen=True)
class ProducerIdBlock:
    broker_id: int
    block_start: int
    block_end: int  # inclusive


class ProducerIdBlockZNode(FixedPathZNode):
    """``/latest_producer_id_block``: the last claimed block,
    ``{"version":1,"broker":N,"block_start":"0","block_end":"999"}``; no data until the first claim."""

    PATH = "/latest_producer_id_block"
    BLOCK_SIZE = 1000

    @staticmethod
    def encode(block: ProducerIdBlock) -> bytes:
        return _json.dumps({"version": 1, "broker": block.broker_id,
                            "block_start": str(block.block_start), "block_end": str(block.block_end)})

    @staticmethod
    def decode(data: bytes | None) -> ProducerIdBlock | None:
        if not data:
            return None
        path = ProducerIdBlockZNode.path()
        obj = _object(data, path)
        return ProducerIdBlock(_int(obj, "broker", path), _long_text(obj, "block_start", path),
                               _long_text(obj, "block_end", path))


@dataclass(frozen=True)
class FeatureZNodeData:
    """``status`` 1 = enabled, 0 = disabled; ``features``: name -> (min, max) version level."""

    status: int
    features: dict[str, tuple[int, int]] = field(default_factory=dict)
    version: int = 1


class FeatureZNode(FixedPathZNode):
    """``/feature`` (KIP-584, written by the 2.7+ controller): version 1,
    ``{"features":{},"version":1,"status":1}`` in Kafka's hash order. Decoding also reads the
    3.3+ version 2 (no ``min_version_level``; min is then reported as 1)."""

    PATH = "/feature"
    ENABLED = 1
    DISABLED = 0

    @staticmethod
    def encode(node: FeatureZNodeData) -> bytes:
        features = {name: {"min_version_level": node.features[name][0],
                           "max_version_level": node.features[name][1]}
                    for name in java_hashmap_order(list(node.features))}
        values = {"version": 1, "status": node.status, "features": features}
        return _mutable_map_json(values, initial=3)

    @staticmethod
    def decode(data: bytes | None) -> FeatureZNodeData:
        path = FeatureZNode.path()
        obj = _object(data, path)
        version = _int(obj, "version", path)
        if version not in (1, 2):
            raise ValueError(f"{path}: unsupported feature znode version {version}")
        status = _int(obj, "status", path)
        if status not in (0, 1):
            raise ValueError(f"{path}: unknown feature status {status}")
        features: dict[str, tuple[int, int]] = {}
        for name, levels in _dict(obj, "features", path).items():
            if not isinstance(levels, dict):
                raise _bad(path, "features", "a map of version levels", levels)
            high = _int(levels, "max_version_level", path)
            low = _int(levels, "min_version_level", path, ... if version == 1 else 1)
            features[name] = (low, high)
        return FeatureZNodeData(status, features, version)


# ---------------------------------------------------------------------------------------------
# /consumers: ZooKeeper-era consumer groups (old consumer, OffsetCommit v0, pykafka)

class ConsumerPathZNode(FixedPathZNode):
    """``/consumers`` and the per-group containers that Burrow's kafka_zk module,
    KafkaOffsetMonitor and pykafka read."""

    PATH = "/consumers"

    @classmethod
    def group_path(cls, group: str) -> str:
        return f"{cls.PATH}/{_name('group', group)}"

    @classmethod
    def _group_child(cls, group: str, kind: str, topic: str | None = None) -> str:
        """``/consumers/<group>/<kind>``, or its per-topic child when ``topic`` is given."""
        base = f"{cls.group_path(group)}/{kind}"
        return base if topic is None else f"{base}/{_name('topic', topic)}"

    @classmethod
    def offsets_path(cls, group: str, topic: str | None = None) -> str:
        return cls._group_child(group, "offsets", topic)

    @classmethod
    def ids_path(cls, group: str) -> str:
        return cls._group_child(group, "ids")

    @classmethod
    def owners_path(cls, group: str, topic: str | None = None) -> str:
        return cls._group_child(group, "owners", topic)


class ConsumerOffsetZNode:
    """``/consumers/<group>/offsets/<topic>/<partition>``: the next offset to consume, as bare
    decimal text (no newline: Kafka, Burrow and KOM all reject whitespace)."""

    @staticmethod
    def path(group: str, topic: str, partition: int) -> str:
        return f"{ConsumerPathZNode.offsets_path(group, topic)}/{int(partition)}"

    @staticmethod
    def encode(offset: int) -> bytes:
        return str(int(offset)).encode("ascii")

    @staticmethod
    def decode(data: bytes | None, path: str = "/consumers/<group>/offsets/<topic>/<partition>") -> int | None:
        if data is None:
            return None
        text = bytes(data).decode("utf-8", "replace")
        if not _DECIMAL.fullmatch(text) or not INT64_MIN <= int(text) <= INT64_MAX:
            raise ValueError(f"{path}: expected a decimal offset, got {text[:40]!r}")
        return int(text)


@dataclass(frozen=True)
class ConsumerRegistration:
    """The old high-level consumer's ``ids/<consumer id>`` node. ``pattern`` is ``static``,
    ``white_list`` or ``black_list``; ``subscription`` maps topic (or regex) -> stream count."""

    subscription: dict[str, int]
    pattern: str = "static"
    timestamp_ms: int | None = None
    version: int = 1


class ConsumerIdZNode:
    """``/consumers/<group>/ids/<consumer id>`` (ephemeral). Decoding returns a
    ConsumerRegistration for the old consumer's JSON, or the plain topic name pykafka writes."""

    @staticmethod
    def path(group: str, consumer_id: str) -> str:
        return f"{ConsumerPathZNode.ids_path(group)}/{_name('consumer id', consumer_id)}"

    @staticmethod
    def encode(registration: ConsumerRegistration) -> bytes:
        values: dict[str, Any] = {"version": registration.version,
                                  "subscription": dict(registration.subscription),
                                  "pattern": registration.pattern}
        if registration.timestamp_ms is not None:
            values["timestamp"] = str(registration.timestamp_ms)
        return _json.dumps(values)

    @staticmethod
    def decode(data: bytes | None, path: str = "/consumers/<group>/ids/<id>") -> ConsumerRegistration | str:
        raw = bytes(data or b"")
        if not raw.lstrip().startswith(b"{"):
            try:
                return raw.decode("utf-8")
            except UnicodeDecodeError:
                raise ValueError(f"{path}: neither JSON nor UTF-8 text: {_json._preview(raw)}") from None
        obj = _object(raw, path)
        subscription = _dict(obj, "subscription", path)
        for topic in subscription:
            _int(subscription, topic, path)
        return ConsumerRegistration(dict(subscription), _str(obj, "pattern", path, "static"),
                                    _long_text(obj, "timestamp", path, None), _int(obj, "version", path, 1))


class ConsumerOwnerZNode:
    """``/consumers/<group>/owners/<topic>/<partition>`` (ephemeral): the owning consumer thread
    id as plain text. pykafka names the child ``<leader id>-<partition>``, so ``partition`` may
    be given as that string."""

    @staticmethod
    def path(group: str, topic: str, partition: int | str) -> str:
        child = str(int(partition)) if isinstance(partition, int) else _name("partition", partition)
        return f"{ConsumerPathZNode.owners_path(group, topic)}/{child}"

    @staticmethod
    def encode(owner_id: str) -> bytes:
        return owner_id.encode("utf-8")

    @staticmethod
    def decode(data: bytes | None) -> str:
        return bytes(data or b"").decode("utf-8", "replace")


# ---------------------------------------------------------------------------------------------

# Persistent paths every broker creates at startup if missing (Kafka's PersistentZkPaths).
PERSISTENT_ZK_PATHS: tuple[str, ...] = (
    ConsumerPathZNode.path(),
    BrokerIdsZNode.path(),
    TopicsZNode.path(),
    ConfigEntityChangeNotificationZNode.path(),
    DeleteTopicsZNode.path(),
    BrokerSequenceIdZNode.path(),
    IsrChangeNotificationZNode.path(),
    ProducerIdBlockZNode.path(),
    LogDirEventNotificationZNode.path(),
) + tuple(ConfigEntityTypeZNode.path(t) for t in CONFIG_ENTITY_TYPES)
