"""Harness for the coordinator tests: a manual clock and timer (time moves only when a test
advances it), coroutine tests run on a fresh event loop, and small client helpers."""
from __future__ import annotations

import asyncio
import heapq
import inspect
import struct

import pytest

from kbroker.coordinator.group import GroupConfig, GroupCoordinator

START_MS = 1_700_000_000_000
HANG_GUARD_S = 30


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function):
    """Run ``async def`` tests with asyncio.run (no plugin needed). The deadline is only a guard
    against a held request that is never answered; no test waits on real time."""
    if inspect.iscoroutinefunction(pyfuncitem.obj):
        kwargs = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
        asyncio.run(asyncio.wait_for(pyfuncitem.obj(**kwargs), HANG_GUARD_S))
        return True
    return None


class ManualTimer:
    """Kafka's MockTimer idea: a heap of deadlines that fire only in ``advance``."""

    def __init__(self, start_ms: int = START_MS) -> None:
        self.now = start_ms
        self._heap: list[tuple[int, int, object]] = []
        self._seq = 0
        self._cancelled: set[int] = set()

    def clock(self) -> int:
        return self.now

    def add(self, expire_ms: int, callback) -> int:
        self._seq += 1
        heapq.heappush(self._heap, (expire_ms, self._seq, callback))
        return self._seq

    def cancel(self, handle: int) -> None:
        self._cancelled.add(handle)

    def advance(self, ms: int) -> None:
        target = self.now + ms
        while self._heap and self._heap[0][0] <= target:
            expire_ms, seq, callback = heapq.heappop(self._heap)
            if seq in self._cancelled:
                self._cancelled.discard(seq)
                continue
            self.now = max(self.now, expire_ms)
            callback()
        self.now = target

    def pending(self) -> int:
        return sum(1 for _, seq, _ in self._heap if seq not in self._cancelled)


async def settle(rounds: int = 5) -> None:
    """Let tasks whose futures were completed run (a few bare loop iterations, no sleeping)."""
    for _ in range(rounds):
        await asyncio.sleep(0)


class FakeLog:
    """In-memory ``__consumer_offsets``: append(partition, batch) stores the batch and returns
    its base offset (as a real log would assign it)."""

    def __init__(self) -> None:
        self.partitions: dict[int, list[bytes]] = {}
        self.next_offset: dict[int, int] = {}
        self.fail_with: Exception | None = None

    def append(self, partition: int, batch: bytearray) -> int:
        if self.fail_with is not None:
            raise self.fail_with
        assert isinstance(batch, bytearray)
        offset = self.next_offset.get(partition, 0)
        count = struct.unpack_from(">i", batch, 23)[0] + 1
        stored = bytearray(batch)
        struct.pack_into(">q", stored, 0, offset)  # the log assigns offsets; outside the CRC
        self.partitions.setdefault(partition, []).append(bytes(stored))
        self.next_offset[partition] = offset + count
        return offset


class Env:
    def __init__(self, **config) -> None:
        self.timer = ManualTimer()
        self.log = FakeLog()
        self.config = GroupConfig(**config)
        self.coordinator = GroupCoordinator(self.config, append=self.log.append, clock=self.timer.clock,
                                            timer=self.timer)

    def join(self, group: str = "g", member_id: str = "", instance_id: str | None = None, *,
             client_id: str = "client", protocols=(("range", b"range-meta"),), session_ms: int = 10_000,
             rebalance_ms: int = 30_000, protocol_type: str = "consumer", require_known_member_id: bool = False):
        return asyncio.ensure_future(self.coordinator.join_group(
            group, member_id, instance_id, client_id=client_id, client_host="/127.0.0.1",
            session_timeout_ms=session_ms, rebalance_timeout_ms=rebalance_ms, protocol_type=protocol_type,
            protocols=list(protocols), require_known_member_id=require_known_member_id))

    def sync(self, group: str, generation: int, member_id: str, instance_id: str | None = None,
             assignments=(), **kwargs):
        return asyncio.ensure_future(self.coordinator.sync_group(
            group, generation, member_id, instance_id, assignments=dict(assignments), **kwargs))

    def advance(self, ms: int) -> None:
        self.timer.advance(ms)


@pytest.fixture
def env() -> Env:
    return Env()


def subscription(*topics: str) -> bytes:
    """A ConsumerProtocolSubscription v0: int16 version, [string] topics, nullable bytes user data."""
    out = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        raw = topic.encode()
        out += struct.pack(">h", len(raw)) + raw
    return out + struct.pack(">i", -1)
