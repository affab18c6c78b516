"""What a request handler may answer instead of a response body: the contract between the handlers
(which decide) and the network layer (which carries it out). Neither imports the other."""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Final, TypeAlias, TypeVar

T = TypeVar("T")


class _Outcome:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


Outcome = _Outcome  # the type, for a handler's return annotation

NO_RESPONSE: Final = _Outcome("NO_RESPONSE")  # send nothing (Produce acks=0)
CLOSE: Final = _Outcome("CLOSE")              # close the connection (an acks=0 failure, as Kafka)


class Deferred(asyncio.Future[T]):
    """An answer that a delayed operation completes later (the purgatory's acks=all produces and parked fetches).

    It is an ``asyncio.Future`` (coroutines await it as usual), and its ``when_done`` listeners run inside the
    call that completes it, not on a later turn of the loop as ``add_done_callback``'s do: the network layer
    sends a parked follower fetch's answer from within the leader's append that woke it, and a produce's from
    within the follower fetch that moved the high watermark, as Kafka's purgatory completes its operations
    in the thread that made them completable (apache/kafka core/src/main/scala/kafka/server/DelayedOperation.scala,
    checkAndComplete)."""

    def __init__(self, *, loop: asyncio.AbstractEventLoop | None = None) -> None:
        super().__init__(loop=loop)
        self._listeners: list[Callable[[Deferred[T]], None]] = []

    def when_done(self, listener: Callable[[Deferred[T]], None]) -> None:
        """Call ``listener(self)`` once done: now if it is, else from within the completing call."""
        if self.done():
            listener(self)
        else:
            self._listeners.append(listener)

    def _fire(self) -> None:
        listeners, self._listeners = self._listeners, []
        for listener in listeners:
            listener(self)

    def set_result(self, result: T) -> None:
        super().set_result(result)
        self._fire()

    def set_exception(self, exception: type | BaseException) -> None:
        super().set_exception(exception)
        self._fire()

    def cancel(self, msg: object | None = None) -> bool:
        cancelled = super().cancel(msg)
        if cancelled:
            self._fire()
        return cancelled


# What a dispatched request comes back as, seen from the network layer: an answer body (a handler's TypedDict:
# the encoder takes any mapping of the response's fields), an outcome, or an awaitable of either (a Deferred
# from the purgatory, a coroutine that waits).
Reply: TypeAlias = "Mapping[str, object] | Outcome | Awaitable[Mapping[str, object] | Outcome]"
