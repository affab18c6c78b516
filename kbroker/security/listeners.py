"""Listeners as Kafka configures them: ``listeners`` (named ``NAME://host:port``),
``listener.security.protocol.map``, ``advertised.listeners``, the inter-broker listener
(``inter.broker.listener.name`` or ``security.inter.broker.protocol``) and per-listener settings
(``listener.name.<lowercase name>.<key>`` before ``<key>``).

``parse_listeners(config)`` checks all of it once at startup and raises ConfigError with what is
wrong (Kafka's rules: unique names and ports, every name mapped to a known protocol, advertised
names a subset of the listeners, not both inter-broker keys, the inter-broker listener advertised,
PEM key material for TLS listeners).
"""
from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass, field
from typing import Protocol

from kbroker.config.broker import SECURITY_PROTOCOLS, BrokerConfig, Listener
from kbroker.config.errors import ConfigError
from kbroker.security.tls import TlsConfigError, keystore_identity, server_context

log = logging.getLogger(__name__)

# The security protocols' ids on the wire (UpdateMetadata endpoints), Kafka's SecurityProtocol.id.
PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
TLS_PROTOCOLS = ("SSL", "SASL_SSL")
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")


def parse_protocol_map(text: str) -> dict[str, str]:
    """``NAME:PROTOCOL,...`` -> {NAME: PROTOCOL} (names upper-cased as Kafka normalises them)."""
    out: dict[str, str] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, protocol = item.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not name or not protocol:
            raise ConfigError(f"listener.security.protocol.map: expected NAME:PROTOCOL pairs, got {item!r}")
        if protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(f"listener.security.protocol.map: unknown security protocol {protocol!r} for "
                              f"listener {name} (one of {', '.join(SECURITY_PROTOCOLS)})")
        if name in out:
            raise ConfigError(f"listener.security.protocol.map: listener {name} is mapped twice")
        out[name] = protocol
    return out


class ListenerConfig:
    """One listener's view of the broker config: ``listener.name.<lowercase name>.<key>`` wins over
    ``<key>``, which wins over the declared default."""

    def __init__(self, config: BrokerConfig, name: str) -> None:
        self.config = config
        self.name = name
        self.prefix = f"listener.name.{name.lower()}."

    def has_override(self, key: str) -> bool:
        return self.prefix + key in self.config.raw

    def is_set(self, key: str) -> bool:
        return self.has_override(key) or key in self.config.raw

    def get(self, key: str, default: str = "") -> str:
        raw = self.config.raw
        if self.prefix + key in raw:
            return raw[self.prefix + key]
        if key in raw:
            return raw[key]
        value = self.config.values.get(key.replace(".", "_"))
        if value is None:
            return default
        if isinstance(value, list):
            return ",".join(map(str, value))
        return str(value)

    def get_list(self, key: str) -> list[str]:
        return [part.strip() for part in self.get(key).split(",") if part.strip()]


@dataclass(frozen=True)
class ListenerSpec:
    name: str
    protocol: str
    bind: Listener           # where to listen
    advertised: Listener     # what to tell clients and other brokers (port 0: the bound port)
    announced: bool = True   # in advertised.listeners (registered), else only listened on

    @property
    def tls(self) -> bool:
        return self.protocol in TLS_PROTOCOLS

    @property
    def sasl(self) -> bool:
        return self.protocol in SASL_PROTOCOLS


@dataclass
class Listeners:
    specs: list[ListenerSpec]
    protocol_map: dict[str, str]
    inter_broker: str                      # the inter-broker listener's name
    settings: dict[str, ListenerConfig] = field(default_factory=dict)

    def spec(self, name: str) -> ListenerSpec | None:
        return next((s for s in self.specs if s.name == name), None)

    @property
    def inter_broker_protocol(self) -> str:
        return self.protocol_map.get(self.inter_broker, "PLAINTEXT")


