"""A small synchronous admin client: blocking TCP sockets, kbroker's own codec, one request at a time.

    with AdminClient("127.0.0.1:9092") as admin:
        meta = admin.metadata(["t"])
        admin.create_topics([{"name": "t", "num_partitions": 3, "replication_factor": 1, "configs": []}])

Each connection negotiates versions with ApiVersions first and then sends every API at the highest
version both sides speak (min(our max, broker max)). Anything that goes wrong is a `ClientError`
whose text is one line fit for a terminal: `ConnectError` for the network ("cannot connect to
127.0.0.1:9092: connection refused"), `KafkaApiError` for an error code in a response (named as
Kafka names it, `TOPIC_ALREADY_EXISTS`).

One module: the connection, its version negotiation and the admin calls over them are the one client every
tool shares; each call is a few lines over ``Connection``.
"""
from __future__ import annotations

import argparse
import socket
import struct
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from kbroker import errors
from kbroker.log.names import TopicPartition
from kbroker.protocol import API_KEYS, API_NAMES, SUPPORTED_VERSIONS, ProtocolError, decode_response, encode_request
from kbroker.tools import security as secure

__all__ = [
    "AdminClient",
    "ClientError",
    "ConnectError",
    "Connection",
    "KafkaApiError",
    "TopicPartition",
    "add_timeout_option",
    "add_tool_parser",
    "bootstrap_servers",
    "decode_consumer_assignment",
    "error_name",
    "parse_bootstrap",
]

API_VERSIONS = API_KEYS["ApiVersions"]
DEFAULT_TIMEOUT = 30.0
CLIENT_SOFTWARE_NAME = "kbroker-tools"
CLIENT_SOFTWARE_VERSION = "0.1.0"

TOPIC_RESOURCE = 2
CONFIG_SOURCE_DEFAULT = 5  # DescribeConfigs v1+: DEFAULT_CONFIG
LATEST_TIMESTAMP = -1
GROUP_KEY_TYPE = 0

UNKNOWN_SERVER_ERROR = -1
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
UNSUPPORTED_VERSION = 35

_T = TypeVar("_T")

# Group calls worth repeating (after finding the coordinator again) until the deadline.
_COORDINATOR_RETRY = frozenset({COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR})


def error_name(code: int) -> str:
    """Kafka's name for an error code: 36 -> TOPIC_ALREADY_EXISTS."""
    return errors.for_code(code).name


class ClientError(Exception):
    """A failure the tools report as a single line (exit status 1)."""


def read_text_file(path: str) -> str:
    """A file the operator named (a JSON plan, a partition list); ClientError when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ClientError(f"cannot read {path}: {why}") from None


def add_command_config(p: argparse.ArgumentParser) -> None:
    """``--command-config FILE``: Kafka's client properties, for a TLS or SASL listener."""
    p.add_argument("--command-config", metavar="FILE",
                   help="Kafka client properties for a TLS or SASL listener (security.protocol, sasl.mechanism, "
                        "sasl.jaas.config, ssl.truststore.location, ...)")


def command_config(args: argparse.Namespace) -> dict[str, str] | None:
    """The --command-config properties (None without it); ClientError when they cannot be used."""
    path = getattr(args, "command_config", None)
    if not path:
        return None
    try:
        return secure.load_command_config(path)
    except secure.SecurityConfigError as exc:
        raise ClientError(str(exc)) from None


class ConnectError(ClientError):
    """The broker could not be reached, or the connection broke."""


class KafkaApiError(ClientError):
    """A response carried an error code. `message` is the broker's text, if it sent one."""

    def __init__(self, code: int, message: str | None = None, *, context: str | None = None) -> None:
        self.code = code
        self.name = error_name(code)
        self.retriable = errors.for_code(code).retriable
        self.message = message or None
        self.context = context
        text = f"{self.message} ({self.name})" if self.message else self.name
        super().__init__(f"{context}: {text}" if context else text)


def parse_bootstrap(value: str) -> list[tuple[str, int]]:
    """"host:port[,host:port...]" -> [(host, port)]; "[::1]:9092" for IPv6. ValueError if malformed."""
    out = []
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{item!r} is not host:port")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        out.append((host, int(port)))
    if not out:
        raise ValueError("no broker address given")
    return out


