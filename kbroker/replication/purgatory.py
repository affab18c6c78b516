"""Delayed operations (Kafka's purgatory): requests that wait for data or for replicas.

An operation is watched under keys (topic-partitions); ``check(key)`` after an append or a high
watermark change tries to complete the operations watching it; a timeout registered in the Cython
timing wheel forces completion. Each operation completes exactly once (``try_complete`` vs
``force_complete``, decided by the ``completed`` flag), and is removed from every watch list and
from the wheel when it does, so long polls leave nothing behind.
"""
from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Hashable, Iterable
from typing import Any, Generic, TypeVar

from kbroker.clock import monotonic_ms
from kbroker.protocol.outcome import Deferred
from kbroker.timers import LoopWheel

T = TypeVar("T")


class DelayedOperation(Generic[T]):
    """Subclasses implement ``ready()`` (may it complete now?) and ``result()`` (the outcome, a ``T``)."""

    def __init__(self) -> None:
        # a Deferred: the connection waiting for it answers from within the check that completes it
        self.future: Deferred[T] = Deferred(loop=asyncio.get_running_loop())
        self.completed = False
        self.keys: tuple[Hashable, ...] = ()
        self.timer = -1

    def ready(self) -> bool:
        raise NotImplementedError

    def ready_after(self, key: Hashable) -> bool:
        """``ready`` for a check of ``key`` (something of that key moved): an operation watching many keys may
        look at that one alone."""
        return self.ready()

    def result(self) -> T:
        raise NotImplementedError


class Purgatory:
    def __init__(self, tick_ms: int = 1, wheel_size: int = 20) -> None:
        self.timeouts = LoopWheel(monotonic_ms, self._expired, tick_ms, wheel_size)
        self.watchers: dict[Hashable, set[DelayedOperation[Any]]] = defaultdict(set)

    def __len__(self) -> int:
        return len(self.timeouts)

    def watch(self, op: DelayedOperation[T], keys: Iterable[Hashable], timeout_ms: int) -> Deferred[T]:
        """Complete now if possible, else wait for a ``check`` of one of ``keys`` or the timeout."""
        if op.ready():
            self._finish(op)
            return op.future
        op.keys = tuple(keys)
        for key in op.keys:
            self.watchers[key].add(op)
        op.timer = self.timeouts.add(monotonic_ms() + max(timeout_ms, 0), op)
        return op.future

    def check(self, key: Hashable) -> None:
        ops = self.watchers.get(key)
        if not ops:
            return
        for op in list(ops):
            if not op.completed and op.ready_after(key):
                self._finish(op)

    def _expired(self, ops: list[DelayedOperation[Any]]) -> None:
        for op in ops:
            op.timer = -1
            self._finish(op)

    def _finish(self, op: DelayedOperation[Any]) -> None:
        if op.completed:
            return
        op.completed = True
        for key in op.keys:
            watching = self.watchers.get(key)
            if watching is not None:
                watching.discard(op)
                if not watching:
                    del self.watchers[key]
        if op.timer >= 0:
            self.timeouts.cancel(op.timer)
        if not op.future.done():
            try:
                op.future.set_result(op.result())
            except Exception as exc:  # the waiting handler turns it into an error response
                op.future.set_exception(exc)

    def close(self) -> None:
        self.timeouts.close()
        for ops in list(self.watchers.values()):
            for op in list(ops):
                if not op.future.done():
                    op.future.cancel()
        self.watchers.clear()
