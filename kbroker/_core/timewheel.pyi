"""Kafka's hierarchical timing wheel, for delayed operations (produce waiting for replicas,
fetch waiting for bytes, group session timeouts).

A wheel has ``wheel_size`` buckets of ``tick_ms`` each; timers beyond its span go to an overflow
wheel (tick = tick_ms * wheel_size) created on demand, recursively. Add and cancel are O(1).
The wheel never calls back into Python: ``advance`` returns the expired items and the caller runs
them. Time is whatever monotonic millisecond clock the caller passes in.
"""
from typing import Any

class TimingWheel:
    def __init__(self, tick_ms: int = 1, wheel_size: int = 20, start_ms: int = 0) -> None: ...
    @property
    def current_ms(self) -> int:
        """Start of the current tick (start_ms rounded down to tick_ms, then advanced)."""
    def add(self, expire_ms: int, item: Any) -> int:
        """Schedule ``item``; returns a handle for cancel(). An item already due is returned by the
        next advance()."""
    def cancel(self, handle: int) -> bool:
        """Remove a pending timer; False if it already expired, was cancelled, or is unknown."""
    def advance(self, now_ms: int) -> list[Any]:
        """Move the clock to ``now_ms`` and return every item with expire_ms <= now_ms, in bucket order
        (items of one tick in insertion order)."""
    def next_expiry_ms(self) -> int:
        """Expiration of the earliest non-empty bucket (a lower bound for the next due item), or -1."""
    def __len__(self) -> int: ...
