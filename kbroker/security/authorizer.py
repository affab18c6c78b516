"""Kafka's AclAuthorizer over ACLs kept in ZooKeeper. Scaffolding: the ACL work fills this in."""
from __future__ import annotations

from kbroker.config import BrokerConfig
from zk_compat.store import MetadataStore


class Authorizer:
    def __init__(self, config: BrokerConfig, store: MetadataStore) -> None:
        self.config = config
        self.store = store

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


def build_authorizer(config: BrokerConfig, store: MetadataStore) -> Authorizer | None:
    """None when ``authorizer.class.name`` is empty: every request is allowed, as in Kafka."""
    if not config.authorizer_class_name:
        return None
    return Authorizer(config, store)
