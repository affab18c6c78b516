"""A Cython timing wheel driven by the asyncio loop: one ``call_at`` armed at the wheel's next
expiry, re-armed after each advance. The purgatory (delayed fetches and produces) and the group
coordinator (session, rebalance and join deadlines) each own one."""
from __future__ import annotations

import asyncio
from typing import Any, Callable

from kbroker._core.timewheel import TimingWheel


class LoopWheel:
    def __init__(self, clock: Callable[[], int], on_due: Callable[[list[Any]], None],
                 tick_ms: int = 1, wheel_size: int = 20) -> None:
        self._clock = clock
        self._on_due = on_due
        self.wheel = TimingWheel(tick_ms, wheel_size, clock())
        self._handle: asyncio.TimerHandle | None = None
        self._armed_ms = -1

    def __len__(self) -> int:
        return len(self.wheel)

    def add(self, expire_ms: int, item: Any) -> int:
        handle = self.wheel.add(expire_ms, item)
        self._arm()
        return handle

    def cancel(self, handle: int) -> bool:
        return self.wheel.cancel(handle)

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
        while True:
            due = self.wheel.advance(self._clock())
            if not due:
                break
            self._on_due(due)
        self._arm()

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


class WheelTimer:
    """The coordinator's ``Timer`` interface (add(expire_ms, callback) / cancel) over a LoopWheel."""

    def __init__(self, clock: Callable[[], int]) -> None:
        self.wheel = LoopWheel(clock, self._run)

    @staticmethod
    def _run(callbacks: list[Callable[[], None]]) -> None:
        for callback in callbacks:
            callback()

    def add(self, expire_ms: int, callback: Callable[[], None]) -> int:
        return self.wheel.add(expire_ms, callback)

    def cancel(self, handle: int) -> None:
        self.wheel.cancel(handle)
