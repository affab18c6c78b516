"""What secures this broker's connections, built from the configuration at startup: for each listener the
server-side TLS context, the certificate-to-principal mapper and the SASL authenticator factory its
NetworkServer takes; for the broker's own connections to the others' inter-broker listener the client TLS
context and the SASL login (``sasl.mechanism.inter.broker.protocol`` with the JAAS username and password), as
Kafka's ``ChannelBuilders.serverChannelBuilder`` and ``clientChannelBuilder`` build them
(apache/kafka ``clients/src/main/java/org/apache/kafka/common/network/ChannelBuilders.java``).

Every refusal is a ``ConfigError``: the broker does not start, as Kafka does not."""
from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from kbroker.config.broker import BrokerConfig
from kbroker.config.errors import ConfigError
from kbroker.interbroker.client import ClientSecurity, Request
from kbroker.security import Security
from kbroker.security.listeners import SASL_PROTOCOLS, TLS_PROTOCOLS, ListenerConfig, Listeners, ListenerSpec
from kbroker.security.principal import KafkaPrincipal
from kbroker.security.tls import PrincipalMapper, TlsConfigError, client_context, server_context


@dataclass(frozen=True)
class ListenerSecurity:
    """The security arguments of one listener's NetworkServer (all None on PLAINTEXT)."""
    ssl_context: ssl.SSLContext | None = None
    principal_of: Callable[[bytes | None], KafkaPrincipal] | None = None  # SSL: the certificate names the principal
    new_authenticator: Callable[[Any], Any] | None = None    # SASL: a fresh authenticator per connection


def listener_security(config: BrokerConfig, spec: ListenerSpec, settings: ListenerConfig,
                      security: Security) -> ListenerSecurity:
    context = principal_of = new_authenticator = None
    try:
        if spec.tls:
            context = server_context(settings, spec.protocol)
        if spec.protocol == "SSL":
            principal_of = PrincipalMapper(settings.get("ssl.principal.mapping.rules")).principal
    except (TlsConfigError, ValueError) as exc:
        raise ConfigError(str(exc)) from None
    if spec.sasl:
        from kbroker.security.sasl import authenticator_factory
        new_authenticator = authenticator_factory(config, spec.name, spec.protocol, security)
    return ListenerSecurity(context, principal_of, new_authenticator)


def inter_broker_client_security(config: BrokerConfig, listeners: Listeners) -> ClientSecurity:
    """How this broker connects to the others' inter-broker listener: TLS with a client context,
    SASL with sasl.mechanism.inter.broker.protocol and its JAAS username and password."""
    name, protocol = listeners.inter_broker, listeners.inter_broker_protocol
    settings = listeners.settings.get(name) or ListenerConfig(config, name)
    context, check = None, False
    if protocol in TLS_PROTOCOLS:
        try:
            tls = client_context(settings)
        except TlsConfigError as exc:
            raise ConfigError(str(exc)) from None
        context, check = tls.context, tls.check_hostname
    authenticate = None
    if protocol in SASL_PROTOCOLS:
        authenticate = _inter_broker_sasl(config, name)
    return ClientSecurity(context, check, authenticate, protocol)


def _inter_broker_sasl(config: BrokerConfig, listener: str) -> Callable[[Request], Awaitable[Any]]:
    from kbroker.security.sasl import listener_value
    from kbroker.security.sasl.jaas import JaasError, parse_jaas_config
    from kbroker.security.sasl_client import authenticate
    mechanism = config.sasl_mechanism_inter_broker_protocol.strip().upper()
    key = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
    text = listener_value(config, listener, "sasl.jaas.config", mechanism) or config.raw.get("sasl.jaas.config")
    if not text:
        raise ConfigError(f"the inter-broker listener {listener} uses SASL {mechanism}: set {key} with the "
                          "username and password this broker authenticates with")
    try:
        options = parse_jaas_config(text).options
    except JaasError as exc:
        raise ConfigError(f"{key}: {exc}") from None
    username, password = options.get("username"), options.get("password")
    if not username or password is None:
        raise ConfigError(f"{key}: the inter-broker login needs username=\"...\" and password=\"...\"")

    def login(request: Request) -> Awaitable[Any]:
        return authenticate(request, mechanism, username, password)
    return login
