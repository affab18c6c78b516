"""kbroker._core.timewheel: exactness, ordering, overflow levels, cancel/handle safety, and a
randomized differential test against the heapq oracle (tests/oracles/timer_oracle.py)."""
from __future__ import annotations

import gc
import random
import sys
import weakref

import pytest

from kbroker._core.timewheel import TimingWheel
from tests.oracles.timer_oracle import HeapTimer

HOUR = 3_600_000


class Item:
    """A weakref-able payload."""

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"Item({self.name!r})"


def drain_stepwise(wheel, pending, stop, step):
    """Advance to ``stop`` in steps, checking at each step that exactly the due items come out."""
    now = wheel.current_ms
    while now < stop:
        now = min(stop, now + step)
        got = wheel.advance(now)
        for exp, name in got:
            assert exp <= now, f"{name} (expires {exp}) returned at {now}"
        got_set = set(got)
        assert len(got_set) == len(got), "an item was returned twice"
        expected = {p for p in pending if p[0] <= now}
        assert got_set == expected
        pending -= got_set
        assert len(wheel) == len(pending)


# ------------------------------------------------------------------ construction and clock


def test_defaults_and_rounding():
    w = TimingWheel()
    assert w.current_ms == 0 and len(w) == 0 and w.next_expiry_ms() == -1
    w = TimingWheel(tick_ms=10, wheel_size=8, start_ms=1234)
    assert w.current_ms == 1230
    assert w.advance(1259) == []
    assert w.current_ms == 1250
    w.advance(1000)  # the clock never goes back
    assert w.current_ms == 1250


@pytest.mark.parametrize(
    "kwargs",
    [dict(tick_ms=0), dict(tick_ms=-1), dict(wheel_size=1), dict(wheel_size=0), dict(start_ms=-5)],
)
def test_invalid_arguments(kwargs):
    with pytest.raises(ValueError):
        TimingWheel(**kwargs)


def test_time_range():
    w = TimingWheel()
    with pytest.raises(OverflowError):
        w.add(2**62, "x")
    with pytest.raises(OverflowError):
        w.advance(2**62)
    with pytest.raises(OverflowError):
        w.add(2**64, "x")  # does not even fit int64
    h = w.add(2**62 - 1, "last")  # the largest accepted time works end to end
    assert w.advance(2**62 - 2) == []
    assert w.advance(2**62 - 1) == ["last"]
    assert not w.cancel(h)


# ------------------------------------------------------------------ expiry


@pytest.mark.parametrize("tick,size", [(1, 20), (5, 20), (7, 3), (1, 2)])
def test_exact_expiry_stepwise(tick, size):
    rng = random.Random(tick * 100 + size)
    w = TimingWheel(tick, size, 0)
    pending = set()
    for i in range(400):
        exp = rng.randrange(0, 2000)
        w.add(exp, (exp, i))
        pending.add((exp, i))
    drain_stepwise(w, pending, 2100, 1)
    assert not pending and len(w) == 0 and w.next_expiry_ms() == -1


def test_ordering_across_and_within_ticks():
    # tick 10: 23 and 27 are the same tick, returned in insertion order, not by expiry.
    w = TimingWheel(10, 4, 0)
    for name, exp in [("a", 27), ("b", 55), ("c", 23), ("d", 12), ("e", 29), ("f", 500)]:
        w.add(exp, name)
    assert w.advance(1000) == ["d", "a", "c", "e", "b", "f"]


def test_insertion_order_survives_cascade():
    # "old" goes to the overflow level (25 is beyond 0 + 20); once the clock is at 10, "new"
    # with the same expiry fits level 0 directly. The cascade at 20 appends "old" behind "new"
    # in the bucket, yet the insertion order must come out.
    w = TimingWheel(1, 20, 0)
    w.add(25, "old")
    w.advance(10)
    w.add(25, "new")
    w.add(25, "newer")
    assert w.advance(24) == []
    assert w.advance(25) == ["old", "new", "newer"]


def test_multi_level_insertion_order():
    # Same expiry added at successive times lands on successively finer levels.
    w = TimingWheel(1, 4, 0)
    exp = 1000
    names = []
    for t in range(0, 1000, 37):
        w.advance(t)
        names.append(f"t{t}")
        w.add(exp, names[-1])
    assert w.advance(999) == []
    assert w.advance(exp) == names


