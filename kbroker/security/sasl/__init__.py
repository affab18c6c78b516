"""SASL authentication of client and broker connections: PLAIN and SCRAM-SHA-256/512.

    authenticator.py  Kafka's SaslServerAuthenticator state machine (both framings, KIP-368)
    plain.py          PLAIN, users from JAAS ``user_<name>="<password>"`` options
    scram.py          SCRAM server (and the client the broker uses between brokers)
    jaas.py           ``sasl.jaas.config`` values

``authenticator_factory`` is what a listener's NetworkServer calls for each new connection.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kbroker.config.broker import BrokerConfig
from kbroker.config.errors import ConfigError
from kbroker.security.credentials import SCRAM_MECHANISMS
from kbroker.security.sasl.authenticator import ListenerSasl, SaslConnection, SaslServerAuthenticator
from kbroker.security.sasl.base import SaslAuthenticationError, SaslError
from kbroker.security.sasl.jaas import JaasError, parse_jaas_config
from kbroker.security.sasl.plain import PLAIN, plain_users
from zk_compat.jvm import java_string_hash

if TYPE_CHECKING:
    from kbroker.security import Security

SUPPORTED = (PLAIN, *SCRAM_MECHANISMS)
NOT_SUPPORTED = ("GSSAPI", "OAUTHBEARER")
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")


def listener_value(config: BrokerConfig, listener: str, key: str, mechanism: str | None = None) -> str | None:
    """The raw text of ``listener.name.<l>.<mech>.<key>``, else ``listener.name.<l>.<key>``, else None."""
    prefix = f"listener.name.{listener.lower()}."
    if mechanism is not None:
        value = config.raw.get(f"{prefix}{mechanism.lower()}.{key}")
        if value is not None:
            return value
    return config.raw.get(prefix + key)


def _int_value(config: BrokerConfig, listener: str, key: str, default: int, mechanism: str | None = None) -> int:
    text = listener_value(config, listener, key, mechanism)
    if text is None:
        return default
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"listener.name.{listener.lower()}...{key}: expected an int, got {text!r}") from None


def java_hashset_order(names: list[str]) -> list[str]:
    """The order of ``new ArrayList<>(new HashSet<>(names))`` in Java, which is how Kafka lists the
    enabled mechanisms in SaslHandshake responses."""
    unique = list(dict.fromkeys(names))
    capacity = 16
    while capacity < int(len(unique) / 0.75) + 1:
        capacity *= 2

    def bucket(s: str) -> int:
        h = java_string_hash(s)
        return (h ^ (h >> 16)) & (capacity - 1)
    return sorted(unique, key=bucket)   # stable: same-bucket names keep insertion order


def listener_sasl(config: BrokerConfig, listener: str, security: Security | None) -> ListenerSasl:
    """A SASL listener's settings from the broker config; ConfigError for what Kafka would refuse to
    start with, or what this broker does not serve (GSSAPI, OAUTHBEARER)."""
    text = listener_value(config, listener, "sasl.enabled.mechanisms")
    mechanisms = ([m.strip() for m in text.split(",") if m.strip()] if text is not None
                  else list(config.sasl_enabled_mechanisms))
    lower = listener.lower()
    if not mechanisms:
        raise ConfigError(f"listener {listener} is {SASL_PROTOCOLS} but no SASL mechanism is enabled "
                          f"(sasl.enabled.mechanisms or listener.name.{lower}.sasl.enabled.mechanisms)")
    for mechanism in mechanisms:
        if mechanism in NOT_SUPPORTED:
            raise ConfigError(
                f"listener {listener}: SASL mechanism {mechanism} is not supported by kbroker (it serves "
                f"{', '.join(SUPPORTED)}); set sasl.enabled.mechanisms or "
                f"listener.name.{lower}.sasl.enabled.mechanisms (the default is GSSAPI)")
        if mechanism not in SUPPORTED:
            raise ConfigError(f"listener {listener}: unknown SASL mechanism {mechanism!r} (kbroker serves "
                              f"{', '.join(SUPPORTED)})")
    users: dict[str, str] = {}
    if PLAIN in mechanisms:
        jaas = (listener_value(config, listener, "sasl.jaas.config", PLAIN)
                or config.raw.get("sasl.jaas.config") or None)
        if not jaas:
            raise ConfigError(f"listener {listener}: PLAIN is enabled but no JAAS login module lists its users; set "
                              f"listener.name.{lower}.plain.sasl.jaas.config to "
                              "org.apache.kafka.common.security.plain.PlainLoginModule required "
                              "user_<name>=\"<password>\" ...;")
        try:
            users = plain_users(parse_jaas_config(jaas))
        except JaasError as exc:
            raise ConfigError(f"listener {listener}: PLAIN JAAS config: {exc}") from None
    reauth = {m: _int_value(config, listener, "connections.max.reauth.ms", config.connections_max_reauth_ms, m)
              for m in mechanisms}
    return ListenerSasl(
        listener=listener,
        mechanisms=java_hashset_order(mechanisms),
        plain_users=users,
        credentials=security.credentials if security is not None else None,
        failed_delay_s=_int_value(config, listener, "connection.failed.authentication.delay.ms",
                                  config.connection_failed_authentication_delay_ms) / 1000,
        max_receive_size=_int_value(config, listener, "sasl.server.max.receive.size",
                                    config.sasl_server_max_receive_size),
        reauth_ms=reauth)


def authenticator_factory(config: BrokerConfig, listener_name: str, security_protocol: str,
                          security: Security | None) -> Callable[[Any], SaslServerAuthenticator | None]:
    """What a listener's NetworkServer calls for every accepted connection (``new_authenticator``):
    None on PLAINTEXT and SSL listeners, a fresh SaslServerAuthenticator on SASL_PLAINTEXT and
    SASL_SSL ones. Raises ConfigError at startup for a SASL listener Kafka would refuse, or one asking
    for GSSAPI / OAUTHBEARER."""
    if security_protocol not in SASL_PROTOCOLS:
        return lambda conn: None
    settings = listener_sasl(config, listener_name, security)

    def new_authenticator(conn: SaslConnection) -> SaslServerAuthenticator:
        return SaslServerAuthenticator(settings, conn)
    return new_authenticator


__all__ = ["ListenerSasl", "SaslAuthenticationError", "SaslError", "SaslServerAuthenticator",
           "authenticator_factory", "java_hashset_order", "listener_sasl", "listener_value"]