def bootstrap_servers(value: str) -> str:
    """An argparse `type` for --bootstrap-server: checks the value, keeps the string."""
    try:
        parse_bootstrap(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def add_tool_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, run: Callable[..., int], *,
                    help: str, description: str, actions: dict[str, str]) -> argparse.ArgumentParser:
    """The sub-command of one admin tool: --bootstrap-server, then exactly one of `actions` (flag ->
    help), each a store_true option. Parsed arguments carry `run` and `parser`; the caller adds the
    tool's other options."""
    p = sub.add_parser(name, help=help, description=description)
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT", type=bootstrap_servers,
                   help="the broker(s) to talk to: host:port[,host:port...]")
    group = p.add_mutually_exclusive_group(required=True)
    for flag, text in actions.items():
        group.add_argument(flag, action="store_true", help=text)
    p.set_defaults(run=run, parser=p)
    return p


def add_timeout_option(p: argparse.ArgumentParser, default_ms: int, what: str) -> None:
    """--timeout MS: `what` says what it bounds."""
    p.add_argument("--timeout", type=int, default=default_ms, metavar="MS",
                   help=f"{what}, in milliseconds (default {default_ms})")


def _describe_os_error(exc: OSError) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, socket.timeout):
        return "timed out"
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve the host ({exc.strerror or exc})"
    return (exc.strerror or str(exc) or type(exc).__name__).lower()