def test_not_due_within_current_tick():
    # With tick 10, an item expiring at 17 must not come out at 12 (Kafka would fire it).
    w = TimingWheel(10, 8, 0)
    w.add(17, "x")
    w.add(12, "y")
    assert w.advance(11) == []
    assert w.advance(12) == ["y"]
    assert w.advance(16) == []
    assert w.next_expiry_ms() <= 17
    assert w.advance(17) == ["x"]


def test_far_future_many_levels():
    # tick 1 ms, 20 buckets: 20 ms, 400 ms, 8 s, 160 s, 53 min, 17.8 h spans: hours need 6 levels.
    rng = random.Random(7)
    w = TimingWheel(1, 20, 0)
    pending = set()
    for i in range(3000):
        exp = rng.choice([rng.randrange(1, 50), rng.randrange(1, 10_000), rng.randrange(1, 5 * HOUR)])
        w.add(exp, (exp, i))
        pending.add((exp, i))
    for exp in (HOUR, HOUR + 1, 2 * HOUR - 1, 5 * HOUR):  # edges of coarse buckets
        w.add(exp, (exp, "edge"))
        pending.add((exp, "edge"))
    assert "levels=6" in repr(w)
    # Irregular steps: tiny ones, then jumps across many coarse buckets at once.
    now = 0
    for step in [1, 1, 3, 17, 400, 1, 7999, 160_001, HOUR, 1, 12345, 3 * HOUR, HOUR]:
        now += step
        got = w.advance(now)
        assert all(exp <= now for exp, _ in got)
        expected = {p for p in pending if p[0] <= now}
        assert set(got) == expected and len(got) == len(expected)
        assert got == sorted(got, key=lambda p: p[0])  # tick 1: expiry order (ties: insertion)
        pending -= expected
        assert len(w) == len(pending)
    assert not pending


def test_single_far_item_exact():
    w = TimingWheel(1, 20, 0)
    w.add(3 * HOUR + 17, "far")
    assert w.advance(3 * HOUR + 16) == []
    assert w.advance(3 * HOUR + 17) == ["far"]


def test_already_due():
    w = TimingWheel(1, 20, 100)
    w.add(100, "now")
    w.add(50, "past")
    w.add(-5, "negative")
    assert len(w) == 3
    assert 0 <= w.next_expiry_ms() <= 50
    # next advance returns them, even one that does not move the clock (or moves it back)
    assert w.advance(90) == ["negative", "past", "now"]
    assert len(w) == 0 and w.next_expiry_ms() == -1


def test_advance_without_moving():
    w = TimingWheel(1, 20, 0)
    w.add(5, "a")
    assert w.advance(0) == [] and w.advance(0) == []
    assert w.advance(5) == ["a"]
    assert w.advance(5) == []


# ------------------------------------------------------------------ cancel and handles


def test_cancel_before_and_after_expiry():
    w = TimingWheel(1, 20, 0)
    h1 = w.add(10, "a")
    h2 = w.add(1000, "b")  # overflow level
    h3 = w.add(0, "c")  # due list
    assert len(w) == 3
    assert w.cancel(h1) and w.cancel(h2) and w.cancel(h3)
    assert len(w) == 0
    assert not w.cancel(h1) and not w.cancel(h2) and not w.cancel(h3)
    assert w.advance(5000) == []
    h4 = w.add(6000, "d")
    assert w.advance(6000) == ["d"]
    assert not w.cancel(h4)  # already returned
    assert len(w) == 0


def test_cancel_unknown_handles():
    w = TimingWheel()
    w.add(10, "a")
    for h in (-1, 1, 2**32, 2**40 + 5, 2**63 - 1, 2**63, 2**64, -(2**70), 10**30):
        assert w.cancel(h) is False
    assert len(w) == 1
    with pytest.raises(TypeError):
        w.cancel("0")


def test_stale_handle_after_slot_reuse():
    w = TimingWheel(1, 20, 0)
    old = w.add(10, "old")
    assert w.cancel(old)
    new = w.add(10, "new")  # reuses the freed slot
    assert new != old and (new & 0xFFFFFFFF) == (old & 0xFFFFFFFF)
    assert not w.cancel(old)
    assert len(w) == 1
    # ... and after expiry: the handle of a returned timer cannot cancel its slot's next tenant
    assert w.advance(10) == ["new"]
    newer = w.add(20, "newer")
    assert (newer & 0xFFFFFFFF) == (new & 0xFFFFFFFF)
    assert not w.cancel(new) and not w.cancel(old)
    assert w.advance(20) == ["newer"]


