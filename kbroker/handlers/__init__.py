"""Request handlers: one function per API, registered by key. ApiVersions advertises exactly the
registered keys (at the versions the protocol package implements), so what we advertise cannot
drift from what we serve.

A handler takes (broker, header, request body, connection) and returns a response body (a dict or
message object), an awaitable of one, ``NO_RESPONSE`` or ``CLOSE``.
"""
from __future__ import annotations

from typing import Any, Callable

from kbroker.network.connection import CLOSE, NO_RESPONSE

Handler = Callable[[Any, Any, Any, Any], Any]
HANDLERS: dict[int, Handler] = {}


def handles(api_key: int) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        if api_key in HANDLERS:
            raise RuntimeError(f"two handlers for api key {api_key}")
        HANDLERS[api_key] = fn
        return fn
    return register


def load_all() -> dict[int, Handler]:
    from . import admin, api_versions, controller, fetch, groups, metadata, produce, txn  # noqa: F401  (registration)
    return HANDLERS


__all__ = ["CLOSE", "HANDLERS", "NO_RESPONSE", "handles", "load_all"]
