"""Entity configs (``/config/<type>/<name>``: topics, brokers, clients, users) and their change notifications
(``/config/changes``), written as Kafka's AdminZkClient does and read in order by ``ConfigChangeReader``.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from zk_compat.store import (
    MetadataStore,
    NodeExistsError,
    NoNodeError,
)
from zk_compat.znodes import (
    DEFAULT_CONFIG_ENTITY,
    ConfigEntityChangeNotificationSequenceZNode,
    ConfigEntityChangeNotificationZNode,
    ConfigEntityZNode,
    sanitize_entity_name,
)

log = logging.getLogger(__name__)



# configs

def _entity_name(entity_type: str, name: str) -> str:
    """Path form of an entity name: users and client ids are sanitized (URL-encoded) except
    the default entity; a user's client entity is written ``<user>/clients/<client id>``."""
    if entity_type not in ("users", "clients"):
        return name

    def one(part: str) -> str:
        return part if part == DEFAULT_CONFIG_ENTITY else sanitize_entity_name(part)

    if entity_type == "users" and "/clients/" in name:
        user, client = name.split("/clients/", 1)
        return f"{one(user)}/clients/{one(client)}"
    return one(name)


def get_entity_config(store: MetadataStore, entity_type: str, name: str) -> dict[str, str]:
    """Config overrides of an entity (``{}`` if it has none). ``name`` unsanitized; a user's
    client quota entity is ``"<user>/clients/<client id>"``."""
    entity = _entity_name(entity_type, name)
    try:
        data, _ = store.get(ConfigEntityZNode.path(entity_type, entity))
    except NoNodeError:
        return {}
    return ConfigEntityZNode.decode(entity_type, entity, data)


def set_entity_config(store: MetadataStore, entity_type: str, name: str, configs: Mapping[str, str]) -> None:
    """Write (set, or create with parents) an entity's config node, without a notification."""
    entity = _entity_name(entity_type, name)
    path = ConfigEntityZNode.path(entity_type, entity)
    data = ConfigEntityZNode.encode(configs)
    try:
        store.set(path, data)
    except NoNodeError:
        try:
            store.create(path, data, makepath=True)
        except NodeExistsError:
            store.set(path, data)


def change_entity_config(store: MetadataStore, entity_type: str, name: str, configs: Mapping[str, str]) -> str:
    """Change an entity's configs as ``AdminZkClient.changeEntityConfig`` does: write the node,
    then create ``/config/changes/config_change_<seq>`` naming it. Returns the notification path."""
    set_entity_config(store, entity_type, name, configs)
    entity_path = f"{entity_type}/{_entity_name(entity_type, name)}"
    return create_config_change_notification(store, entity_path)


def broker_config_entity(broker_id: int | None) -> str:
    """The ``/config/brokers`` entity of one broker's dynamic configs, or of the cluster default (None)."""
    return DEFAULT_CONFIG_ENTITY if broker_id is None else str(broker_id)


def get_broker_config(store: MetadataStore, broker_id: int | None) -> dict[str, str]:
    """A broker's dynamic configs (``/config/brokers/<id>``), or the cluster default's (``<default>``)."""
    return get_entity_config(store, "brokers", broker_config_entity(broker_id))


def change_broker_config(store: MetadataStore, broker_id: int | None, configs: Mapping[str, str]) -> str:
    """AdminZkClient.changeBrokerConfig: the whole layer written, then a ``brokers/<id>`` (or
    ``brokers/<default>``) change notice every broker follows. Returns the notice's path."""
    return change_entity_config(store, "brokers", broker_config_entity(broker_id), configs)


def create_config_change_notification(store: MetadataStore, entity_path: str) -> str:
    return store.create(ConfigEntityChangeNotificationSequenceZNode.create_path(),
                        ConfigEntityChangeNotificationSequenceZNode.encode(entity_path),
                        sequence=True, makepath=True)


class ConfigChangeReader:
    """Kafka's ZkConfigManager reading ``/config/changes``: each new ``config_change_<seq>`` names an entity
    (``topics/t``, ``users/u``, ``brokers/<default>`` ...) whose configs are to be read again. The first call
    only marks where reading starts: a follower reads every config fresh at start, so older notices are moot."""

    def __init__(self) -> None:
        self.last_seq: int | None = None

    def new_entities(self, store: MetadataStore, children: Iterable[str]) -> list[str]:
        """The entity paths of the notices among ``children`` (the names under /config/changes) newer than the
        last one read, oldest first; a notice gone or unreadable is skipped."""
        prefix = ConfigEntityChangeNotificationSequenceZNode.PREFIX
        seqs = sorted((ConfigEntityChangeNotificationSequenceZNode.sequence_number(n), n) for n in children
                      if n.startswith(prefix))
        if self.last_seq is None:
            self.last_seq = seqs[-1][0] if seqs else -1
            return []
        entities = []
        for seq, name in seqs:
            if seq <= self.last_seq:
                continue
            self.last_seq = seq
            try:
                data, _ = store.get(f"{ConfigEntityChangeNotificationZNode.path()}/{name}")
                entities.append(ConfigEntityChangeNotificationSequenceZNode.decode(data))
            except (NoNodeError, ValueError) as exc:
                log.info("config change notice %s skipped: %s", name, exc)
        return entities
