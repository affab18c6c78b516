"""Broker configuration: Kafka's ``server.properties`` keys, one declaration each.

The registry gives every key its type, default, bounds and a one-line doc; it drives the
properties parser, ``--override key=value``, and the typed ``BrokerConfig`` the broker reads.
Per-log keys (``log.segment.bytes`` ...) are declared in ``kbroker.config.topic`` and folded into
``BrokerConfig.log``. Malformed values stop the broker with the file and line; keys Kafka has but
we do not use are accepted with a note; unknown keys are reported with a "did you mean".
"""
from __future__ import annotations

import difflib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from kbroker.config.errors import ConfigError
from kbroker.config.topic import KEYS as LOG_KEYS, LogConfig, parse_bool, parse_int, parse_str

log = logging.getLogger(__name__)


def _list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def parse_status_listener(text: str) -> tuple[str, int] | None:
    """``status.listener``: ``http://host:port`` -> (host, port); empty -> None. Raises ValueError
    for anything else."""
    if not text:
        return None
    parts = urlsplit(text)
    if parts.scheme != "http" or not parts.hostname or parts.port is None:
        raise ValueError(f"status.listener must look like http://HOST:PORT, not {text!r}")
    return parts.hostname, parts.port


def _is_status_listener(text: str) -> bool:
    try:
        parse_status_listener(text)
    except ValueError:
        return False
    return True


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


def _int_key(key: str, default: int, minimum: int, doc: str = "") -> _Def:
    """An int key with a lower bound (the rule in error messages says which)."""
    return _d(key, parse_int, default, lambda v: v >= minimum, f"an int >= {minimum}", doc)


def _bool_key(key: str, default: bool, doc: str = "") -> _Def:
    return _d(key, parse_bool, default, rule="true or false", doc=doc)


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_PROTOCOL_MAP = ",".join(f"{p}:{p}" for p in SECURITY_PROTOCOLS)
# Config values never shown (DescribeConfigs answers null with is_sensitive, logs and status omit them).
SENSITIVE_SUFFIXES = ("password", "sasl.jaas.config", "ssl.keystore.key")

