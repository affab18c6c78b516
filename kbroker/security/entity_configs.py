"""Client, user and broker configs from ZooKeeper (``/config/users``, ``/config/clients``, ``/config/brokers``),
kept current.

Kafka's ZkConfigManager: every entity is read at start, then each new
``/config/changes/config_change_<seq>`` names one entity (``users/alice``, ``clients/c1``,
``users/alice/clients/c1``, with ``<default>`` in any place) whose znode is read again; the
notice is only a trigger. SCRAM credentials (``SCRAM-SHA-256`` ...) and quotas
(``producer_byte_rate`` ...) both live in these znodes; their owners subscribe here. Dynamic broker configs
(``brokers/<id>``, ``brokers/<default>``, Kafka's BrokerConfigHandler) go to their own subscribers
(``subscribe_brokers``).

Works over the embedded store and over ZooKeeper: callbacks run on the store's event thread.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from zk_compat.layout import ConfigChangeReader
from zk_compat.store import ChildrenWatch, MetadataStore, NoNodeError
from zk_compat.znodes import (
    ConfigEntityChangeNotificationZNode as Changes,
    ConfigEntityZNode,
    desanitize_entity_name,
)

log = logging.getLogger(__name__)

DEFAULT = "<default>"
# (entity path, configs) after each (re)read; configs empty when the entity is gone
Listener = Callable[[str, dict[str, str]], None]


def parse_entity_path(path: str) -> tuple[str | None, str | None]:
    """``users/alice/clients/c1`` -> ("alice", "c1"); ``clients/<default>`` -> (None, "<default>").
    Names come back desanitized; ``<default>`` stays literal. Raises ValueError on other shapes."""
    parts = path.split("/")
    if len(parts) == 2 and parts[0] in ("users", "clients"):
        name = parts[1] if parts[1] == DEFAULT else desanitize_entity_name(parts[1])
        return (name, None) if parts[0] == "users" else (None, name)
    if len(parts) == 4 and parts[0] == "users" and parts[2] == "clients":
        user = parts[1] if parts[1] == DEFAULT else desanitize_entity_name(parts[1])
        client = parts[3] if parts[3] == DEFAULT else desanitize_entity_name(parts[3])
        return user, client
    raise ValueError(f"not a user or client entity path: {path!r}")


class EntityConfigs:
    """Every user / client / user+client entity's configs, by entity path (``users/alice``)."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store
        self.configs: dict[str, dict[str, str]] = {}
        self.broker_configs: dict[str, dict[str, str]] = {}  # brokers/<id> and brokers/<default>
        self._listeners: list[Listener] = []
        self._broker_listeners: list[Listener] = []
        self._lock = threading.RLock()
        self._changes = ConfigChangeReader()
        self._watch: ChildrenWatch | None = None

    def subscribe(self, listener: Listener) -> None:
        """Call ``listener(path, configs)`` for every entity known now and every change after."""
        with self._lock:
            self._listeners.append(listener)
            for path, configs in list(self.configs.items()):
                listener(path, configs)

    def subscribe_brokers(self, listener: Listener) -> None:
        """Call ``listener(path, configs)`` for every broker entity (``brokers/1``, ``brokers/<default>``) known
        now and after every change; configs empty when the entity is gone."""
        with self._lock:
            self._broker_listeners.append(listener)
            for path, configs in list(self.broker_configs.items()):
                listener(path, configs)

    def start(self) -> None:
        """Read everything, then follow /config/changes. Blocking: run off the event loop on ZooKeeper."""
        with self._lock:
            for path in self._all_entity_paths():
                self._reload(path)
        self._watch = ChildrenWatch(self.store, Changes.path(), self._on_changes)

    def stop(self) -> None:
        if self._watch is not None:
            self._watch.stop()

    def reload(self, path: str) -> None:
        """Re-read one entity now (what a broker does after writing it itself)."""
        with self._lock:
            self._reload(path)

    # -- reading ---------------------------------------------------------------------------

    def _children(self, path: str) -> list[str]:
        try:
            return self.store.get_children(path)
        except NoNodeError:
            return []

    def _all_entity_paths(self) -> list[str]:
        out = [f"clients/{c}" for c in self._children("/config/clients")]
        for user in self._children("/config/users"):
            out.append(f"users/{user}")
            out += [f"users/{user}/clients/{c}" for c in self._children(f"/config/users/{user}/clients")]
        return out + [f"brokers/{b}" for b in self._children("/config/brokers")]

    def _reload(self, path: str) -> None:
        kind, _, name = path.partition("/")
        try:
            data, _ = self.store.get(ConfigEntityZNode.path(kind, name))
            configs = ConfigEntityZNode.decode(kind, name, data)
        except NoNodeError:
            configs = {}
        except ValueError:  # a corrupt znode: keep serving with what we had (its text may hold secrets: not logged)
            log.error("unreadable configs of %s ignored: the znode is not Kafka's {\"version\":1,\"config\":{...}} "
                      "with string values", path)
            return
        known, listeners = ((self.broker_configs, self._broker_listeners) if kind == "brokers"
                            else (self.configs, self._listeners))
        if configs:
            known[path] = configs
        else:
            known.pop(path, None)
        for listener in listeners:
            try:
                listener(path, configs)
            except Exception:
                log.exception("applying the configs of %s failed", path)

    def _on_changes(self, children: list[str] | None, event: object) -> None:
        with self._lock:  # the first call only marks where to start: start() read everything already
            for entity in self._changes.new_entities(self.store, children or ()):
                if entity.startswith(("users/", "clients/", "brokers/")):
                    self._reload(entity)
