"""The broker's two clocks, one function per meaning.

``wall_ms`` is Kafka's ``time.milliseconds()``: what record timestamps, commit timestamps, broker
registrations and transaction start times record, and what retention compares against.
``monotonic_ms`` never goes backwards: deadlines, timeouts, lag and idle measurements. Mixing the
two is the bug this module exists to prevent: a wall-clock step must not expire a session or a
delayed produce, and a monotonic reading must never be written to disk or the wire.
"""
from __future__ import annotations

import time


def wall_ms() -> int:
    """Milliseconds since the epoch (may step with NTP): for values that are stored or sent."""
    return time.time_ns() // 1_000_000


def monotonic_ms() -> int:
    """Milliseconds on a clock that never steps back: for deadlines and durations only."""
    return time.monotonic_ns() // 1_000_000
