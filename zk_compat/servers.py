"""Which brokers share a server: the physical failure domain that replica placement keeps apart.

Several broker processes may run on one machine (kbroker's host mode, or an operator's own setup).
Kafka's placement knows only broker ids and ``broker.rack``; two replicas of a partition on two
processes of one machine are lost together, the classic pitfall of running brokers side by side.

A server is known by the host names a broker advertises: the host of each endpoint of its
registration (``/brokers/ids/<id>``, as Kafka's ``BrokerInfo`` writes it). Brokers that advertise a
common host are one server, and so, transitively, are brokers linked through one (a broker that
advertises ``kb1.example.net`` for clients and ``10.0.0.5`` between brokers is on one server with
every other broker advertising either). Names are compared as written, case-folded (DNS names are
case-insensitive), never resolved: placement must not wait on DNS, and ``localhost`` next to
``127.0.0.1`` is a setup this cannot see. A server is named by the smallest of its host names.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence


def servers_of(advertised_hosts: Mapping[int, Iterable[str]]) -> dict[int, str]:
    """Broker id -> the name of its server, from each broker's advertised host names. A broker that
    advertises no host (an older registration without endpoints) is a server of its own."""
    parent: dict[str, str] = {}

    def root(host: str) -> str:
        while parent[host] != host:
            parent[host] = parent[parent[host]]
            host = parent[host]
        return host

    hosts_of: dict[int, list[str]] = {}
    for broker_id, hosts in advertised_hosts.items():
        names = sorted({h.lower() for h in hosts if h})
        hosts_of[broker_id] = names
        for name in names:
            parent.setdefault(name, name)
        for name in names[1:]:  # one broker's hosts are one server: union them, the smaller name as root
            a, b = root(names[0]), root(name)
            if a != b:
                parent[max(a, b)] = min(a, b)
    return {broker_id: root(names[0]) if names else f"broker-{broker_id}"
            for broker_id, names in hosts_of.items()}


def shares_servers(servers: Mapping[int, str]) -> bool:
    """Whether any two of these brokers are on one server."""
    return len(set(servers.values())) < len(servers)


def crowded_servers(replicas: Sequence[int], servers: Mapping[int, str]) -> dict[str, list[int]]:
    """Server -> the replicas on it, for every server that holds more than one of ``replicas``
    (brokers the map does not know are left out: an unknown broker is refused elsewhere)."""
    on: dict[str, list[int]] = {}
    for broker_id in replicas:
        server = servers.get(broker_id)
        if server is not None:
            on.setdefault(server, []).append(broker_id)
    return {server: ids for server, ids in on.items() if len(ids) > 1}