def test_stale_handles_many_reuses():
    rng = random.Random(3)
    w = TimingWheel(1, 8, 0)
    stale = []
    live = {}
    for i in range(5000):
        h = w.add(rng.randrange(1, 5000), i)
        live[h] = i
        if rng.random() < 0.6:
            victim = rng.choice(list(live))
            del live[victim]
            assert w.cancel(victim)
            stale.append(victim)
    for h in rng.sample(stale, 500):
        assert not w.cancel(h)
    assert len(w) == len(live)
    assert sorted(w.advance(10_000)) == sorted(live.values())


def test_cancel_empties_buckets_next_expiry():
    w = TimingWheel(1, 20, 0)
    assert w.next_expiry_ms() == -1
    h = w.add(50, "a")  # level 1: bucket [40, 60)
    assert 0 < w.next_expiry_ms() <= 50
    h2 = w.add(7, "b")
    assert w.next_expiry_ms() == 7
    assert w.cancel(h2)
    assert 7 < w.next_expiry_ms() <= 50  # the emptied bucket no longer counts
    assert w.cancel(h)
    assert w.next_expiry_ms() == -1


def test_len_tracks_everything():
    w = TimingWheel(2, 5, 0)
    hs = [w.add(e, e) for e in (0, 1, 3, 9, 10, 11, 500, 10**6)]
    assert len(w) == 8
    w.cancel(hs[3])
    assert len(w) == 7
    assert w.advance(10) == [0, 1, 3, 10]
    assert len(w) == 3
    assert w.advance(2 * 10**6) == [11, 500, 10**6]
    assert len(w) == 0


def test_pool_growth_many_items():
    w = TimingWheel(1, 16, 0)
    n = 50_000
    hs = [w.add(i % 997 + 1, i) for i in range(n)]
    assert len(w) == n
    for h in hs[::2]:
        assert w.cancel(h)
    out = w.advance(1000)
    assert len(out) == n // 2 and len(w) == 0
    assert out == sorted(range(1, n, 2), key=lambda i: (i % 997, i))


# ------------------------------------------------------------------ references


def test_items_kept_alive_then_released():
    w = TimingWheel()
    a, b = Item("a"), Item("b")
    ra, rb = weakref.ref(a), weakref.ref(b)
    ha = w.add(10, a)
    w.add(20, b)
    del a, b
    gc.collect()
    assert ra() is not None and rb() is not None  # the wheel keeps them
    assert w.cancel(ha)
    assert ra() is None  # released on cancel
    out = w.advance(20)
    assert out[0] is rb()
    del out
    assert rb() is None  # released once returned and dropped


def test_reference_cycle_is_collected():
    w = TimingWheel()
    it = Item("cyclic")
    it.wheel = w  # item -> wheel -> item
    w.add(10, it)
    ri = weakref.ref(it)
    del w, it
    gc.collect()
    assert ri() is None  # the item is gone, so the wheel that held it is too


def test_finalizer_reentering_the_wheel():
    w = TimingWheel()

    class Reenter:
        def __del__(self):
            # runs while cancel() returns: the wheel must be consistent by then
            w.add(5, "from __del__")

    h = w.add(10, Reenter())
    assert w.cancel(h)
    assert len(w) == 1
    assert w.advance(10) == ["from __del__"]