class Connection:
    """One blocking connection to one broker, with its negotiated API versions."""

    def __init__(self, host: str, port: int, *, client_id: str = "kbroker-tools",
                 timeout: float = DEFAULT_TIMEOUT, security: Mapping[str, str] | None = None) -> None:
        self.host = host
        self.port = port
        self.address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self.client_id = client_id
        self.timeout = timeout
        self._correlation = 0
        self._sock: socket.socket | None = None
        try:
            self._sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise ConnectError(f"cannot connect to {self.address}: {_describe_os_error(exc)}") from None
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        #: api key -> (min, max) that both sides implement
        self.versions: dict[int, tuple[int, int]] = {}
        try:
            protocol = secure.protocol(security)
            if protocol in ("SSL", "SASL_SSL"):  # --command-config: TLS, then SASL after ApiVersions
                assert security is not None
                self._sock = secure.wrap_tls(self._sock, host, security)
            self._negotiate()
            if protocol.startswith("SASL"):
                assert security is not None
                secure.authenticate(lambda key, body: self.send(key, body), security,
                                    API_KEYS["SaslHandshake"], API_KEYS["SaslAuthenticate"])
        except secure.SecurityConfigError as exc:
            self.close()
            raise ClientError(f"{self.address}: {exc}") from None
        except BaseException:
            self.close()
            raise

    # --- versions --------------------------------------------------------------------------

    def _negotiate(self) -> None:
        version = SUPPORTED_VERSIONS[API_VERSIONS][1]
        body = {"client_software_name": CLIENT_SOFTWARE_NAME, "client_software_version": CLIENT_SOFTWARE_VERSION}
        for _ in range(2):
            frame = self._roundtrip(API_VERSIONS, version, body)
            # the error code comes first in every version; an unsupported version is answered in v0
            code = struct.unpack_from(">h", frame, 4)[0] if len(frame) >= 6 else 0
            decode_version = 0 if code == UNSUPPORTED_VERSION else version
            response = self._decode(API_VERSIONS, decode_version, frame)
            if response.error_code == UNSUPPORTED_VERSION:
                theirs = {k.api_key: k.max_version for k in response.api_keys}.get(API_VERSIONS, 0)
                version = min(theirs, version)
                continue
            if response.error_code:
                raise KafkaApiError(response.error_code, context=f"ApiVersions from {self.address}")
            break
        else:
            raise ClientError(f"{self.address} does not accept any ApiVersions version we speak")
        for k in response.api_keys:
            ours = SUPPORTED_VERSIONS.get(k.api_key)
            if ours is None:
                continue
            lo, hi = max(ours[0], k.min_version), min(ours[1], k.max_version)
            if lo <= hi:
                self.versions[k.api_key] = (lo, hi)

    def version(self, api_key: int, min_version: int = 0, max_version: int | None = None) -> int:
        """The highest version of `api_key` both sides speak, within [min_version, max_version]."""
        lo_hi = self.versions.get(api_key)
        if lo_hi is not None:
            hi = min(lo_hi[1], max_version if max_version is not None else lo_hi[1])
            if hi >= max(lo_hi[0], min_version):
                return hi
        need = f" v{min_version}+" if min_version else ""
        raise ClientError(f"the broker at {self.address} does not support {API_NAMES[api_key]}{need}")

    # --- requests --------------------------------------------------------------------------

    def send(self, api_key: int, body: Any, *, version: int | None = None, min_version: int = 0,
             max_version: int | None = None) -> Any:
        """Send one request (a message object or a dict) and return the decoded response body."""
        if version is None:
            version = self.version(api_key, min_version, max_version)
        return self._decode(api_key, version, self._roundtrip(api_key, version, body))

    def _decode(self, api_key: int, version: int, frame: bytes) -> Any:
        try:
            _, body = decode_response(api_key, version, frame)
        except ProtocolError as exc:
            raise ClientError(f"unreadable {API_NAMES[api_key]} v{version} response from {self.address}: {exc}") \
                from None
        return body

    def _roundtrip(self, api_key: int, version: int, body: Any) -> bytes:
        if self._sock is None:
            raise ConnectError(f"the connection to {self.address} is closed")
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        correlation_id = self._correlation
        try:
            frame = encode_request(api_key, version, correlation_id, self.client_id, body)
        except ProtocolError as exc:
            raise ClientError(f"cannot encode {API_NAMES[api_key]} v{version}: {exc}") from None
        deadline = time.monotonic() + self.timeout
        what = f"{API_NAMES[api_key]} request"
        try:
            self._sock.settimeout(self.timeout)
            self._sock.sendall(frame)
            size = struct.unpack(">i", self._read(4, deadline, what))[0]
            if size < 4:
                raise ConnectError(f"{self.address} sent a response frame of {size} bytes")
            reply = self._read(size, deadline, what)
        except OSError as exc:
            self.close()
            if isinstance(exc, socket.timeout):
                raise ConnectError(f"no answer from {self.address} to the {what} within {self.timeout:g} s") from None
            raise ConnectError(f"lost the connection to {self.address} during the {what}: "
                               f"{_describe_os_error(exc)}") from None
        except ConnectError:
            self.close()
            raise
        got = struct.unpack_from(">i", reply, 0)[0]
        if got != correlation_id:
            self.close()
            raise ConnectError(f"{self.address} answered correlation id {got} to request {correlation_id}")
        return reply

    def _read(self, n: int, deadline: float, what: str) -> bytes:
        assert self._sock is not None
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError()
            self._sock.settimeout(left)
            k = self._sock.recv_into(view[got:])
            if not k:
                raise ConnectError(f"{self.address} closed the connection during the {what}")
            got += k
        return bytes(buf)

    @property
    def closed(self) -> bool:
        return self._sock is None

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None


def decode_consumer_assignment(data: bytes | None) -> list[TopicPartition]:
    """The partitions in a consumer protocol Assignment (what SyncGroup hands a member, and
    DescribeGroups reports as member_assignment): int16 version, [topic string, [partition int32]],
    then nullable user data bytes (ignored). Empty or unreadable bytes -> []."""
    if not data:
        return []
    out: list[TopicPartition] = []
    try:
        p = 2  # version
        (topics,) = struct.unpack_from(">i", data, p)
        p += 4
        for _ in range(max(topics, 0)):
            (n,) = struct.unpack_from(">h", data, p)
            p += 2
            topic = bytes(data[p:p + n]).decode()
            p += n
            (count,) = struct.unpack_from(">i", data, p)
            p += 4
            for _ in range(max(count, 0)):
                out.append(TopicPartition(topic, struct.unpack_from(">i", data, p)[0]))
                p += 4
    except (struct.error, UnicodeDecodeError):
        return out
    return out


