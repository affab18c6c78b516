"""Injectable time for the group coordinator.

The coordinator reads time from ``clock() -> int`` (milliseconds) and schedules its deadlines
(session expiry, rebalance timeout, initial rebalance delay, pending-member expiry) through a
``Timer``: ``add(expire_ms, callback) -> handle`` and ``cancel(handle)``. ``expire_ms`` is on
the ``clock()`` scale. Callbacks run on the event loop thread, take no arguments, and may add or
cancel timers themselves. Cancelling a handle that already fired is harmless.

Two implementations live here:

* ``LoopTimer``: asyncio's ``loop.call_at``; the default.
* ``WheelTimer``: over any wheel with ``add(expire_ms, item) -> handle``, ``cancel(handle)`` and
  ``advance(now_ms) -> list[item]``, i.e. ``kbroker._core.timewheel.TimingWheel``. The wheel never
  calls back, so whoever drives it calls ``WheelTimer.advance(now_ms)`` to run what is due.

Tests use a manual timer whose time moves only when the test says so.
"""
from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Protocol

Callback = Callable[[], None]


class Timer(Protocol):
    def add(self, expire_ms: int, callback: Callback) -> Any: ...

    def cancel(self, handle: Any) -> None: ...


def wall_clock_ms() -> int:
    """Kafka's ``time.milliseconds()``: wall-clock ms, also what commit timestamps record."""
    return time.time_ns() // 1_000_000


class LoopTimer:
    """Deadlines on an asyncio loop. ``expire_ms`` is turned into a delay against ``clock()``."""

    def __init__(self, clock: Callable[[], int] = wall_clock_ms,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._clock = clock
        self._loop = loop

    def add(self, expire_ms: int, callback: Callback) -> asyncio.TimerHandle:
        loop = self._loop or asyncio.get_running_loop()
        delay_s = max(0, expire_ms - self._clock()) / 1000.0
        return loop.call_at(loop.time() + delay_s, callback)

    def cancel(self, handle: asyncio.TimerHandle) -> None:
        handle.cancel()


class WheelTimer:
    """A ``Timer`` over a timing wheel that returns due items instead of calling them."""

    def __init__(self, wheel: Any) -> None:
        self._wheel = wheel

    def add(self, expire_ms: int, callback: Callback) -> Any:
        return self._wheel.add(expire_ms, callback)

    def cancel(self, handle: Any) -> None:
        self._wheel.cancel(handle)

    def advance(self, now_ms: int) -> int:
        """Run every callback due at ``now_ms``, including ones that due callbacks schedule;
        returns how many ran."""
        ran = 0
        while True:
            due = self._wheel.advance(now_ms)
            if not due:
                return ran
            for callback in due:
                callback()
            ran += len(due)
