"""Per-log configuration: Kafka's topic-level keys with the broker-level ``log.*`` defaults.

One declaration per key (name, broker key, type, default, bounds) drives parsing, validation and
the typed ``LogConfig`` the log layer reads. Topic overrides use Kafka's topic key names
(``segment.bytes``), broker properties Kafka's broker names (``log.segment.bytes``).
"""
from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kbroker.config.errors import ConfigError

INT64_MAX = (1 << 63) - 1


@dataclass(frozen=True)
class _Key:
    topic_key: str
    broker_keys: tuple[str, ...]  # first match wins; later ones are coarser units
    attr: str
    parse: Callable[[str], Any]
    default: Any
    check: Callable[[Any], bool]
    rule: str
    doc: str
    broker_scale: tuple[int, ...] = ()  # multiplier per broker key (hours -> ms)
    is_list: bool = False  # Kafka's ConfigDef.Type.LIST: IncrementalAlterConfigs may APPEND / SUBTRACT


# Value parsers, shared with the broker registry (kbroker.config.broker): ValueError when malformed.

def parse_int(text: str) -> int:
    return int(text.strip())


def parse_str(text: str) -> str:
    return text.strip()


def parse_bool(text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise ValueError(text)
    return value == "true"


def _float(text: str) -> float:
    return float(text.strip())


def _choice(*allowed: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = text.strip()
        if value not in allowed:
            raise ValueError(value)
        return value
    return parse


def _items(text: str) -> list[str]:
    """A LIST value's entries (ConfigDef: comma-separated, blanks around commas ignored; "" is [])."""
    return [p.strip() for p in text.split(",")] if text.strip() else []


def _policy(text: str) -> str:
    """Kafka's ValidList of compact and delete: the empty list is valid too (neither deleted nor compacted). The
    list keeps its order as written (Kafka shows "delete,compact" as such; APPEND adds at the end)."""
    parts = _items(text)
    if any(p not in ("compact", "delete") for p in parts):
        raise ValueError(text)
    return ",".join(parts)


# Kafka 2.8's ApiVersion table (core/src/main/scala/kafka/api/ApiVersion.scala): each version with the message
# format (magic) it writes. A release's short name ("0.10.0", "2.8") means its last internal version.
_API_VERSIONS: tuple[tuple[str, int], ...] = (
    ("0.8.0", 0), ("0.8.1", 0), ("0.8.2", 0), ("0.9.0", 0),
    ("0.10.0-IV0", 1), ("0.10.0-IV1", 1), ("0.10.1-IV0", 1), ("0.10.1-IV1", 1), ("0.10.1-IV2", 1),
    ("0.10.2-IV0", 1),
    ("0.11.0-IV0", 2), ("0.11.0-IV1", 2), ("0.11.0-IV2", 2), ("1.0-IV0", 2), ("1.1-IV0", 2),
    ("2.0-IV0", 2), ("2.0-IV1", 2), ("2.1-IV0", 2), ("2.1-IV1", 2), ("2.1-IV2", 2), ("2.2-IV0", 2),
    ("2.2-IV1", 2), ("2.3-IV0", 2), ("2.3-IV1", 2), ("2.4-IV0", 2), ("2.4-IV1", 2), ("2.5-IV0", 2),
    ("2.6-IV0", 2), ("2.7-IV0", 2), ("2.7-IV1", 2), ("2.7-IV2", 2), ("2.8-IV0", 2), ("2.8-IV1", 2),
)
_API_VERSION_MAGIC: dict[str, int] = dict(_API_VERSIONS)
for _name, _magic in _API_VERSIONS:  # later internal versions overwrite: the short name is the release's last
    _API_VERSION_MAGIC[_name.split("-")[0]] = _magic


def _api_version_key(text: str) -> str:
    """ApiVersion.apply's lookup key: the first three dot-separated parts for 0.x versions, two after
    (so "0.10.0.1" and "2.8.0" name 0.10.0 and 2.8); an internal version suffix (-IV1) is kept."""
    value = text.strip()
    parts = value.split(".")
    return ".".join(parts[:3] if value.startswith("0.") else parts[:2])


def record_magic(version: str) -> int:
    """The message format (0, 1 or 2) a message.format.version stores; ValueError when unknown."""
    key = _api_version_key(version)
    if key not in _API_VERSION_MAGIC:
        raise ValueError(version)
    return _API_VERSION_MAGIC[key]


class _InvalidValue(ValueError):
    """A parser's own reason for refusing a value, worded as Kafka's validator words it."""


def _message_format_version(text: str) -> str:
    try:
        record_magic(text)
    except ValueError:  # ApiVersionValidator: ApiVersion(value)'s IllegalArgumentException
        raise _InvalidValue(f"Version `{text}` is not a valid version") from None
    return text.strip()


def _throttled_replicas(text: str) -> str:
    """Kafka's ThrottledReplicaListValidator: "partition:broker" entries, or "*" alone."""
    parts = _items(text)
    if "".join(parts) == "*":
        return "*"
    if any(not (p == "" or (p.count(":") == 1 and all(n.isdigit() for n in p.split(":")))) for p in parts):
        raise ValueError(text)
    return ",".join(parts)


KEYS: tuple[_Key, ...] = (
    _Key("segment.bytes", ("log.segment.bytes",), "segment_bytes", parse_int, 1 << 30,
         lambda v: v >= 14, "an int >= 14", "roll to a new segment at this size"),
    _Key("segment.ms", ("log.roll.ms", "log.roll.hours"), "segment_ms", parse_int, 168 * 3600_000,
         lambda v: v >= 1, "an int >= 1", "roll a segment this long after its first record",
         (1, 3600_000)),
    _Key("segment.jitter.ms", ("log.roll.jitter.ms", "log.roll.jitter.hours"), "segment_jitter_ms", parse_int, 0,
         lambda v: v >= 0, "an int >= 0",
         "each segment's time-based roll comes up to this much (at random, below segment.ms) before segment.ms",
         (1, 3600_000)),
    _Key("retention.ms", ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
         "retention_ms", parse_int, 168 * 3600_000, lambda v: v >= -1, "an int >= -1 (-1: unlimited)",
         "delete segments whose newest record is older", (1, 60_000, 3600_000)),
    _Key("retention.bytes", ("log.retention.bytes",), "retention_bytes", parse_int, -1,
         lambda v: v >= -1, "an int >= -1 (-1: unlimited)", "delete oldest segments beyond this size"),
    _Key("segment.index.bytes", ("log.index.size.max.bytes",), "segment_index_bytes", parse_int, 10 * 1024 * 1024,
         lambda v: v >= 12, "an int >= 12", "preallocated size of .index and .timeindex files"),
    _Key("index.interval.bytes", ("log.index.interval.bytes",), "index_interval_bytes", parse_int, 4096,
         lambda v: v >= 0, "an int >= 0", "bytes between offset index entries"),
    _Key("flush.messages", ("log.flush.interval.messages",), "flush_messages", parse_int, INT64_MAX,
         lambda v: v >= 1, "an int >= 1", "fdatasync after this many unflushed messages"),
    _Key("flush.ms", ("log.flush.interval.ms",), "flush_ms", parse_int, INT64_MAX,
         lambda v: v >= 0, "an int >= 0", "fdatasync when the oldest unflushed data is this old"),
    _Key("message.timestamp.type", ("log.message.timestamp.type",), "message_timestamp_type",
         _choice("CreateTime", "LogAppendTime"), "CreateTime", lambda v: True, "CreateTime or LogAppendTime",
         "which timestamp records carry"),
    _Key("max.message.bytes", ("message.max.bytes",), "max_message_bytes", parse_int, 1048588,
         lambda v: v >= 0, "an int >= 0", "largest record batch accepted"),
    _Key("file.delete.delay.ms", ("log.segment.delete.delay.ms",), "file_delete_delay_ms", parse_int, 60_000,
         lambda v: v >= 0, "an int >= 0", "delay before a deleted segment's files are removed"),
    _Key("preallocate", ("log.preallocate",), "preallocate", parse_bool, False, lambda v: True, "true or false",
         "a new segment's file is created at segment.bytes, and cut to its data when rolled or closed"),
    _Key("cleanup.policy", ("log.cleanup.policy",), "cleanup_policy", _policy, "delete", lambda v: True,
         "a list of delete and compact (possibly empty)", "what happens to old segments", is_list=True),
    _Key("min.insync.replicas", ("min.insync.replicas",), "min_insync_replicas", parse_int, 1, lambda v: v >= 1,
         "an int >= 1", "replicas that must have a write for acks=all"),
    _Key("unclean.leader.election.enable", ("unclean.leader.election.enable",), "unclean_leader_election_enable",
         parse_bool, False, lambda v: True, "true or false", "may an out-of-sync replica become leader"),
    _Key("compression.type", ("compression.type",), "compression_type",
         _choice("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"), "producer", lambda v: True,
         "producer, uncompressed, gzip, snappy, lz4 or zstd", "codec of stored batches"),
    _Key("message.timestamp.difference.max.ms", ("log.message.timestamp.difference.max.ms",),
         "message_timestamp_difference_max_ms", parse_int, INT64_MAX, lambda v: v >= 0, "an int >= 0",
         "how far a CreateTime may be from the broker's clock"),
    _Key("message.format.version", ("log.message.format.version",), "message_format_version",
         _message_format_version, "2.8-IV1", lambda v: True,
         "a Kafka version (" + ", ".join(n for n, _ in _API_VERSIONS) + ")",
         "the message format appended records are stored in (below 0.11.0: magic 0 or 1 messages)"),
    _Key("message.downconversion.enable", ("log.message.downconversion.enable",), "message_downconversion_enable",
         parse_bool, True, lambda v: True, "true or false",
         "may a Fetch of a version older than the stored message format be answered with down-converted records "
         "(false: UNSUPPORTED_VERSION for that partition; followers are never refused)"),
    # Log compaction (kbroker.log.cleaner), Kafka's topic keys and their broker defaults.
    _Key("min.cleanable.dirty.ratio", ("log.cleaner.min.cleanable.ratio",), "min_cleanable_dirty_ratio", _float,
         0.5, lambda v: 0.0 <= v <= 1.0, "a number in [0, 1]",
         "clean a compacted log once this share of its bytes is not yet cleaned"),
    _Key("delete.retention.ms", ("log.cleaner.delete.retention.ms",), "delete_retention_ms", parse_int, 86_400_000,
         lambda v: v >= 0, "an int >= 0", "how long tombstones survive cleaning"),
    _Key("min.compaction.lag.ms", ("log.cleaner.min.compaction.lag.ms",), "min_compaction_lag_ms", parse_int, 0,
         lambda v: v >= 0, "an int >= 0", "records newer than this are not compacted"),
    _Key("max.compaction.lag.ms", ("log.cleaner.max.compaction.lag.ms",), "max_compaction_lag_ms", parse_int,
         INT64_MAX, lambda v: v >= 1, "an int >= 1", "records older than this are compacted whatever the ratio"),
    # Set by kafka-reassign-partitions.sh --throttle for the moving partitions; kbroker.replication.throttle
    # reads them from each hosted replica's LogConfig (the entries naming that broker, or "*").
    _Key("leader.replication.throttled.replicas", (), "leader_replication_throttled_replicas",
         _throttled_replicas, "", lambda v: True, "a list of partition:broker, or *",
         "replicas a leader sends to out-of-sync followers at most at leader.replication.throttled.rate", is_list=True),
    _Key("follower.replication.throttled.replicas", (), "follower_replication_throttled_replicas",
         _throttled_replicas, "", lambda v: True, "a list of partition:broker, or *",
         "replicas a follower fetches at most at follower.replication.throttled.rate", is_list=True),
)

# Broker-wide settings of the log layer with no topic-level key (topic_key ""): parsed from the
# broker properties with the others, never listed by DescribeConfigs nor accepted as topic overrides.
BROKER_ONLY_KEYS: tuple[_Key, ...] = (
    _Key("", ("log.cleaner.enable",), "cleaner_enable", parse_bool, True, lambda v: True, "true or false",
         "run the log cleaner (compaction)"),
    _Key("", ("log.cleaner.backoff.ms",), "cleaner_backoff_ms", parse_int, 15_000, lambda v: v >= 0, "an int >= 0",
         "pause of the cleaner when no log needs cleaning"),
)
KEYS += BROKER_ONLY_KEYS

_BY_TOPIC_KEY = {k.topic_key: k for k in KEYS if k.topic_key}


@dataclass(frozen=True)
class LogConfig:
    segment_bytes: int = 1 << 30
    segment_ms: int = 168 * 3600_000
    segment_jitter_ms: int = 0
    retention_ms: int = 168 * 3600_000
    retention_bytes: int = -1
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    flush_messages: int = INT64_MAX
    flush_ms: int = INT64_MAX
    message_timestamp_type: str = "CreateTime"
    max_message_bytes: int = 1048588
    file_delete_delay_ms: int = 60_000
    preallocate: bool = False
    cleanup_policy: str = "delete"
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    compression_type: str = "producer"
    message_timestamp_difference_max_ms: int = INT64_MAX
    min_cleanable_dirty_ratio: float = 0.5
    delete_retention_ms: int = 86_400_000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = INT64_MAX
    leader_replication_throttled_replicas: str = ""
    follower_replication_throttled_replicas: str = ""
    message_format_version: str = "2.8-IV1"
    message_downconversion_enable: bool = True
    cleaner_enable: bool = True
    cleaner_backoff_ms: int = 15_000

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy.split(",")

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy.split(",")

    @property
    def max_segment_ms(self) -> int:
        """Kafka's maxSegmentMs: a compacted log also rolls by max.compaction.lag.ms, so that its
        records leave the active segment (which is never cleaned) in time."""
        if self.compact and self.max_compaction_lag_ms > 0:
            return min(self.segment_ms, self.max_compaction_lag_ms)
        return self.segment_ms

    def random_segment_jitter(self) -> int:
        """A new segment's roll jitter, as Kafka's LogConfig.randomSegmentJitter: 0 without segment.jitter.ms, else
        a non-negative random int modulo the smaller of segment.jitter.ms and segment.ms."""
        if self.segment_jitter_ms == 0:
            return 0
        return random.randrange(1 << 31) % min(self.segment_jitter_ms, self.segment_ms)

    @property
    def record_magic(self) -> int:
        """The magic appended records are stored with: 2 from 0.11.0 on, 1 for 0.10.x, 0 before."""
        return record_magic(self.message_format_version)

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @classmethod
    def from_broker_properties(cls, props: Mapping[str, str]) -> LogConfig:
        """Broker defaults from ``log.*`` properties (finer units win, as in Kafka)."""
        values: dict[str, Any] = {}
        for key in KEYS:
            scales = key.broker_scale or (1,) * len(key.broker_keys)
            for broker_key, scale in zip(key.broker_keys, scales):
                if broker_key in props:
                    value = _parse(key, broker_key, props[broker_key])
                    scaled = isinstance(value, int) and not isinstance(value, bool) and value > 0
                    values[key.attr] = value * scale if scaled else value
                    break
        _check_format_against_protocol(props)
        return cls(**values)

    def topic_values(self) -> dict[str, str]:
        """Every topic-level key with its value in Kafka's string form (DescribeConfigs)."""
        out = {}
        for key in KEYS:
            if not key.topic_key:
                continue
            value = getattr(self, key.attr)
            out[key.topic_key] = str(value).lower() if isinstance(value, bool) else str(value)
        return out

    def with_overrides(self, overrides: Mapping[str, str]) -> LogConfig:
        """This config with topic-level overrides (``segment.bytes=...``) applied."""
        values: dict[str, Any] = {}
        for name, text in overrides.items():
            key = _BY_TOPIC_KEY.get(name)
            if key is None:
                raise ConfigError(f"unknown topic config {name!r}")
            values[key.attr] = _parse(key, name, text)
        return dataclasses.replace(self, **values)


def _check_format_against_protocol(props: Mapping[str, str]) -> None:
    """KafkaConfig's rule: log.message.format.version may not need a newer record format than
    inter.broker.protocol.version writes (core/src/main/scala/kafka/server/KafkaConfig.scala)."""
    fmt, ibp = props.get("log.message.format.version"), props.get("inter.broker.protocol.version")
    if fmt is None or ibp is None:
        return
    try:
        ibp_magic = record_magic(ibp)
    except ValueError:
        raise ConfigError(f"inter.broker.protocol.version: expected a Kafka version, got {ibp!r}") from None
    needed = record_magic(fmt)
    if ibp_magic < needed:
        first = next(name for name, magic in _API_VERSIONS if magic == needed).split("-")[0]
        raise ConfigError(f"log.message.format.version {fmt} can only be used when inter.broker.protocol.version "
                          f"is set to version {first} or higher")


def list_operation(name: str, current: str | None, values: str, append: bool) -> str:
    """IncrementalAlterConfigs APPEND / SUBTRACT on a topic key, as Kafka's ConfigAdminManager: the old list is
    the override (``current``), else the key's default; APPEND adds the values not already there, SUBTRACT
    removes the given ones (an absent one is no error). The result may be the empty list."""
    key = _BY_TOPIC_KEY.get(name)
    if key is None:
        raise ConfigError(f"Unknown config name: {name}")
    if not key.is_list:
        raise ConfigError(f"Config value {'append' if append else 'subtract'} is not allowed for config key: {name}")
    old = _items(key.default if current is None else current)
    given = _items(values)
    new = old + [v for v in dict.fromkeys(given) if v not in old] if append else [v for v in old if v not in given]
    return ",".join(new)


def _parse(key: _Key, name: str, text: str) -> Any:
    try:
        value = key.parse(str(text))
    except _InvalidValue as exc:  # Kafka's ConfigException(name, value, reason)
        raise ConfigError(f"Invalid value {text} for configuration {name}: {exc}") from None
    except ValueError:
        raise ConfigError(f"{name}: expected {key.rule}, got {text!r}") from None
    if not key.check(value):
        raise ConfigError(f"{name}: expected {key.rule}, got {text!r}")
    return value
