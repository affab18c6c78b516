"""Request handlers: one function per API, registered by key. ApiVersions advertises exactly the
registered keys (at the versions the protocol package implements), so what we advertise cannot
drift from what we serve.

A handler takes (context, header, request, connection) and returns its answer (a dict), ``NO_RESPONSE`` or
``CLOSE``, or an awaitable of one; ``@handles(message_types.PRODUCE)`` types the request and the answer for mypy
(``registry``). The context (``handlers.context.BrokerContext``) is what a handler may use of the broker: the
replica manager, the topic admin, the coordinators, and in ZooKeeper mode the controller's parts.
"""
from __future__ import annotations

from kbroker.handlers.context import BrokerContext
from kbroker.handlers.registry import HANDLERS, Handler, handles
from kbroker.protocol.outcome import CLOSE, NO_RESPONSE


def load_all() -> dict[int, Handler]:
    """Import every handler module (each registers its APIs) and return the registry."""
    from kbroker.handlers import (  # noqa: F401
        acls,
        admin,
        alter_configs,
        alter_isr,
        api_versions,
        controller,
        delegation_tokens,
        describe_configs,
        describe_producers,
        elections,
        fetch,
        groups,
        log_dirs,
        metadata,
        produce,
        quotas,
        sasl,
        scram,
        txn,
        update_features,
    )
    return HANDLERS


__all__ = ["CLOSE", "BrokerContext", "HANDLERS", "Handler", "NO_RESPONSE", "handles", "load_all"]
