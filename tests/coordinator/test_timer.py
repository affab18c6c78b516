"""kbroker.timers as the group coordinator uses it: asyncio's loop (the default) and a timing wheel,
here moved by the test's own clock."""
from __future__ import annotations

import asyncio

import pytest

from kbroker._core.timewheel import TimingWheel
from kbroker.coordinator.group import GroupConfig, GroupCoordinator
from kbroker.timers import LoopTimer, WheelTimer
from tests.oracles.timer_oracle import HeapTimer

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


@pytest.mark.parametrize("make_wheel", [pytest.param(HeapTimer, id="oracle"),
                                        pytest.param(lambda: TimingWheel(1, 20, 0), id="timewheel")])
async def test_session_expiry_driven_by_a_wheel(make_wheel):
    now = [0]
    timer = WheelTimer(lambda: now[0], wheel=make_wheel())
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
    timer.wheel.close()


async def test_wheel_timer_runs_callbacks_that_schedule_due_work():
    timer = WheelTimer(lambda: 0, wheel=HeapTimer())
    ran = []
    timer.add(5, lambda: (ran.append("first"), timer.add(3, lambda: ran.append("chained"))))
    assert timer.advance(5) == 2
    assert ran == ["first", "chained"]
    await asyncio.sleep(0)
    timer.wheel.close()


async def test_wheel_timer_runs_due_callbacks_from_the_loop_by_itself():
    now = [1000]
    timer = WheelTimer(lambda: now[0])
    fired = []
    timer.add(1000, lambda: fired.append("due"))  # due now: the loop runs it, nobody calls advance
    cancelled = timer.add(999, lambda: fired.append("cancelled"))
    timer.cancel(cancelled)
    timer.add(10**12, lambda: fired.append("far future"))
    await settle()
    assert fired == ["due"]
    timer.wheel.close()
