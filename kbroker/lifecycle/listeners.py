"""The broker's listeners at startup: a NetworkServer per listener, each with its TLS and SASL
(``security.connection_security``), bound but not yet accepting (the composition root calls ``listen`` once the
broker can answer), and the endpoints this broker advertises (the bound port where 0 was asked)."""
from __future__ import annotations

from kbroker.config.broker import BrokerConfig
from kbroker.config.dynamic import DynamicBrokerConfig
from kbroker.config.errors import ConfigError
from kbroker.handlers.dispatcher import Dispatcher
from kbroker.metadata.zk_view import LiveBroker
from kbroker.metrics import BrokerMetrics
from kbroker.network.limits import ConnectionLimits
from kbroker.network.server import NetworkServer
from kbroker.security import ListenerTls, Security
from kbroker.security.connection_security import listener_security
from kbroker.security.listeners import Listeners


def bind_listeners(cfg: BrokerConfig, broker_id: int, listeners: Listeners, security: Security,
                   dispatcher: Dispatcher, metrics: BrokerMetrics | None, dynamic_config: DynamicBrokerConfig,
                   servers: list[NetworkServer]) -> LiveBroker:
    """Bind every listener, each server added to ``servers`` before it binds (the caller's, so that a listener failing
    to bind leaves it the ones to stop); the connection limits and the listeners' TLS follow the dynamic configs
    (KIP-226). Returns this broker as it registers: the inter-broker listener's address first."""
    try:
        limits = ConnectionLimits.from_config(cfg)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    endpoints = []
    for spec in listeners.specs:
        secured = listener_security(cfg, spec, listeners.settings[spec.name], security)
        server = NetworkServer(spec.bind.host, spec.bind.port, dispatcher,
                               max_request_bytes=cfg.socket_request_max_bytes,
                               send_buffer_bytes=cfg.socket_send_buffer_bytes,
                               receive_buffer_bytes=cfg.socket_receive_buffer_bytes,
                               idle_ms=cfg.connections_max_idle_ms, listener_name=spec.name,
                               security_protocol=spec.protocol, ssl_context=secured.ssl_context,
                               principal_of=secured.principal_of, new_authenticator=secured.new_authenticator,
                               limits=limits, inter_broker=spec.name == listeners.inter_broker, metrics=metrics)
        servers.append(server)
        server.bind()
        if spec.announced:
            advertised = spec.advertised
            host = advertised.host if advertised.host not in ("0.0.0.0", "") else "127.0.0.1"
            port = server.port if advertised.port == 0 else advertised.port
            endpoints.append((spec.name, host, port, spec.protocol))
    tls = ListenerTls(list(servers), cfg)
    dynamic_config.reconfigurable(limits.check_config, limits.apply_config)
    dynamic_config.reconfigurable(tls.check_config, tls.apply_config)
    _, host, port, _ = next((e for e in endpoints if e[0] == listeners.inter_broker), endpoints[0])
    return LiveBroker(broker_id, host, port, cfg.broker_rack or None, endpoints=tuple(endpoints))
