"""The handler registry: ``@handles(message_types.PRODUCE)`` puts a handler in ``HANDLERS``, which the dispatcher
dispatches from and ApiVersions advertises from.

The API names its request class and its answer's shape (``kbroker.protocol.message_types``, generated from the
schemas), so mypy checks that the handler reads that request and returns that answer: a response body,
``NO_RESPONSE`` or ``CLOSE``, or an awaitable of one (the connection awaits it)."""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeAlias, TypeVar

from kbroker.handlers.context import BrokerContext
from kbroker.protocol.header import RequestHeader
from kbroker.protocol.outcome import Outcome
from kbroker.protocol.typed_api import TypedApi
from kbroker.security.principal import Session

Req = TypeVar("Req")
Resp = TypeVar("Resp")


class ClientConnection(Protocol):
    """What a handler may use of the connection its request came on (the network layer's Connection)."""

    @property
    def session(self) -> Session: ...

    @property
    def client_host(self) -> str: ...

    def mute(self, seconds: float) -> None: ...


Answer: TypeAlias = "Resp | Outcome | Awaitable[Resp | Outcome]"
TypedHandler: TypeAlias = "Callable[[BrokerContext, RequestHeader, Req, ClientConnection], Answer[Resp]]"
Handler: TypeAlias = "TypedHandler[Any, Any]"
HANDLERS: dict[int, Handler] = {}


def handles(api: TypedApi[Req, Resp]) -> Callable[[TypedHandler[Req, Resp]], TypedHandler[Req, Resp]]:
    def register(fn: TypedHandler[Req, Resp]) -> TypedHandler[Req, Resp]:
        if api.key in HANDLERS:
            raise RuntimeError(f"two handlers for api key {api.key}")
        HANDLERS[api.key] = fn
        return fn
    return register
