"""Authorization, the check every handler makes (Kafka's KafkaApis.authorize): ``allowed`` on one resource,
``cluster_allowed`` on the cluster, ``topic_filter`` over many topics, ``authorized_operations`` (KIP-430).

Without an authorizer (``authorizer.class.name`` empty) every check passes at the cost of one attribute test.
The ACL APIs themselves are in ``kbroker.handlers.acls``.
"""
from __future__ import annotations

import logging
from collections.abc import Callable

from kbroker.handlers.context import BrokerContext
from kbroker.handlers.registry import ClientConnection
from kbroker.protocol.messages.acls import CLUSTER_NAME, SUPPORTED_OPERATIONS, AclOperation, ResourceType

log = logging.getLogger(__name__)

Op = AclOperation
Res = ResourceType


def allowed(ctx: BrokerContext, conn: ClientConnection, operation: AclOperation, resource_type: ResourceType, name: str,
            log_denied: bool = True) -> bool:
    """May this connection's principal do ``operation`` on the resource? True without an authorizer."""
    authorizer = ctx.security.authorizer
    if authorizer is None:
        return True
    return authorizer.authorize(conn.session, operation, resource_type, name, log_denied)


def cluster_allowed(ctx: BrokerContext, conn: ClientConnection, operation: AclOperation) -> bool:
    return allowed(ctx, conn, operation, ResourceType.CLUSTER, CLUSTER_NAME)


def authorized_operations(ctx: BrokerContext, conn: ClientConnection, resource_type: ResourceType, name: str) -> int:
    """Kafka's authorized-operations bit field (bit = operation code) over the operations the
    resource type supports: what Metadata, DescribeCluster and DescribeGroups answer when asked."""
    authorizer = ctx.security.authorizer
    bits = 0
    for op in SUPPORTED_OPERATIONS[resource_type]:
        if authorizer is None or authorizer.authorize(conn.session, op, resource_type, name, log_denied=False):
            bits |= 1 << op
    return bits


def topic_filter(ctx: BrokerContext, conn: ClientConnection,
                 operation: AclOperation) -> Callable[[str], bool] | None:
    """A function topic -> allowed (memoized for one request), or None without an authorizer."""
    authorizer = ctx.security.authorizer
    if authorizer is None:
        return None
    seen: dict[str, bool] = {}
    session = conn.session

    def check(topic: str) -> bool:
        ok = seen.get(topic)
        if ok is None:
            ok = seen[topic] = authorizer.authorize(session, operation, ResourceType.TOPIC, topic)
        return ok
    return check
