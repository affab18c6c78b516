from __future__ import annotations

import itertools


class FakeClock:
    """Milliseconds that advance by one on every read."""

    def __init__(self, start: int = 1_600_000_000_000) -> None:
        self._counter = itertools.count(start)

    def __call__(self) -> int:
        return next(self._counter)