def parse_listeners(config: BrokerConfig, clustered: bool | None = None) -> Listeners:
    """Every listener with its protocol and advertised address, checked as Kafka checks them.
    ``clustered`` (default: zookeeper.connect set) requires the inter-broker listener to exist."""
    if clustered is None:
        clustered = bool(config.zookeeper_connect)
    protocol_map = parse_protocol_map(config.listener_security_protocol_map)
    binds = [Listener(b.name.upper(), b.host, b.port) for b in config.listeners]
    advertised = [Listener(a.name.upper(), a.host, a.port) for a in config.advertised_listeners]
    _unique(binds, "listeners")
    _unique(advertised, "advertised.listeners")
    for item in binds + advertised:
        if item.name not in protocol_map:
            raise ConfigError(f"listener {item.name} has no security protocol: add {item.name}:<PROTOCOL> to "
                              f"listener.security.protocol.map (one of {', '.join(SECURITY_PROTOCOLS)})")
    bind_names = {b.name for b in binds}
    for a in advertised:
        if a.name not in bind_names:
            raise ConfigError(f"advertised.listeners names listener {a.name}, which is not in listeners "
                              f"({', '.join(sorted(bind_names))})")
    by_name = {a.name: a for a in advertised}
    specs = [ListenerSpec(b.name, protocol_map[b.name], b, by_name.get(b.name, b)) for b in binds
             if b.name in by_name]
    # listeners not advertised still listen (Kafka binds them; clients are never told of them)
    specs += [ListenerSpec(b.name, protocol_map[b.name], b, b, False) for b in binds if b.name not in by_name]
    raw = config.raw
    if "inter.broker.listener.name" in raw and "security.inter.broker.protocol" in raw:
        raise ConfigError("only one of inter.broker.listener.name and security.inter.broker.protocol may be set")
    if config.inter_broker_listener_name:
        inter = config.inter_broker_listener_name.strip().upper()
        if inter not in protocol_map:
            raise ConfigError(f"inter.broker.listener.name={inter} has no security protocol in "
                              "listener.security.protocol.map")
    else:
        inter = config.security_inter_broker_protocol.strip().upper()  # the listener named after the protocol
    if clustered and inter not in by_name:
        raise ConfigError(f"the inter-broker listener {inter} must be one of advertised.listeners "
                          f"({', '.join(by_name)}); set inter.broker.listener.name or security.inter.broker.protocol")
    result = Listeners(specs, protocol_map, inter)
    for spec in specs:
        settings = result.settings[spec.name] = ListenerConfig(config, spec.name)
        if spec.tls:
            check_tls_settings(settings)
    if clustered and protocol_map.get(inter) in TLS_PROTOCOLS and inter not in result.settings:
        check_tls_settings(ListenerConfig(config, inter))
    return result


def _unique(items: list[Listener], key: str) -> None:
    names: set[str] = set()
    ports: set[int] = set()
    for item in items:
        if item.name in names:
            raise ConfigError(f"{key}: each listener must have a different name; {item.name} appears twice")
        names.add(item.name)
        if key == "listeners" and item.port != 0:
            if item.port in ports:
                raise ConfigError(f"{key}: each listener must have a different port; {item.port} appears twice")
            ports.add(item.port)


def check_tls_settings(settings: ListenerConfig) -> None:
    """PEM key material present for a TLS listener (the files are read when the context is built)."""
    where = f"listener {settings.name}"
    kind = settings.get("ssl.keystore.type").upper()
    if kind != "PEM":
        raise ConfigError(f"{where}: ssl.keystore.type={kind}: only PEM keystores are supported (JKS/PKCS12 need "
                          "Java); convert with openssl (openssl pkcs12 -in ks.p12 -nodes -out ks.pem) and set "
                          "ssl.keystore.type=PEM")
    if not settings.get("ssl.keystore.location") and not (settings.get("ssl.keystore.certificate.chain")
                                                          and settings.get("ssl.keystore.key")):
        raise ConfigError(f"{where}: a TLS listener needs a keystore: ssl.keystore.location (a PEM file with the "
                          "key and certificate chain) or ssl.keystore.certificate.chain and ssl.keystore.key")
    if settings.get("ssl.truststore.location") or settings.get("ssl.truststore.certificates"):
        tkind = settings.get("ssl.truststore.type").upper()
        if tkind != "PEM":
            raise ConfigError(f"{where}: ssl.truststore.type={tkind}: only PEM truststores are supported (JKS/PKCS12 "
                              "need Java); convert with openssl and set ssl.truststore.type=PEM")
    auth = settings.get("ssl.client.auth").lower()
    if auth not in ("none", "requested", "required"):
        raise ConfigError(f"{where}: ssl.client.auth must be none, requested or required, not {auth!r}")


