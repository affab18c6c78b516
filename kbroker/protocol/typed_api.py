"""What the generated message declarations (``message_types.pyi``, written by ``typegen``) stand on.

``TypedApi[Req, Resp]`` names one API together with its request class and its response shape, so that
``@handles(message_types.PRODUCE)`` tells mypy which request a handler reads and which answer it returns.
At run time it is only the key and the name: the classes it names exist for the type checker.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

if TYPE_CHECKING:
    from kbroker.protocol.schema import Api

Req = TypeVar("Req")
Resp = TypeVar("Resp")


class TypedApi(Generic[Req, Resp]):
    __slots__ = ("key", "name")

    def __init__(self, key: int, name: str) -> None:
        self.key = key
        self.name = name

    def __repr__(self) -> str:
        return f"TypedApi({self.key}, {self.name})"


class FileSlice(Protocol):
    """A records value the network layer sends with sendfile: a range of a log file (``log.segment.FileSlice``)."""

    @property
    def length(self) -> int: ...



def constant_name(api: Api) -> str:
    """Kafka's name of the API in upper snake case, the name of its ``TypedApi``: ListOffsets -> LIST_OFFSETS."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", api.name).upper()
