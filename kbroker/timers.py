"""Deadlines for the broker's delayed work: the one place that turns a clock and a timer into
callbacks on the asyncio loop.

Callers read time from ``clock() -> int`` (milliseconds) and schedule through a ``Timer``:
``add(expire_ms, callback) -> handle`` and ``cancel(handle)``, ``expire_ms`` on the ``clock()``
scale. Callbacks run on the event loop thread, take no arguments, and may add or cancel timers
themselves. Cancelling a handle that already fired is harmless.

* ``LoopWheel``: a Cython ``TimingWheel`` driven by the loop, one ``call_later`` armed at the
  wheel's next expiry and re-armed after each advance. The wheel never calls back: due items go
  to the owner's ``on_due``. The purgatory (delayed fetches and produces) owns one.
* ``WheelTimer``: the ``Timer`` interface over a ``LoopWheel`` whose items are the callbacks. The
  group and transaction coordinators own one. ``advance(now_ms)`` runs what is due at a given
  time straight away, which is how a test with a manual clock moves it.
* ``LoopTimer``: the ``Timer`` interface straight on ``loop.call_at``; the group coordinator's
  default when it is given no timer.
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from kbroker.clock import wall_ms
from kbroker.log.timewheel import TimingWheel

Callback = Callable[[], None]


class Timer(Protocol):
    def add(self, expire_ms: int, callback: Callback) -> Any: ...

    def cancel(self, handle: Any) -> None: ...


class LoopWheel:
    """A timing wheel driven by the running asyncio loop. ``wheel`` replaces the
    ``TimingWheel(tick_ms, wheel_size, clock())`` it would create: anything with the same
    ``add``/``cancel``/``advance``/``next_expiry_ms`` (a test's reference timer)."""

    def __init__(self, clock: Callable[[], int], on_due: Callable[[list[Any]], None],
                 tick_ms: int = 1, wheel_size: int = 20, wheel: Any = None) -> None:
        self._clock = clock
        self._on_due = on_due
        self.wheel = wheel if wheel is not None else TimingWheel(tick_ms, wheel_size, clock())
        self._handle: asyncio.TimerHandle | None = None
        self._armed_ms = -1

    def __len__(self) -> int:
        return len(self.wheel)

    def add(self, expire_ms: int, item: Any) -> int:
        handle: int = self.wheel.add(expire_ms, item)
        self._arm()
        return handle

    def cancel(self, handle: int) -> bool:
        return bool(self.wheel.cancel(handle))

    def advance(self, now_ms: int) -> int:
        """Hand every item due at ``now_ms`` to ``on_due``, including items that ``on_due`` adds
        as due meanwhile; returns how many."""
        count = 0
        while True:
            due = self.wheel.advance(now_ms)
            if not due:
                return count
            self._on_due(due)
            count += len(due)

    def _arm(self) -> None:
        expiry = self.wheel.next_expiry_ms()
        if expiry < 0 or (self._handle is not None and self._armed_ms <= expiry):
            return
        if self._handle is not None:
            self._handle.cancel()
        self._armed_ms = expiry
        self._handle = asyncio.get_running_loop().call_later(max(0, expiry - self._clock()) / 1000, self._fire)

    def _fire(self) -> None:
        self._handle = None
        self._armed_ms = -1
        self.advance(self._clock())
        self._arm()

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


class WheelTimer:
    """A ``Timer`` over a ``LoopWheel`` (``wheel``: see LoopWheel) whose items are callbacks."""

    def __init__(self, clock: Callable[[], int], wheel: Any = None) -> None:
        self.wheel = LoopWheel(clock, self._run, wheel=wheel)

    @staticmethod
    def _run(callbacks: list[Callback]) -> None:
        for callback in callbacks:
            callback()

    def add(self, expire_ms: int, callback: Callback) -> int:
        return self.wheel.add(expire_ms, callback)

    def cancel(self, handle: int) -> None:
        self.wheel.cancel(handle)

    def advance(self, now_ms: int) -> int:
        """Run every callback due at ``now_ms``, including ones that due callbacks schedule;
        returns how many ran."""
        return self.wheel.advance(now_ms)


class LoopTimer:
    """Deadlines on an asyncio loop. ``expire_ms`` is turned into a delay against ``clock()``."""

    def __init__(self, clock: Callable[[], int] = wall_ms,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._clock = clock
        self._loop = loop

    def add(self, expire_ms: int, callback: Callback) -> asyncio.TimerHandle:
        loop = self._loop or asyncio.get_running_loop()
        delay_s = max(0, expire_ms - self._clock()) / 1000.0
        return loop.call_at(loop.time() + delay_s, callback)

    def cancel(self, handle: asyncio.TimerHandle) -> None:
        handle.cancel()
