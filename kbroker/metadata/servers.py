"""The servers (machines) live brokers run on, from what they advertise, and the warning for an
explicit assignment that puts two replicas of a partition on one of them.

Placement by the broker keeps replicas on distinct servers (``zk_compat.assignment``). An operator's
own assignment (CreateTopics or CreatePartitions with assignments, AlterPartitionReassignments,
``/admin/reassign_partitions``) is accepted as Kafka accepts it, and only logged: the operator may
know better (a test cluster, a move in two steps), and Kafka's clients expect it to succeed.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence

from kbroker.metadata.zk_view import LiveBroker
from zk_compat.servers import crowded_servers, servers_of

log = logging.getLogger(__name__)


def broker_servers(brokers: Iterable[LiveBroker]) -> dict[int, str]:
    """Broker id -> server, from the hosts of every endpoint in each broker's registration (its one
    address when it registered none)."""
    return servers_of({b.id: [host for _, host, _, _ in b.endpoints] or [b.host] for b in brokers})


def warn_crowded(what: str, topic: str, assignment: Mapping[int, Sequence[int]],
                 servers: Mapping[int, str]) -> bool:
    """Log a warning for each partition of ``assignment`` with two replicas on one server; whether
    there was any."""
    crowded = False
    for index in sorted(assignment):
        for server, ids in crowded_servers(assignment[index], servers).items():
            crowded = True
            log.warning("%s: %s-%d has replicas %s on one server (%s), which its failure takes down together; "
                        "accepted as requested", what, topic, index, ",".join(map(str, ids)), server)
    return crowded