DEFS: tuple[_Def, ...] = (
    _int_key("broker.id", 0, -1, "this broker's id (-1: generate one)"),
    _d("listeners", parse_str, "PLAINTEXT://127.0.0.1:9092", lambda v: bool(v), "a listener URL list",
       "where clients connect"),
    _d("advertised.listeners", parse_str, "", doc="what Metadata tells clients (default: listeners)"),
    _d("log.dirs", _list, [], doc="comma-separated log directories, one per disk"),
    _d("log.dir", parse_str, "./data", doc="the log directory when log.dirs is not set"),
    _int_key("num.network.threads", 3, 1, "network processors"),
    _int_key("num.io.threads", 8, 1, "request handler threads"),
    _int_key("socket.send.buffer.bytes", 102400, -1, "SO_SNDBUF (-1: OS default)"),
    _int_key("socket.receive.buffer.bytes", 102400, -1, "SO_RCVBUF (-1: OS default)"),
    _int_key("socket.request.max.bytes", 104857600, 1, "largest request frame accepted"),
    _int_key("connections.max.idle.ms", 600000, 1, "close idle connections after"),
    _int_key("max.connections", 2147483647, 0, "connections the broker holds; more wait to be accepted"),
    _int_key("max.connections.per.ip", 2147483647, 0, "connections from one address; more are closed"),
    _d("max.connections.per.ip.overrides", parse_str, "", doc="host:count,... exceptions to max.connections.per.ip"),
    _bool_key("auto.create.topics.enable", True, "create unknown topics on use"),
    _int_key("num.partitions", 1, 1, "partitions of auto-created topics"),
    _int_key("default.replication.factor", 1, 1, "replication factor of auto-created topics"),
    _bool_key("delete.topic.enable", True, "may DeleteTopics delete topics (false: refused)"),
    _int_key("offsets.topic.num.partitions", 50, 1, "partitions of __consumer_offsets"),
    _int_key("offsets.topic.replication.factor", 3, 1, "replication factor of __consumer_offsets"),
    _int_key("offsets.topic.segment.bytes", 104857600, 1,
             "segment size of __consumer_offsets (small, for quick compaction and loading)"),
    _int_key("offsets.retention.minutes", 10080, 1,
             "how long the committed offsets of a group with no members are kept"),
    _int_key("offsets.commit.timeout.ms", 5000, 1, "how long an offset commit waits for its write to reach the ISR"),
    _int_key("offsets.retention.check.interval.ms", 600000, 1, "how often expired committed offsets are removed"),
    _int_key("transaction.state.log.num.partitions", 50, 1, "partitions of __transaction_state"),
    _int_key("transaction.state.log.replication.factor", 3, 1, "replication factor of __transaction_state"),
    _int_key("transaction.state.log.min.isr", 2, 1, "min.insync.replicas of __transaction_state"),
    _int_key("transaction.max.timeout.ms", 900000, 1, "the longest transaction timeout a producer may ask for"),
    _int_key("transaction.state.log.segment.bytes", 104857600, 1, "segment size of __transaction_state"),
    _int_key("transaction.abort.timed.out.transaction.cleanup.interval.ms", 10000, 1,
             "how often transactions past their timeout are aborted"),
    _int_key("group.initial.rebalance.delay.ms", 3000, 0,
             "how long a new group waits for more members before its first rebalance"),
    _int_key("group.min.session.timeout.ms", 6000, 0, "the shortest session timeout a group member may ask for"),
    _int_key("group.max.session.timeout.ms", 1800000, 0, "the longest session timeout a group member may ask for"),
    _int_key("group.max.size", 2147483647, 1, "members a consumer group may have"),
    _int_key("log.retention.check.interval.ms", 300000, 1, "how often logs are checked for segments to delete"),
    _int_key("log.flush.scheduler.interval.ms", 2**63 - 1, 1, "how often logs are checked for data due to be flushed"),
    _int_key("log.flush.offset.checkpoint.interval.ms", 60000, 0, "how often the recovery points are checkpointed"),
    _int_key("log.flush.start.offset.checkpoint.interval.ms", 60000, 0,
             "how often the log start offsets are checkpointed"),
    _int_key("replica.lag.time.max.ms", 30000, 1, "a follower that has not caught up for this long leaves the ISR"),
    _int_key("replica.fetch.max.bytes", 1048576, 0, "bytes a follower asks for per partition in one fetch"),
    _int_key("replica.fetch.wait.max.ms", 500, 0, "how long a follower's fetch may wait at the leader for data"),
    _int_key("replica.fetch.min.bytes", 1, 1, "bytes a follower's fetch waits for at the leader"),
    _int_key("replica.fetch.response.max.bytes", 10485760, 0,
             "bytes a follower asks for in one fetch, all partitions together"),
    _int_key("replica.fetch.backoff.ms", 1000, 0, "pause of a follower after a failed fetch"),
    _int_key("num.replica.fetchers", 1, 1, "fetch connections a follower keeps to each leader"),
    _int_key("replica.socket.timeout.ms", 30000, 1, "socket timeout of a follower's fetch connection"),
    _int_key("request.timeout.ms", 30000, 0, "how long the broker's requests to other brokers wait for an answer"),
    _d("zookeeper.connect", parse_str, "", doc="ZooKeeper ensemble[/chroot]; empty: the embedded store"),
    _int_key("zookeeper.session.timeout.ms", 18000, 1, "ZooKeeper session timeout"),
    _int_key("zookeeper.connection.timeout.ms", 18000, 1, "how long to wait for a connection to ZooKeeper"),
    _d("broker.rack", parse_str, "", doc="this broker's rack, for rack-aware replica placement"),
    _bool_key("offsets.zookeeper.mirror.enable", False,
              "copy offsets committed to __consumer_offsets to /consumers/<group>/offsets/<topic>/<partition>"),
    _int_key("offsets.zookeeper.mirror.interval.ms", 10000, 100,
             "how often the mirror polls; each group is written at most once per interval"),
    _d("status.listener", parse_str, "", _is_status_listener, "empty or http://HOST:PORT",
       "the HTTP status endpoint (JSON: brokers, partitions, groups, health); empty: off"),
    _bool_key("metrics.enabled", True, "count bytes, messages and request times for GET /metrics on the status "
              "listener; false: the hot paths count nothing"),
    _bool_key("controlled.shutdown.enable", True, "hand leaderships over to other replicas before shutting down"),
    _bool_key("auto.leader.rebalance.enable", True, "move leadership back to preferred replicas in the background"),
    _int_key("leader.imbalance.check.interval.seconds", 300, 1,
             "how often the controller checks for leadership imbalance"),
    _d("leader.imbalance.per.broker.percentage", parse_int, 10, lambda v: 0 <= v <= 100, "an int 0-100",
       doc="share of a broker's preferred partitions led elsewhere that starts a rebalance"),
    _int_key("controlled.shutdown.max.retries", 3, 0, "attempts of a controlled shutdown before shutting down anyway"),
    _int_key("controlled.shutdown.retry.backoff.ms", 5000, 0, "pause between controlled shutdown attempts"),
    # -- security (kbroker.security): listeners, TLS, SASL, ACLs, quotas ------------------------
    _d("listener.security.protocol.map", parse_str, DEFAULT_PROTOCOL_MAP, doc="listener name -> security protocol"),
    _d("inter.broker.listener.name", parse_str, "",
       doc="the listener brokers use between them (or security.inter.broker.protocol)"),
    _d("security.inter.broker.protocol", parse_str, "PLAINTEXT", lambda v: v in SECURITY_PROTOCOLS,
       "one of " + ", ".join(SECURITY_PROTOCOLS), doc="the security protocol brokers speak to each other"),
    _d("sasl.enabled.mechanisms", _list, ["GSSAPI"], doc="PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 are served"),
    _d("sasl.mechanism.inter.broker.protocol", parse_str, "GSSAPI",
       doc="the SASL mechanism brokers use with each other"),
    _d("sasl.jaas.config", parse_str, "", doc="JAAS login module options (listener.name.<l>.<mech>.sasl.jaas.config)"),
    _int_key("connections.max.reauth.ms", 0, 0, "KIP-368 session lifetime of SASL connections (0: none)"),
    _int_key("connection.failed.authentication.delay.ms", 100, 0, "delay before closing after a failed authentication"),
    _int_key("sasl.server.max.receive.size", 524288, 1, "largest frame accepted before authentication"),
    _d("ssl.keystore.type", parse_str, "JKS", doc="PEM is supported (JKS/PKCS12 need Java)"),
    _d("ssl.keystore.location", parse_str, "", doc="the keystore file: the broker's certificate and private key"),
    _d("ssl.keystore.password", parse_str, "", doc="the keystore's password"),
    _d("ssl.keystore.certificate.chain", parse_str, "", doc="the broker's certificate chain, PEM inline"),
    _d("ssl.keystore.key", parse_str, "", doc="the broker's private key, PEM inline"),
    _d("ssl.key.password", parse_str, "", doc="the password of the private key"),
    _d("ssl.truststore.type", parse_str, "JKS", doc="the truststore's format"),
    _d("ssl.truststore.location", parse_str, "",
       doc="the truststore file: the CAs client certificates are checked against"),
    _d("ssl.truststore.password", parse_str, "", doc="the truststore's password"),
    _d("ssl.truststore.certificates", parse_str, "", doc="trusted CA certificates, PEM inline"),
    _d("ssl.client.auth", parse_str, "none", lambda v: v in ("none", "requested", "required"),
       "none, requested or required", doc="whether clients must present a certificate"),
    _d("ssl.principal.mapping.rules", parse_str, "DEFAULT",
       doc="rules turning a client certificate's subject into a principal name"),
    _d("ssl.enabled.protocols", _list, ["TLSv1.2", "TLSv1.3"], doc="the TLS versions accepted"),
    _d("ssl.protocol", parse_str, "TLSv1.3", doc="the TLS protocol of the broker's SSL context"),
    _d("ssl.cipher.suites", _list, [], doc="the cipher suites accepted (empty: the TLS library's defaults)"),
    _d("ssl.endpoint.identification.algorithm", parse_str, "https", doc="inter-broker clients: check the host name"),
    _d("authorizer.class.name", parse_str, "", doc="kafka.security.authorizer.AclAuthorizer enables ACLs"),
    _d("super.users", parse_str, "", doc="semicolon-separated principals allowed everything"),
    _bool_key("allow.everyone.if.no.acl.found", False, "allow access to a resource no ACL names"),
    _int_key("quota.window.num", 11, 1, "samples kept for client quotas"),
    _int_key("quota.window.size.seconds", 1, 1, "length of one quota sample"),
    # -- the log cleaner (kbroker.log.cleaner), dynamic broker configs in Kafka -------------------
    _int_key("log.cleaner.threads", 1, 0, "cleanings of compacted logs that run at the same time"),
    _d("log.cleaner.io.max.bytes.per.second", float, 1.7976931348623157e308, lambda v: v >= 0,
       "a number >= 0", "bytes/s the cleaner reads and writes, all its threads together"),
    # -- replication throttles (KIP-73): dynamic broker configs in Kafka, set by kafka-reassign-partitions.sh --------
    _int_key("leader.replication.throttled.rate", 2**63 - 1, 0,
             "bytes/s a leader sends to followers of the replicas listed in leader.replication.throttled.replicas"),
    _int_key("follower.replication.throttled.rate", 2**63 - 1, 0,
             "bytes/s a follower fetches for the replicas listed in follower.replication.throttled.replicas"),
    _int_key("replica.alter.log.dirs.io.max.bytes.per.second", 2**63 - 1, 0,
             "bytes/s a move between log dirs (AlterReplicaLogDirs) copies"),
    _int_key("replication.quota.window.num", 11, 1, "samples kept for the replication throttles"),
    _int_key("replication.quota.window.size.seconds", 1, 1, "length of one replication throttle sample"),
)

