"""Security: who a connection is (TLS, SASL), what it may do (ACLs), how fast it may go (quotas).

    principal.py       KafkaPrincipal, Session (what a connection carries; handlers check it)
    entity_configs.py  /config/users and /config/clients, followed through /config/changes
    credentials.py     SCRAM credentials (from entity configs) and PLAIN users (from JAAS options)
    authorizer.py      ACLs in ZooKeeper (/kafka-acl...), Kafka's AclAuthorizer rules
    quotas.py          client quotas (producer/consumer byte rates, request percentage), KIP-219 throttling

``Security`` is built once by the broker and reached by handlers as ``ctx.security``.
"""
from __future__ import annotations

from kbroker.config.broker import BrokerConfig
from kbroker.security.authorizer import Authorizer, build_authorizer
from kbroker.security.credentials import CredentialCache
from kbroker.security.entity_configs import EntityConfigs
from kbroker.security.listeners import ListenerTls
from kbroker.security.principal import ANONYMOUS, KafkaPrincipal, Session
from kbroker.security.quotas import QuotaManager
from zk_compat.store import MetadataStore


class Security:
    def __init__(self, config: BrokerConfig, store: MetadataStore) -> None:
        self.config = config
        self.entity_configs = EntityConfigs(store)
        self.credentials = CredentialCache(config, self.entity_configs)
        self.authorizer: Authorizer | None = build_authorizer(config, store)  # None: everything allowed
        self.quotas = QuotaManager(config, self.entity_configs)

    def start(self) -> None:
        """Read credentials, quotas and ACLs and start following their changes. Blocking: in
        ZooKeeper mode run it off the event loop."""
        self.entity_configs.start()
        if self.authorizer is not None:
            self.authorizer.start()

    def stop(self) -> None:
        self.entity_configs.stop()
        if self.authorizer is not None:
            self.authorizer.stop()


__all__ = ["ANONYMOUS", "Authorizer", "CredentialCache", "EntityConfigs", "KafkaPrincipal", "ListenerTls",
           "QuotaManager", "Security", "Session"]