# -- dynamic listener configs (KIP-226): a listener's keystore swapped at run time ----------------------------

class TlsServer(Protocol):
    """A listener's server as far as its TLS goes (kbroker.network.server.NetworkServer): new connections take
    ``ssl_context`` when they are accepted, so replacing it leaves the open ones with their certificate."""
    listener_name: str
    security_protocol: str
    ssl_context: ssl.SSLContext | None


def _keystore_changed(listener: str, changed: frozenset[str]) -> bool:
    prefix = f"listener.name.{listener.lower()}.ssl."
    return any(key.startswith(prefix) for key in changed)


class ListenerTls:
    """Kafka's per-listener SslFactory reconfiguration: ``check_config`` loads the new keystore and checks its
    certificate keeps the subject and alternative names (SslFactory.validateReconfiguration); ``apply_config`` gives
    the listener's new connections a context over the new keystore."""

    def __init__(self, servers: list[TlsServer], config: BrokerConfig) -> None:
        self.servers = [s for s in servers if s.security_protocol in TLS_PROTOCOLS]
        self._identities: dict[str, tuple[str, frozenset[str]] | None] = {}  # listener -> (subject, SANs)
        self.remember(config)

    def check_config(self, new: BrokerConfig, changed: frozenset[str]) -> None:
        for server in self.servers:
            if not _keystore_changed(server.listener_name, changed):
                continue
            settings = ListenerConfig(new, server.listener_name)
            try:
                server_context(settings, server.security_protocol)
                self._check_identity(server, settings)
            except (TlsConfigError, ValueError) as exc:
                raise ValueError(f"Validation of dynamic config update of SSLFactory failed: {exc}") from None

    def _check_identity(self, server: TlsServer, settings: ListenerConfig) -> None:
        old = self._identities.get(server.listener_name)
        if old is None:
            return
        subject, sans = keystore_identity(settings)
        if subject != old[0]:
            raise ValueError(f"Keystore DistinguishedName does not match:  existing={{alias=kafka, DN={old[0]}}}, "
                             f"new={{alias=kafka, DN={subject}}}")
        if not sans >= old[1]:
            raise ValueError(f"Keystore SubjectAltNames do not match:  existing={{alias=kafka, SAN={sorted(old[1])}}}, "
                             f"new={{alias=kafka, SAN={sorted(sans)}}}")

    def remember(self, config: BrokerConfig) -> None:
        """Note each listener's certificate identity (at start, and after each swap)."""
        for server in self.servers:
            try:
                identity = keystore_identity(ListenerConfig(config, server.listener_name))
            except TlsConfigError:
                identity = None
            self._identities[server.listener_name] = identity

    def apply_config(self, new: BrokerConfig, changed: frozenset[str]) -> None:
        for server in self.servers:
            if not _keystore_changed(server.listener_name, changed):
                continue
            try:
                server.ssl_context = server_context(ListenerConfig(new, server.listener_name),
                                                    server.security_protocol)
            except TlsConfigError as exc:  # checked before it was written: the file changed since
                log.error("listener %s keeps its keystore: %s", server.listener_name, exc)
                continue
            log.info("listener %s: new connections get the new keystore", server.listener_name)
        self.remember(new)
