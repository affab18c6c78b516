"""Broker configuration: Kafka's ``server.properties`` keys, one declaration each.

The registry gives every key its type, default, bounds and a one-line doc; it drives the
properties parser, ``--override key=value``, and the typed ``BrokerConfig`` the broker reads.
Per-log keys (``log.segment.bytes`` ...) are declared in ``kbroker.log.config`` and folded into
``BrokerConfig.log``. Malformed values stop the broker with the file and line; keys Kafka has but
we do not use are accepted with a note; unknown keys are reported with a "did you mean".
"""
from __future__ import annotations

import dataclasses
import difflib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from kbroker.log.config import KEYS as LOG_KEYS, ConfigError, LogConfig

log = logging.getLogger(__name__)


def _bool(text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise ValueError(text)
    return value == "true"


def _int(text: str) -> int:
    return int(text.strip())


def _str(text: str) -> str:
    return text.strip()


def _list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


@dataclass(frozen=True)
class _Def:
    key: str
    attr: str
    parse: Callable[[str], Any]
    default: Any
    check: Callable[[Any], bool] = lambda v: True
    rule: str = ""
    doc: str = ""


def _d(key: str, parse: Callable[[str], Any], default: Any, check: Callable[[Any], bool] = lambda v: True,
       rule: str = "", doc: str = "") -> _Def:
    return _Def(key, key.replace(".", "_"), parse, default, check, rule, doc)


DEFS: tuple[_Def, ...] = (
    _d("broker.id", _int, 0, lambda v: v >= -1, "an int >= -1", "this broker's id (-1: generate one)"),
    _d("listeners", _str, "PLAINTEXT://127.0.0.1:9092", lambda v: bool(v), "a listener URL list",
       "where clients connect"),
    _d("advertised.listeners", _str, "", doc="what Metadata tells clients (default: listeners)"),
    _d("log.dirs", _list, [], doc="comma-separated log directories, one per disk"),
    _d("log.dir", _str, "./data", doc="the log directory when log.dirs is not set"),
    _d("num.network.threads", _int, 3, lambda v: v >= 1, "an int >= 1", "network processors"),
    _d("num.io.threads", _int, 8, lambda v: v >= 1, "an int >= 1", "request handler threads"),
    _d("socket.send.buffer.bytes", _int, 102400, lambda v: v >= -1, "an int >= -1", "SO_SNDBUF (-1: OS default)"),
    _d("socket.receive.buffer.bytes", _int, 102400, lambda v: v >= -1, "an int >= -1", "SO_RCVBUF (-1: OS default)"),
    _d("socket.request.max.bytes", _int, 104857600, lambda v: v >= 1, "an int >= 1",
       "largest request frame accepted"),
    _d("connections.max.idle.ms", _int, 600000, lambda v: v >= 1, "an int >= 1", "close idle connections after"),
    _d("auto.create.topics.enable", _bool, True, rule="true or false", doc="create unknown topics on use"),
    _d("num.partitions", _int, 1, lambda v: v >= 1, "an int >= 1", "partitions of auto-created topics"),
    _d("default.replication.factor", _int, 1, lambda v: v >= 1, "an int >= 1",
       "replication factor of auto-created topics"),
    _d("delete.topic.enable", _bool, True, rule="true or false"),
    _d("offsets.topic.num.partitions", _int, 50, lambda v: v >= 1, "an int >= 1",
       "partitions of __consumer_offsets"),
    _d("offsets.topic.replication.factor", _int, 3, lambda v: v >= 1, "an int >= 1"),
    _d("offsets.topic.segment.bytes", _int, 104857600, lambda v: v >= 1, "an int >= 1"),
    _d("offsets.retention.minutes", _int, 10080, lambda v: v >= 1, "an int >= 1"),
    _d("offsets.commit.timeout.ms", _int, 5000, lambda v: v >= 1, "an int >= 1"),
    _d("offsets.retention.check.interval.ms", _int, 600000, lambda v: v >= 1, "an int >= 1",
       "how often expired committed offsets are removed"),
    _d("transaction.state.log.num.partitions", _int, 50, lambda v: v >= 1, "an int >= 1"),
    _d("transaction.state.log.replication.factor", _int, 3, lambda v: v >= 1, "an int >= 1"),
    _d("transaction.state.log.min.isr", _int, 2, lambda v: v >= 1, "an int >= 1"),
    _d("transaction.max.timeout.ms", _int, 900000, lambda v: v >= 1, "an int >= 1"),
    _d("transaction.state.log.segment.bytes", _int, 104857600, lambda v: v >= 1, "an int >= 1"),
    _d("transaction.abort.timed.out.transaction.cleanup.interval.ms", _int, 10000, lambda v: v >= 1,
       "an int >= 1"),
    _d("group.initial.rebalance.delay.ms", _int, 3000, lambda v: v >= 0, "an int >= 0"),
    _d("group.min.session.timeout.ms", _int, 6000, lambda v: v >= 0, "an int >= 0"),
    _d("group.max.session.timeout.ms", _int, 1800000, lambda v: v >= 0, "an int >= 0"),
    _d("group.max.size", _int, 2147483647, lambda v: v >= 1, "an int >= 1"),
    _d("log.retention.check.interval.ms", _int, 300000, lambda v: v >= 1, "an int >= 1"),
    _d("log.flush.scheduler.interval.ms", _int, 2**63 - 1, lambda v: v >= 1, "an int >= 1"),
    _d("log.flush.offset.checkpoint.interval.ms", _int, 60000, lambda v: v >= 0, "an int >= 0"),
    _d("log.flush.start.offset.checkpoint.interval.ms", _int, 60000, lambda v: v >= 0, "an int >= 0"),
    _d("replica.lag.time.max.ms", _int, 30000, lambda v: v >= 1, "an int >= 1"),
    _d("replica.fetch.max.bytes", _int, 1048576, lambda v: v >= 0, "an int >= 0"),
    _d("replica.fetch.wait.max.ms", _int, 500, lambda v: v >= 0, "an int >= 0"),
    _d("replica.fetch.min.bytes", _int, 1, lambda v: v >= 1, "an int >= 1"),
    _d("replica.fetch.response.max.bytes", _int, 10485760, lambda v: v >= 0, "an int >= 0"),
    _d("replica.fetch.backoff.ms", _int, 1000, lambda v: v >= 0, "an int >= 0"),
    _d("replica.socket.timeout.ms", _int, 30000, lambda v: v >= 1, "an int >= 1"),
    _d("request.timeout.ms", _int, 30000, lambda v: v >= 0, "an int >= 0"),
    _d("zookeeper.connect", _str, "", doc="ZooKeeper ensemble[/chroot]; empty: the embedded store"),
    _d("zookeeper.session.timeout.ms", _int, 18000, lambda v: v >= 1, "an int >= 1"),
    _d("zookeeper.connection.timeout.ms", _int, 18000, lambda v: v >= 1, "an int >= 1"),
    _d("broker.rack", _str, ""),
    _d("offsets.zookeeper.mirror.enable", _bool, False, rule="true or false",
       doc="copy offsets committed to __consumer_offsets to /consumers/<group>/offsets/<topic>/<partition>"),
    _d("offsets.zookeeper.mirror.interval.ms", _int, 10000, lambda v: v >= 100, "an int >= 100",
       "how often the mirror polls; each group is written at most once per interval"),
    _d("status.listener", _str, "", lambda v: _status_listener_ok(v), "empty or http://HOST:PORT",
       "the HTTP status endpoint (JSON: brokers, partitions, groups, health); empty: off"),
    _d("controlled.shutdown.enable", _bool, True, rule="true or false"),
    _d("auto.leader.rebalance.enable", _bool, True, rule="true or false"),
    _d("leader.imbalance.check.interval.seconds", _int, 300, lambda v: v >= 1, "an int >= 1"),
    _d("leader.imbalance.per.broker.percentage", _int, 10, lambda v: 0 <= v <= 100, "an int 0-100"),
    _d("controlled.shutdown.max.retries", _int, 3, lambda v: v >= 0, "an int >= 0"),
    _d("controlled.shutdown.retry.backoff.ms", _int, 5000, lambda v: v >= 0, "an int >= 0"),
)

# Keys of Kafka's server.properties that are valid but change nothing here (yet): accepted quietly.
ACCEPTED_UNUSED = frozenset({
    "num.recovery.threads.per.data.dir", "num.replica.fetchers", "log.cleaner.threads",
    "queued.max.requests", "background.threads", "inter.broker.protocol.version",
    "log.message.format.version", "log.preallocate",
    "zookeeper.set.acl", "zookeeper.max.in.flight.requests", "listener.security.protocol.map",
    "inter.broker.listener.name", "security.inter.broker.protocol", "log.cleaner.dedupe.buffer.size", "fetch.purgatory.purge.interval.requests",
    "producer.purgatory.purge.interval.requests", "max.connections", "max.connections.per.ip",
})

def _status_listener_ok(value: str) -> bool:
    from kbroker.status import parse_listener
    try:
        parse_listener(value)
    except ValueError:
        return False
    return True


_BY_KEY = {d.key: d for d in DEFS}
_LOG_BROKER_KEYS = {bk for k in LOG_KEYS for bk in k.broker_keys}


@dataclass(frozen=True)
class Listener:
    name: str
    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> "Listener":
        name, sep, rest = text.partition("://")
        host, colon, port = rest.rpartition(":")
        if not sep or not colon or not port.isdigit():
            raise ValueError(f"expected NAME://host:port, got {text!r}")
        return cls(name, host.strip("[]") or "0.0.0.0", int(port))


@dataclass(frozen=True)
class BrokerConfig:
    values: dict[str, Any]
    log: LogConfig
    log_dirs: list[Path]
    listeners: list[Listener]
    advertised_listeners: list[Listener]
    unknown_keys: list[str] = field(default_factory=list)

    def __getattr__(self, name: str) -> Any:
        try:
            return self.values[name]
        except KeyError:
            raise AttributeError(name) from None


def parse_properties(text: str, source: str = "<properties>") -> dict[str, tuple[str, str]]:
    """Java-properties subset Kafka users write: ``key=value`` or ``key: value`` lines, ``#``/``!``
    comments, trailing-backslash continuations. Returns key -> (value, "file:line")."""
    out: dict[str, tuple[str, str]] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        lineno = i + 1
        line = lines[i].strip()
        i += 1
        while line.endswith("\\") and i < len(lines):
            line = line[:-1] + lines[i].strip()
            i += 1
        if not line or line[0] in "#!":
            continue
        positions = [p for p in (line.find("="), line.find(":")) if p > 0]
        if not positions:
            raise ConfigError(f"{source}:{lineno}: expected key=value, got {line!r}")
        cut = min(positions)
        out[line[:cut].strip()] = (line[cut + 1:].strip(), f"{source}:{lineno}")
    return out


def load_config(path: str | None = None, overrides: list[str] | None = None) -> BrokerConfig:
    """server.properties (optional) plus ``key=value`` overrides; raises ConfigError on bad values."""
    raw: dict[str, tuple[str, str]] = {}
    if path is not None:
        raw.update(parse_properties(Path(path).read_text(), path))
    for text in overrides or []:
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--override: expected key=value, got {text!r}")
        raw[key.strip()] = (value.strip(), "--override")
    return build_config(raw)


def build_config(raw: dict[str, tuple[str, str]]) -> BrokerConfig:
    values = {d.attr: d.default for d in DEFS}
    unknown = []
    for key, (text, where) in raw.items():
        definition = _BY_KEY.get(key)
        if definition is not None:
            try:
                value = definition.parse(text)
            except ValueError:
                raise ConfigError(f"{where}: {key}: expected {definition.rule or 'a valid value'}, got {text!r}") from None
            if not definition.check(value):
                raise ConfigError(f"{where}: {key}: expected {definition.rule}, got {text!r}")
            values[definition.attr] = value
        elif key not in _LOG_BROKER_KEYS and key not in ACCEPTED_UNUSED:
            known = list(_BY_KEY) + sorted(_LOG_BROKER_KEYS) + sorted(ACCEPTED_UNUSED)
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            unknown.append(f"{where}: unknown config {key!r}{hint}")
    try:
        log_config = LogConfig.from_broker_properties({k: v for k, (v, _) in raw.items() if k in _LOG_BROKER_KEYS})
    except ConfigError as exc:
        bad = str(exc).split(":", 1)[0]
        where = raw[bad][1] if bad in raw else "config"
        raise ConfigError(f"{where}: {exc}") from None
    try:
        listeners = [Listener.parse(t) for t in _list(values["listeners"])]
        advertised = [Listener.parse(t) for t in _list(values["advertised_listeners"])] or listeners
    except ValueError as exc:
        raise ConfigError(f"listeners: {exc}") from None
    dirs = values["log_dirs"] or [values["log_dir"]]
    return BrokerConfig(values, log_config, [Path(d) for d in dirs], listeners, advertised, unknown)


def with_values(config: BrokerConfig, **changes: Any) -> BrokerConfig:
    """A copy with some typed values replaced (tests)."""
    return dataclasses.replace(config, values={**config.values, **changes})
