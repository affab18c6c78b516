"""The web app's fast tests: coroutine tests on a fresh event loop (no plugin needed), a collector that hands out
hand-built snapshots, and, until kbroker.ui.sampler lands, a test double of the sampler (here only)."""
from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterable

import pytest

from kbroker.ui.model import GroupView, PartitionLag, Points, Snapshot

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


class SamplerDouble:
    """Lag from the latest snapshot only, every group OK: enough for the app's routes (the real sampler's rules
    are tested with it)."""

    def __init__(self) -> None:
        self.snapshots: list[Snapshot] = []
        self.maintained = 0

    def ingest(self, snapshot: Snapshot) -> None:
        self.snapshots.append(snapshot)

    def groups(self) -> list[GroupView]:
        s = self.snapshots[-1]
        ends = {(p.topic, p.partition): p.log_end for t in s.topics for p in t.partitions}
        views = []
        for g in s.groups:
            parts = tuple(PartitionLag(c.topic, c.partition, c.offset, ends[c.topic, c.partition],
                                       max(0, ends[c.topic, c.partition] - c.offset), 1.5, c.timestamp_ms, None, "OK")
                          for c in s.commits if c.group == g.name)
            views.append(GroupView(g.name, g.storage, g.state, "OK", sum(p.lag for p in parts), 1.5,
                                   max((p.last_commit_ms or 0 for p in parts), default=None), parts,
                                   tuple(_lag(x, g.name) for x in self.snapshots)))
        return views

    def group(self, name: str) -> GroupView | None:
        return next((g for g in self.groups() if g.name == name), None)

    def lag_chart(self, group: str, span: str, per_partition: bool = False, *,
                  storage: str | None = None) -> dict[str, Points]:
        found = self.group(group)
        assert found is not None
        return {"total": tuple((s.taken_ms, float(found.total_lag)) for s in self.snapshots)}

    def rate_chart(self, span: str) -> dict[str, Points]:
        return {name: tuple((s.taken_ms, getattr(s.rates, name)) for s in self.snapshots if s.rates)
                for name in ("bytes_in", "bytes_out", "messages_in")}

    def topic_rates(self) -> dict[str, float]:
        return {"orders": 12.5}

    def maintain(self) -> None:
        self.maintained += 1


def _lag(s: Snapshot, group: str) -> int:
    ends = {(p.topic, p.partition): p.log_end for t in s.topics for p in t.partitions}
    return sum(max(0, ends[c.topic, c.partition] - c.offset) for c in s.commits if c.group == group)
