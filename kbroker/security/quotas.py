"""Client quotas. Scaffolding: the quota work fills this in."""
from __future__ import annotations

from kbroker.config import BrokerConfig

from .entity_configs import EntityConfigs


class QuotaManager:
    def __init__(self, config: BrokerConfig, entity_configs: EntityConfigs) -> None:
        self.config = config
        self.entity_configs = entity_configs
