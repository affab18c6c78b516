"""Connection limits shared by all of a broker's listeners: Kafka's ``max.connections`` and
``max.connections.per.ip`` (with ``max.connections.per.ip.overrides``).

As in Kafka's ConnectionQuotas: a connection from an address that already holds its per-IP maximum
is accepted and closed at once; when the broker holds ``max.connections`` the listeners stop
accepting (new connections wait in the kernel's backlog) until one closes, except the
inter-broker listener, whose connections are let in beyond the limit so replication never waits
on clients.

All three are dynamic broker configs (KIP-226, Kafka's SocketServer.reconfigure): ``apply_config`` takes new
values at run time; the connections already open stay, a raised limit lets waiting ones in at once.
"""
from __future__ import annotations

import collections
import socket
from collections.abc import Callable

from kbroker.config.broker import BrokerConfig

UNLIMITED = 2**31 - 1  # Kafka's default for both keys (Int.MaxValue)


def parse_overrides(text: str) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: ``host:count,host:count`` -> {ip: count}; a host name is
    resolved once, here. Raises ValueError on a malformed entry."""
    out: dict[str, int] = {}
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        host, sep, count = entry.rpartition(":")
        if not sep or not host or not count.strip().isdigit():
            raise ValueError(f"max.connections.per.ip.overrides: {entry!r} is not host:count")
        host = host.strip().strip("[]")
        try:
            ip = socket.gethostbyname(host) if not _is_ip(host) else host
        except OSError as exc:
            raise ValueError(f"max.connections.per.ip.overrides: cannot resolve {host!r}: {exc}") from None
        out[ip] = int(count)
    return out


def _is_ip(host: str) -> bool:
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host)
            return True
        except OSError:
            pass
    return False


class ConnectionLimits:
    def __init__(self, max_connections: int = UNLIMITED, per_ip: int = UNLIMITED,
                 per_ip_overrides: dict[str, int] | None = None) -> None:
        self.max_connections = max_connections
        self.per_ip = per_ip
        self.per_ip_overrides = dict(per_ip_overrides or {})
        self.total = 0
        self.by_ip: collections.Counter[str] = collections.Counter()
        self._waiting: list[Callable[[], None]] = []  # listeners paused on max.connections

    @classmethod
    def from_config(cls, config: BrokerConfig) -> ConnectionLimits:
        """Raises ValueError on a malformed max.connections.per.ip.overrides."""
        return cls(config.max_connections, config.max_connections_per_ip,
                   parse_overrides(config.max_connections_per_ip_overrides))

    def check_config(self, config: BrokerConfig, changed: frozenset[str]) -> None:
        """SocketServer.validateReconfiguration: the overrides must parse (ValueError with the reason)."""
        if "max.connections.per.ip.overrides" in changed:
            parse_overrides(config.max_connections_per_ip_overrides)

    def apply_config(self, config: BrokerConfig, changed: frozenset[str]) -> None:
        """New limits from a dynamic config change; listeners paused on max.connections resume if it rose."""
        if not changed & {"max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides"}:
            return
        self.max_connections = config.max_connections
        self.per_ip = config.max_connections_per_ip
        try:
            self.per_ip_overrides = parse_overrides(config.max_connections_per_ip_overrides)
        except ValueError:
            pass  # checked before it was written; a host name that stopped resolving keeps the old ones
        self._resume_if_room()

    def _resume_if_room(self) -> None:
        if self._waiting and not self.full():
            waiting, self._waiting = self._waiting, []
            for resume in waiting:
                resume()

    def limit_for(self, ip: str) -> int:
        return self.per_ip_overrides.get(ip, self.per_ip)

    def full(self) -> bool:
        return self.total >= self.max_connections

    def admit(self, ip: str) -> bool:
        """Count a new connection from ``ip``; False (and nothing counted) if its address is at its limit."""
        if self.by_ip[ip] >= self.limit_for(ip):
            return False
        self.by_ip[ip] += 1
        self.total += 1
        return True

    def release(self, ip: str) -> None:
        left = self.by_ip[ip] - 1
        if left > 0:
            self.by_ip[ip] = left
        else:
            del self.by_ip[ip]
        self.total -= 1
        self._resume_if_room()

    def wait_for_slot(self, resume: Callable[[], None]) -> None:
        """Call ``resume`` once a connection closes below max.connections."""
        if resume not in self._waiting:
            self._waiting.append(resume)