# Keys of Kafka's server.properties that are valid but change nothing here (yet): accepted quietly.
ACCEPTED_UNUSED = frozenset({
    "num.recovery.threads.per.data.dir",
    "queued.max.requests", "background.threads", "inter.broker.protocol.version",
    "zookeeper.set.acl", "zookeeper.max.in.flight.requests", "log.cleaner.dedupe.buffer.size",
    "fetch.purgatory.purge.interval.requests",
    "producer.purgatory.purge.interval.requests",
})


_BY_KEY = {d.key: d for d in DEFS}
_LOG_BROKER_KEYS = {bk for k in LOG_KEYS for bk in k.broker_keys}


def declared_keys() -> frozenset[str]:
    """Every broker key declared here or in kbroker.config.topic, and those accepted unused."""
    return frozenset(_BY_KEY) | frozenset(_LOG_BROKER_KEYS) | ACCEPTED_UNUSED


def key_definition(key: str) -> tuple[Any, str] | None:
    """A declared broker key's (default, rule), None if not declared (dynamic configs word their errors by it)."""
    if key in _BY_KEY:
        return _BY_KEY[key].default, _BY_KEY[key].rule
    found = next((k for k in LOG_KEYS if key in k.broker_keys), None)
    return (found.default, found.rule) if found is not None else None