def test_gc_finalizers_reentering_the_wheel():
    """A collection can start inside any GC-tracked allocation (CPython <= 3.11 runs it right
    there), and finalizers of cyclic garbage may call back into the wheel: inside add() (pool
    growth) and advance() (the result list). Every item must still come out exactly once and
    never early."""
    w = TimingWheel(1, 4, 0)
    added, cancelled, returned = set(), set(), []
    names = iter(range(10**9))
    inside = [False, 0]  # in a wheel call now?, finalizers that ran inside one

    def check(now, items):
        assert all(exp <= now for exp, _ in items)
        returned.extend(items)

    class Bomb:
        def __init__(self):
            self.me = self  # a cycle: only the collector frees it

        def __del__(self):
            inside[1] += inside[0]
            now = w.current_ms
            for j in range(5):  # enough adds to make the pool grow now and then
                key = (now + j % 2, f"gc{next(names)}")  # some due at once
                h = w.add(key[0], key)
                added.add(key)
                if next(names) % 3 == 0 and w.cancel(h):
                    cancelled.add(key)
            check(now, w.advance(now))

    def armed(call):
        """Run call() with a finalizable cycle pending and the collector set to start at the
        next GC-tracked allocation, which is inside the wheel unless the call makes none."""
        old = gc.get_threshold()
        gc.collect()
        gc.set_threshold(10**9)
        hold = [[] for _ in range(100)]  # drain the list free list: new lists are GC allocations
        Bomb()
        gc.set_threshold(1, 1, 1)
        inside[0] = True
        try:
            return call()
        finally:
            inside[0] = False
            gc.set_threshold(*old)
            del hold

    gc.collect()
    gc.freeze()  # everything alive now is out of the collector's sight: collections are cheap
    try:
        now = 0
        for i in range(300):
            key = (now + i % 7, i)
            added.add(key)
            armed(lambda: w.add(key[0], key))
            if i % 2:
                now += 1
                check(now, armed(lambda: w.advance(now)))
    finally:
        gc.unfreeze()
    gc.collect()
    check(10**6, w.advance(10**6))
    if sys.version_info < (3, 12):  # later versions run collections from the eval loop only
        assert inside[1] > 0  # the scenario did happen
    assert len(returned) == len(set(returned))
    assert set(returned) == added - cancelled
    assert len(w) == 0


def test_dealloc_with_pending_items():
    w = TimingWheel()
    it = Item("x")
    r = weakref.ref(it)
    w.add(10**6, it)
    del it, w
    assert r() is None


# ------------------------------------------------------------------ differential


def _differential(seed, tick, size, start, ops):
    rng = random.Random(seed)
    w = TimingWheel(tick, size, start)
    o = HeapTimer(tick, start)
    assert w.current_ms == start - start % tick
    handles = []  # (wheel handle, oracle handle)
    now = start
    horizons = [tick * 3, tick * size, tick * size * size * 2, tick * size**4]
    counter = 0
    for _ in range(ops):
        r = rng.random()
        if r < 0.5:
            exp = now + rng.randrange(-tick * 2, rng.choice(horizons))
            counter += 1
            handles.append((w.add(exp, counter), o.add(exp, counter)))
        elif r < 0.7 and handles:
            i = rng.randrange(len(handles))
            hw, ho = handles[i]
            if rng.random() < 0.7:
                handles[i] = handles[-1]
                handles.pop()
            assert w.cancel(hw) == o.cancel(ho)  # includes repeated and already-expired ones
        elif r < 0.8:
            nxt = w.next_expiry_ms()
            exact = o.next_expiry_ms()
            assert (nxt == -1) == (exact == -1) == (len(o) == 0)
            assert nxt <= exact  # a lower bound
            if nxt > now and rng.random() < 0.5:
                # nothing can be due before the lower bound
                assert w.advance(nxt - 1) == o.advance(nxt - 1) == []
                now = max(now, nxt - 1)
        else:
            step = rng.choice([0, 1, rng.randrange(tick + 1), rng.randrange(tick * size + 1),
                               rng.randrange(tick * size**3 + 1), -rng.randrange(tick * 3 + 1)])
            now += step
            got, want = w.advance(now), o.advance(now)
            assert got == want, f"advance({now}) at seed {seed}"
            now = max(now, o.now)
            assert w.current_ms == now - now % tick
        assert len(w) == len(o)
    final = now + tick * size**5
    assert w.advance(final) == o.advance(final)
    assert len(w) == 0 and w.next_expiry_ms() == -1


@pytest.mark.parametrize(
    "tick,size,start",
    [(1, 20, 0), (1, 2, 5), (3, 8, 1_000_003), (10, 5, 77), (1, 64, 123_456_789), (7, 3, 0)],
)
@pytest.mark.parametrize("seed", range(4))
def test_differential_against_heap_oracle(tick, size, start, seed):
    _differential(seed * 1000 + tick * 31 + size, tick, size, start, 3000)
