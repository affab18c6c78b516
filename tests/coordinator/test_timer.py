"""The timer adapters: asyncio's loop (the default) and a timing wheel driven by its owner."""
from __future__ import annotations

import asyncio
import heapq

import pytest

from kbroker.coordinator import GroupConfig, GroupCoordinator, LoopTimer, WheelTimer

from .conftest import settle


async def test_loop_timer_runs_due_callbacks_and_honours_cancel():
    now = [1000]
    timer = LoopTimer(clock=lambda: now[0])
    fired = []
    timer.add(999, lambda: fired.append("due"))  # already due: runs on the next loop pass
    cancelled = timer.add(1000, lambda: fired.append("cancelled"))
    timer.cancel(cancelled)
    timer.add(10**12, lambda: fired.append("far future"))
    await settle()
    assert fired == ["due"]


class ListWheel:
    """The TimingWheel contract (add/cancel/advance returning due items) over a heap."""

    def __init__(self) -> None:
        self.heap: list = []
        self.seq = 0
        self.cancelled: set[int] = set()

    def add(self, expire_ms, item):
        self.seq += 1
        heapq.heappush(self.heap, (expire_ms, self.seq, item))
        return self.seq

    def cancel(self, handle):
        self.cancelled.add(handle)
        return True

    def advance(self, now_ms):
        due = []
        while self.heap and self.heap[0][0] <= now_ms:
            _, seq, item = heapq.heappop(self.heap)
            if seq not in self.cancelled:
                due.append(item)
        return due


def _wheels():
    yield pytest.param(ListWheel, id="contract")
    try:
        from kbroker._core.timewheel import TimingWheel
    except ImportError:  # the compiled wheel is built by others; the contract run still covers us
        return
    yield pytest.param(lambda: TimingWheel(1, 20, 0), id="timewheel")


@pytest.mark.parametrize("make_wheel", list(_wheels()))
async def test_session_expiry_driven_by_a_wheel(make_wheel):
    now = [0]
    timer = WheelTimer(make_wheel())
    coordinator = GroupCoordinator(GroupConfig(group_initial_rebalance_delay_ms=0), clock=lambda: now[0],
                                   timer=timer)
    join = await coordinator.join_group("g", "", client_id="c", client_host="h", session_timeout_ms=10_000,
                                        protocol_type="consumer", protocols=[("range", b"")],
                                        require_known_member_id=False)
    sync = await coordinator.sync_group("g", 1, join.member_id, assignments={join.member_id: b"a"})
    assert sync.assignment == b"a"
    now[0] = 9_999
    timer.advance(now[0])
    assert coordinator.describe_group("g").state == "Stable"
    now[0] = 10_000
    assert timer.advance(now[0]) >= 1
    assert coordinator.describe_group("g").state == "Empty"


async def test_wheel_timer_runs_callbacks_that_schedule_due_work():
    timer = WheelTimer(ListWheel())
    ran = []
    timer.add(5, lambda: (ran.append("first"), timer.add(3, lambda: ran.append("chained"))))
    assert timer.advance(5) == 2
    assert ran == ["first", "chained"]
    await asyncio.sleep(0)
