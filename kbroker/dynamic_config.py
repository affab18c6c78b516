"""Dynamic broker configs (Kafka's KIP-226): the layers of a broker's configuration and its current value.

Kafka keeps broker configs changed at run time in ZooKeeper, per broker at ``/config/brokers/<id>`` and for every
broker at ``/config/brokers/<default>``. The value a broker runs with is, key by key, the first layer that sets it:

    DYNAMIC_BROKER_CONFIG (per broker) > DYNAMIC_DEFAULT_BROKER_CONFIG > STATIC_BROKER_CONFIG > DEFAULT_CONFIG

This module holds the layers and the resulting typed ``BrokerConfig`` (``current``); it knows nothing of ZooKeeper.
Whoever reads the znodes calls ``update``; the parts that apply a change at run time subscribe with ``subscribe``
and get the new config and the names of the keys whose effective value changed. ``update`` runs on the broker's
event loop (whoever follows ZooKeeper hands the new layers over with ``call_soon_threadsafe``), so subscribers may
touch loop-owned state directly.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping

from kbroker.config import BrokerConfig, build_config

log = logging.getLogger(__name__)

PER_BROKER_SOURCE = "/config/brokers/{id}"
DEFAULT_SOURCE = "/config/brokers/<default>"

# (new config, keys whose effective value changed)
Subscriber = Callable[[BrokerConfig, frozenset[str]], None]


class DynamicBrokerConfig:
    """The static config (server.properties and --override) under the two dynamic layers."""

    def __init__(self, static: BrokerConfig, broker_id: int) -> None:
        self.static = static
        self.broker_id = broker_id
        self.per_broker: dict[str, str] = {}       # /config/brokers/<id>
        self.cluster_default: dict[str, str] = {}  # /config/brokers/<default>
        self.current = static
        self._subscribers: list[Subscriber] = []
        self._lock = threading.RLock()

    @property
    def static_values(self) -> dict[str, str]:
        """The keys server.properties (or --override) set, as written."""
        return dict(self.static.raw)

    def subscribe(self, subscriber: Subscriber) -> None:
        self._subscribers.append(subscriber)

    def effective_raw(self, per_broker: Mapping[str, str] | None = None,
                      cluster_default: Mapping[str, str] | None = None) -> dict[str, tuple[str, str]]:
        """Every set key -> (value, where it came from), the higher layers over the lower."""
        raw = {k: (v, "server.properties") for k, v in self.static.raw.items()}
        default = self.cluster_default if cluster_default is None else cluster_default
        mine = self.per_broker if per_broker is None else per_broker
        raw.update({k: (v, DEFAULT_SOURCE) for k, v in default.items()})
        raw.update({k: (v, PER_BROKER_SOURCE.format(id=self.broker_id)) for k, v in mine.items()})
        return raw

    def build(self, per_broker: Mapping[str, str] | None = None,
              cluster_default: Mapping[str, str] | None = None) -> BrokerConfig:
        """The config these layers give (ConfigError if a value is malformed): validation before a write."""
        return build_config(self.effective_raw(per_broker, cluster_default))

    def update(self, per_broker: Mapping[str, str] | None = None,
               cluster_default: Mapping[str, str] | None = None) -> frozenset[str]:
        """New contents of one or both dynamic layers (None: unchanged). Rebuilds ``current`` and tells the
        subscribers which keys changed. A layer that does not parse is refused whole (logged, old config kept)."""
        with self._lock:
            new_mine = dict(self.per_broker if per_broker is None else per_broker)
            new_default = dict(self.cluster_default if cluster_default is None else cluster_default)
            try:
                new = self.build(new_mine, new_default)
            except ValueError as exc:
                log.error("dynamic broker configs refused, keeping the current ones: %s", exc)
                return frozenset()
            old_raw = {k: v for k, (v, _) in self.effective_raw().items()}
            self.per_broker, self.cluster_default = new_mine, new_default
            new_raw = {k: v for k, (v, _) in self.effective_raw().items()}
            changed = frozenset(k for k in old_raw.keys() | new_raw.keys() if old_raw.get(k) != new_raw.get(k))
            self.current = new
        if changed:
            log.info("broker %d: dynamic configs changed: %s", self.broker_id, ", ".join(sorted(changed)))
            for subscriber in self._subscribers:
                try:
                    subscriber(new, changed)
                except Exception:
                    log.exception("applying dynamic broker configs %s failed", sorted(changed))
        return changed