@dataclass
class BrokerNode:
    node_id: int
    host: str
    port: int


class AdminClient:
    """The calls the admin tools make, routed to the right broker (controller, partition leader,
    group coordinator). Connections are opened on demand and kept until `close()`."""

    def __init__(self, bootstrap: str, *, client_id: str = "kbroker-tools", timeout: float = DEFAULT_TIMEOUT,
                 security: Mapping[str, str] | None = None) -> None:
        self.security = security  # Kafka's client properties (--command-config): TLS and SASL
        try:
            self.bootstrap = parse_bootstrap(bootstrap)
        except ValueError as exc:
            raise ClientError(f"bad bootstrap address {bootstrap!r}: {exc}") from None
        self.client_id = client_id
        self.timeout = timeout
        self._conns: dict[tuple[str, int], Connection] = {}
        self._brokers: dict[int, BrokerNode] = {}
        self._controller_id = -1
        self._bootstrap_conn: Connection | None = None
        self._coordinators: dict[str, BrokerNode] = {}

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        conns, self._conns = self._conns, {}
        self._bootstrap_conn = None
        for conn in conns.values():
            conn.close()

    # --- connections -----------------------------------------------------------------------

    def _connect(self, host: str, port: int) -> Connection:
        conn = self._conns.get((host, port))
        if conn is None or conn.closed:
            conn = Connection(host, port, client_id=self.client_id, timeout=self.timeout, security=self.security)
            self._conns[(host, port)] = conn
        return conn

    def connection(self) -> Connection:
        """A connection to any bootstrap broker (the first that answers)."""
        if self._bootstrap_conn is not None and not self._bootstrap_conn.closed:
            return self._bootstrap_conn
        failures = []
        for host, port in self.bootstrap:
            try:
                self._bootstrap_conn = self._connect(host, port)
                return self._bootstrap_conn
            except ConnectError as exc:
                failures.append(str(exc))
        raise ConnectError("; ".join(failures))

    def node(self, node_id: int) -> Connection:
        if node_id not in self._brokers:
            self.metadata([])
        b = self._brokers.get(node_id)
        if b is None:
            raise ClientError(f"broker {node_id} is not in the cluster metadata")
        return self._connect(b.host, b.port)

    def controller(self) -> Connection:
        if self._controller_id < 0:
            self.metadata([])
        if self._controller_id >= 0 and self._controller_id in self._brokers:
            return self.node(self._controller_id)
        return self.connection()

    # --- metadata and topics ---------------------------------------------------------------

    def metadata(self, topics: Iterable[str] | None = None) -> Any:
        """Metadata for `topics` (None = every topic, [] = none: brokers and controller only).
        Never creates topics: before v4 (no allow_auto_topic_creation) naming a topic could, so
        every topic is asked for and the answer filtered."""
        conn = self.connection()
        v = conn.version(API_KEYS["Metadata"])
        names = None if topics is None else list(topics)
        ask_all = names is None or v == 0 or (v < 4 and bool(names))  # v0 cannot ask for no topic either
        wanted = ([] if v == 0 else None) if ask_all or names is None else [{"name": t} for t in names]
        response = conn.send(API_KEYS["Metadata"], {"topics": wanted, "allow_auto_topic_creation": False},
                             version=v)
        if names is not None and ask_all:
            keep = set(names)
            known = {t.name for t in response.topics}
            response.topics = [t for t in response.topics if t.name in keep] + [
                type(response).Topic(error_code=UNKNOWN_TOPIC_OR_PARTITION, name=n) for n in names if n not in known]
        self._brokers = {b.node_id: BrokerNode(b.node_id, b.host, b.port) for b in response.brokers}
        self._controller_id = response.controller_id
        return response

    def list_topics(self) -> list[Any]:
        """Every topic's metadata (topics in error are left out), sorted by name."""
        return sorted((t for t in self.metadata(None).topics if t.name is not None and t.error_code == 0),
                      key=lambda t: t.name)

    def create_topics(self, topics: list[dict[str, Any]], *, validate_only: bool = False) -> list[Any]:
        """CreateTopics; returns the per-topic results (check their error_code)."""
        conn = self.controller()
        v = conn.version(API_KEYS["CreateTopics"])
        for t in topics:
            if v < 4 and (t.get("num_partitions", -1) < 0 or t.get("replication_factor", -1) < 0):
                raise ClientError(f"the broker at {conn.address} needs --partitions and --replication-factor "
                                  f"(CreateTopics v{v} has no broker defaults)")
        response = conn.send(API_KEYS["CreateTopics"], {
            "topics": topics, "timeout_ms": int(self.timeout * 1000), "validate_only": validate_only}, version=v)
        return list(response.topics)

    def delete_topics(self, names: list[str]) -> list[Any]:
        conn = self.controller()
        v = conn.version(API_KEYS["DeleteTopics"])
        body: dict[str, Any] = {"timeout_ms": int(self.timeout * 1000)}
        if v >= 6:
            body["topics"] = [{"name": n} for n in names]
        else:
            body["topic_names"] = list(names)
        return list(conn.send(API_KEYS["DeleteTopics"], body, version=v).responses)

    def create_partitions(self, counts: dict[str, int], *, validate_only: bool = False,
                          assignments: dict[str, list[list[int]]] | None = None) -> list[Any]:
        """CreatePartitions: topic -> new partition count; ``assignments`` gives a topic's new partitions'
        replicas (in partition order), the others are placed by the broker."""
        conn = self.controller()

        def given(name: str) -> list[dict[str, list[int]]] | None:
            found = (assignments or {}).get(name)
            return None if found is None else [{"broker_ids": replicas} for replicas in found]

        response = conn.send(API_KEYS["CreatePartitions"], {
            "topics": [{"name": n, "count": c, "assignments": given(n)} for n, c in counts.items()],
            "timeout_ms": int(self.timeout * 1000), "validate_only": validate_only})
        return list(response.results)

    def describe_topic_configs(self, names: list[str]) -> dict[str, Any]:
        """name -> DescribeConfigs result (configs with `is_default` normalised: True when the
        value is the broker's built-in default)."""
        if not names:
            return {}
        conn = self.connection()
        v = conn.version(API_KEYS["DescribeConfigs"])
        response = conn.send(API_KEYS["DescribeConfigs"], {
            "resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": n, "configuration_keys": None}
                          for n in names]}, version=v)
        out = {}
        for r in response.results:
            if v >= 1:
                for c in r.configs:
                    c.is_default = c.config_source == CONFIG_SOURCE_DEFAULT
            out[r.resource_name] = r
        return out

    def list_offsets(self, partitions: Iterable[TopicPartition], timestamp: int = LATEST_TIMESTAMP,
                     ) -> dict[TopicPartition, int | KafkaApiError]:
        """ListOffsets at each partition's leader (latest by default): tp -> offset, or the error."""
        partitions = list(partitions)
        out: dict[TopicPartition, int | KafkaApiError] = {}
        if not partitions:
            return out
        meta = self.metadata(sorted({tp.topic for tp in partitions}))
        leaders: dict[TopicPartition, int] = {}
        for t in meta.topics:
            for p in t.partitions:
                leaders[TopicPartition(t.name, p.partition_index)] = p.leader_id
            if t.error_code:
                for tp in partitions:
                    if tp.topic == t.name:
                        out[tp] = KafkaApiError(t.error_code)
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in partitions:
            if tp in out:
                continue
            leader = leaders.get(tp)
            if leader is None:
                out[tp] = KafkaApiError(UNKNOWN_TOPIC_OR_PARTITION)
            elif leader < 0:
                out[tp] = KafkaApiError(LEADER_NOT_AVAILABLE)
            else:
                by_leader.setdefault(leader, []).append(tp)
        for leader, tps in by_leader.items():
            conn = self.node(leader)
            v = conn.version(API_KEYS["ListOffsets"])
            topics: dict[str, list[dict[str, int]]] = {}
            for tp in tps:
                topics.setdefault(tp.topic, []).append({"partition_index": tp.partition, "timestamp": timestamp})
            response = conn.send(API_KEYS["ListOffsets"], {
                "replica_id": -1, "isolation_level": 0,
                "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()]}, version=v)
            for t in response.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, p.partition_index)
                    if p.error_code:
                        out[tp] = KafkaApiError(p.error_code)
                    elif v == 0:
                        out[tp] = p.old_style_offsets[0] if p.old_style_offsets else KafkaApiError(UNKNOWN_SERVER_ERROR)
                    else:
                        out[tp] = p.offset
        for tp in partitions:
            out.setdefault(tp, KafkaApiError(UNKNOWN_SERVER_ERROR, "no answer for this partition"))
        return out

    # --- groups ----------------------------------------------------------------------------

    def list_groups(self) -> list[Any]:
        """ListGroups on every broker of the cluster; the listed groups, by group id."""
        self.metadata([])
        nodes: list[int | None] = [*sorted(self._brokers)] or [None]  # None: the bootstrap connection
        found: dict[str, Any] = {}
        for node_id in nodes:
            def call(node_id: int | None = node_id) -> list[Any]:
                conn = self.connection() if node_id is None else self.node(node_id)
                response = conn.send(API_KEYS["ListGroups"], {"states_filter": []})
                if response.error_code:
                    raise KafkaApiError(response.error_code, context="ListGroups")
                return list(response.groups)
            for g in self._retry(call):
                found[g.group_id] = g
        return [found[k] for k in sorted(found)]

    def find_coordinator(self, group_id: str) -> Connection:
        def call() -> Connection:
            conn = self.connection()
            v = conn.version(API_KEYS["FindCoordinator"])
            c = conn.send(API_KEYS["FindCoordinator"], {"key": group_id, "key_type": GROUP_KEY_TYPE}, version=v)
            if c.error_code:
                raise KafkaApiError(c.error_code, c.error_message if v >= 1 else None,
                                    context=f"FindCoordinator for group '{group_id}'")
            self._coordinators[group_id] = node = BrokerNode(c.node_id, c.host, c.port)
            self._brokers.setdefault(c.node_id, node)
            return self._connect(c.host, c.port)
        return self._retry(call)

    def coordinator_node(self, group_id: str) -> BrokerNode:
        """The broker coordinating `group_id` (FindCoordinator unless already known)."""
        if group_id not in self._coordinators:
            self.find_coordinator(group_id)
        return self._coordinators[group_id]

    def describe_group(self, group_id: str) -> Any:
        """DescribeGroups at the group's coordinator: the DescribedGroup (unknown groups are Dead)."""
        def call() -> Any:
            conn = self.find_coordinator(group_id)
            response = conn.send(API_KEYS["DescribeGroups"], {"groups": [group_id]})
            g = response.groups[0]
            if g.error_code:
                raise KafkaApiError(g.error_code, context=f"DescribeGroups for group '{group_id}'")
            return g
        return self._retry(call)

    def fetch_offsets(self, group_id: str) -> dict[TopicPartition, int]:
        """OffsetFetch of every committed offset of a group: tp -> offset (-1 = none)."""
        def call() -> dict[TopicPartition, int]:
            conn = self.find_coordinator(group_id)
            v = conn.version(API_KEYS["OffsetFetch"], min_version=2)  # v2+: null topics = all
            context = f"OffsetFetch for group '{group_id}'"
            response = conn.send(API_KEYS["OffsetFetch"], {"group_id": group_id, "topics": None}, version=v)
            if response.error_code:
                raise KafkaApiError(response.error_code, context=context)
            out: dict[TopicPartition, int] = {}
            for t in response.topics:
                for p in t.partitions:
                    if p.error_code:
                        raise KafkaApiError(p.error_code, context=f"{context}, {t.name}-{p.partition_index}")
                    out[TopicPartition(t.name, p.partition_index)] = p.committed_offset
            return out
        return self._retry(call)

    def _retry(self, call: Callable[[], _T]) -> _T:
        """Repeat `call` on coordinator errors (loading, moved, not yet available) until the timeout."""
        deadline = time.monotonic() + self.timeout
        delay = 0.05
        while True:
            try:
                return call()
            except KafkaApiError as exc:
                if exc.code not in _COORDINATOR_RETRY or time.monotonic() + delay > deadline:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, 1.0)
