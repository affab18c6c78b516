"""The handler registry: ``@handles(api_key)`` puts a handler in ``HANDLERS``, which the dispatcher
dispatches from and ApiVersions advertises from."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kbroker.handlers.context import BrokerContext

Handler = Callable[[BrokerContext, Any, Any, Any], Any]
HANDLERS: dict[int, Handler] = {}


def handles(api_key: int) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        if api_key in HANDLERS:
            raise RuntimeError(f"two handlers for api key {api_key}")
        HANDLERS[api_key] = fn
        return fn
    return register