@dataclass(frozen=True)
class Listener:
    name: str
    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> Listener:
        name, sep, rest = text.partition("://")
        host, colon, port = rest.rpartition(":")
        if not sep or not colon or not port.isdigit():
            raise ValueError(f"expected NAME://host:port, got {text!r}")
        return cls(name, host.strip("[]") or "0.0.0.0", int(port))


class BrokerValues:
    """The type of every key of ``DEFS`` as a ``BrokerConfig`` attribute (its ``__getattr__`` serves them from
    ``values``): annotations only, so that mypy checks each use. ``listeners``, ``advertised_listeners`` and
    ``log_dirs`` are ``BrokerConfig`` fields (parsed); tests/config/test_config_attributes.py keeps this in step
    with ``DEFS``."""

    broker_id: int
    log_dir: str
    num_network_threads: int
    num_io_threads: int
    socket_send_buffer_bytes: int
    socket_receive_buffer_bytes: int
    socket_request_max_bytes: int
    connections_max_idle_ms: int
    max_connections: int
    max_connections_per_ip: int
    max_connections_per_ip_overrides: str
    auto_create_topics_enable: bool
    num_partitions: int
    default_replication_factor: int
    delete_topic_enable: bool
    offsets_topic_num_partitions: int
    offsets_topic_replication_factor: int
    offsets_topic_segment_bytes: int
    offsets_retention_minutes: int
    offsets_commit_timeout_ms: int
    offsets_retention_check_interval_ms: int
    transaction_state_log_num_partitions: int
    transaction_state_log_replication_factor: int
    transaction_state_log_min_isr: int
    transaction_max_timeout_ms: int
    transaction_state_log_segment_bytes: int
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int
    group_initial_rebalance_delay_ms: int
    group_min_session_timeout_ms: int
    group_max_session_timeout_ms: int
    group_max_size: int
    log_retention_check_interval_ms: int
    log_flush_scheduler_interval_ms: int
    log_flush_offset_checkpoint_interval_ms: int
    log_flush_start_offset_checkpoint_interval_ms: int
    replica_lag_time_max_ms: int
    replica_fetch_max_bytes: int
    replica_fetch_wait_max_ms: int
    replica_fetch_min_bytes: int
    replica_fetch_response_max_bytes: int
    replica_fetch_backoff_ms: int
    num_replica_fetchers: int
    replica_socket_timeout_ms: int
    request_timeout_ms: int
    zookeeper_connect: str
    zookeeper_session_timeout_ms: int
    zookeeper_connection_timeout_ms: int
    broker_rack: str
    offsets_zookeeper_mirror_enable: bool
    offsets_zookeeper_mirror_interval_ms: int
    status_listener: str
    metrics_enabled: bool
    controlled_shutdown_enable: bool
    auto_leader_rebalance_enable: bool
    leader_imbalance_check_interval_seconds: int
    leader_imbalance_per_broker_percentage: int
    controlled_shutdown_max_retries: int
    controlled_shutdown_retry_backoff_ms: int
    listener_security_protocol_map: str
    inter_broker_listener_name: str
    security_inter_broker_protocol: str
    sasl_enabled_mechanisms: list[str]
    sasl_mechanism_inter_broker_protocol: str
    sasl_jaas_config: str
    connections_max_reauth_ms: int
    connection_failed_authentication_delay_ms: int
    sasl_server_max_receive_size: int
    ssl_keystore_type: str
    ssl_keystore_location: str
    ssl_keystore_password: str
    ssl_keystore_certificate_chain: str
    ssl_keystore_key: str
    ssl_key_password: str
    ssl_truststore_type: str
    ssl_truststore_location: str
    ssl_truststore_password: str
    ssl_truststore_certificates: str
    ssl_client_auth: str
    ssl_principal_mapping_rules: str
    ssl_enabled_protocols: list[str]
    ssl_protocol: str
    ssl_cipher_suites: list[str]
    ssl_endpoint_identification_algorithm: str
    authorizer_class_name: str
    super_users: str
    allow_everyone_if_no_acl_found: bool
    quota_window_num: int
    quota_window_size_seconds: int
    log_cleaner_threads: int
    log_cleaner_io_max_bytes_per_second: float
    leader_replication_throttled_rate: int
    follower_replication_throttled_rate: int
    replica_alter_log_dirs_io_max_bytes_per_second: int
    replication_quota_window_num: int
    replication_quota_window_size_seconds: int


