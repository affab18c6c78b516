"""Connection limits shared by all of a broker's listeners: Kafka's ``max.connections`` and
``max.connections.per.ip`` (with ``max.connections.per.ip.overrides``).

As in Kafka's ConnectionQuotas: a connection from an address that already holds its per-IP maximum
is accepted and closed at once; when the broker holds ``max.connections`` the listeners stop
accepting (new connections wait in the kernel's backlog) until one closes, except the
inter-broker listener, whose connections are let in beyond the limit so replication never waits
on clients.
"""
from __future__ import annotations

import collections
import socket
from collections.abc import Callable

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
        if self._waiting and not self.full():
            waiting, self._waiting = self._waiting, []
            for resume in waiting:
                resume()

    def wait_for_slot(self, resume: Callable[[], None]) -> None:
        """Call ``resume`` once a connection closes below max.connections."""
        if resume not in self._waiting:
            self._waiting.append(resume)
