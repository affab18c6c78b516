"""Pure-Python reference for kbroker._core.timewheel: one heapq of (expire, seq), lazy deletion.
Deliberately naive; it is what the timing wheel is checked against.

Semantics it pins down (the wheel's contract):
* ``advance(now)`` returns exactly the pending items with ``expire <= now`` (the clock never goes
  back: a smaller ``now`` counts as the largest one seen), sorted by
  ``(expire // tick_ms, insertion order)``;
* negative expiries count as 0;
* ``next_expiry_ms()`` here is exact (earliest pending expiry), or -1; the wheel's is a lower
  bound of it.
"""
from __future__ import annotations

import heapq
import itertools
from typing import Any


class HeapTimer:
    def __init__(self, tick_ms: int = 1, start_ms: int = 0) -> None:
        self.tick_ms = tick_ms
        self.now = start_ms
        self._heap: list[tuple[int, int]] = []  # (expire, seq)
        self._pending: dict[int, tuple[int, Any]] = {}  # seq -> (expire, item)
        self._seq = itertools.count()

    def add(self, expire_ms: int, item: Any) -> int:
        """Returns a handle (the insertion sequence number: never reused)."""
        expire_ms = max(expire_ms, 0)
        seq = next(self._seq)
        self._pending[seq] = (expire_ms, item)
        heapq.heappush(self._heap, (expire_ms, seq))
        return seq

    def cancel(self, handle: int) -> bool:
        return self._pending.pop(handle, None) is not None

    def advance(self, now_ms: int) -> list[Any]:
        self.now = max(self.now, now_ms)
        due: list[tuple[int, int, Any]] = []
        while self._heap and self._heap[0][0] <= self.now:
            expire, seq = heapq.heappop(self._heap)
            entry = self._pending.pop(seq, None)
            if entry is not None:  # else cancelled
                due.append((expire // self.tick_ms, seq, entry[1]))
        due.sort(key=lambda e: (e[0], e[1]))
        return [item for _, _, item in due]

    def next_expiry_ms(self) -> int:
        while self._heap and self._heap[0][1] not in self._pending:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else -1

    def __len__(self) -> int:
        return len(self._pending)