@dataclass(frozen=True)
class BrokerConfig(BrokerValues):
    values: dict[str, Any]
    log: LogConfig
    log_dirs: list[Path]
    listeners: list[Listener]
    advertised_listeners: list[Listener]
    unknown_keys: list[str] = field(default_factory=list)
    # every key as written (strings), for per-listener lookups (``listener.name.<l>.<key>``)
    raw: dict[str, str] = field(default_factory=dict)

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
    return build_config(read_properties(path, overrides))


def read_properties(path: str | None = None, overrides: list[str] | None = None) -> dict[str, tuple[str, str]]:
    """server.properties (optional) plus ``key=value`` overrides, as written: key -> (value, where)."""
    raw: dict[str, tuple[str, str]] = {}
    if path is not None:
        raw.update(parse_properties(Path(path).read_text(), path))
    for text in overrides or []:
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--override: expected key=value, got {text!r}")
        raw[key.strip()] = (value.strip(), "--override")
    return raw


def build_config(raw: dict[str, tuple[str, str]]) -> BrokerConfig:
    values = {d.attr: d.default for d in DEFS}
    unknown = []
    for key, (text, where) in raw.items():
        definition = _BY_KEY.get(key)
        if definition is not None:
            try:
                value = definition.parse(text)
            except ValueError:
                raise ConfigError(
                    f"{where}: {key}: expected {definition.rule or 'a valid value'}, got {text!r}") from None
            if not definition.check(value):
                raise ConfigError(f"{where}: {key}: expected {definition.rule}, got {text!r}")
            values[definition.attr] = value
        elif key.startswith("listener.name."):
            pass  # per-listener overrides: read by kbroker.security through config.raw
        elif key not in _LOG_BROKER_KEYS and key not in ACCEPTED_UNUSED:
            known = list(_BY_KEY) + sorted(_LOG_BROKER_KEYS) + sorted(ACCEPTED_UNUSED)
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            unknown.append(f"{where}: unknown config {key!r}{hint}")
    try:
        log_config = LogConfig.from_broker_properties(  # the protocol version bounds log.message.format.version
            {k: v for k, (v, _) in raw.items() if k in _LOG_BROKER_KEYS or k == "inter.broker.protocol.version"})
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
    return BrokerConfig(values, log_config, [Path(d) for d in dirs], listeners, advertised, unknown,
                        {k: v for k, (v, _) in raw.items()})


def is_sensitive(key: str) -> bool:
    """Passwords, private keys and JAAS options (which hold passwords): never logged or shown."""
    return key.endswith(SENSITIVE_SUFFIXES)
