"""SCRAM credentials (``/config/users/<u>``, Kafka's ``salt=...,stored_key=...`` strings) and PLAIN
users (``user_<name>="<password>"`` JAAS options). Scaffolding: the SASL work fills this in."""
from __future__ import annotations

from kbroker.config import BrokerConfig

from .entity_configs import EntityConfigs


class CredentialCache:
    def __init__(self, config: BrokerConfig, entity_configs: EntityConfigs) -> None:
        self.config = config
        self.entity_configs = entity_configs
