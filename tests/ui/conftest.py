"""The web app's fast tests: coroutine tests on a fresh event loop (no plugin needed), and a collector that hands
out hand-built snapshots (the sampler and history behind it are the real ones)."""
from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterable

import pytest

from kbroker.ui.model import Snapshot

HANG_GUARD_S = 30


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function):
    if inspect.iscoroutinefunction(pyfuncitem.obj):
        kwargs = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
        asyncio.run(asyncio.wait_for(pyfuncitem.obj(**kwargs), HANG_GUARD_S))
        return True
    return None


class HandCollector:
    """Hands out the snapshots it is given, the last one again when they run out; an exception given is raised."""

    def __init__(self, snapshots: Iterable[Snapshot | Exception]) -> None:
        self._queue = list(snapshots)
        self._last: Snapshot | Exception | None = None
        self.calls = 0
        self.closed = False

    def give(self, item: Snapshot | Exception) -> None:
        self._queue.append(item)

    async def snapshot(self) -> Snapshot:
        self.calls += 1
        item = self._last = self._queue.pop(0) if self._queue else self._last
        assert item is not None, "no snapshot given"
        if isinstance(item, Exception):
            raise item
        return item

    async def close(self) -> None:
        self.closed = True
