"""Rates over a ring of time samples, as Kafka's client metrics compute them
(clients/src/main/java/org/apache/kafka/common/metrics/stats/SampledStat.java, Rate.java, SimpleRate.java).

``SampledStat`` keeps ``num`` samples of ``window_ms`` each: a record goes to the current sample, or starts the
next one (reusing the oldest slot) once the current is ``window_ms`` old; a sample older than ``num * window_ms``
is reset before a measure. The two rates divide the samples' sum by a different span:

- ``Rate`` (client quotas): the time since the oldest sample began, but at least ``num - 1`` whole windows, so
  a young rate is spread over that floor;
- ``SimpleRate`` (replication throttles): the time since the oldest sample began, but one window at least, so
  a throttle bites from the start.

Times are in ms (floats, whatever clock the owner reads), rates per second.
"""
from __future__ import annotations


class SampledStat:
    """The samples, their running sum (``total``) and when the last record came (``last_used``)."""

    __slots__ = ("num", "window_ms", "starts", "values", "total", "current", "last_used")

    def __init__(self, num: int, window_ms: float) -> None:
        self.num = num
        self.window_ms = window_ms
        self.starts: list[float] = []   # each sample's start (Kafka's lastWindowMs)
        self.values: list[float] = []
        self.total = 0.0                # sum(values), kept as they change
        self.current = 0
        self.last_used = 0.0

    def record(self, value: float, now: float) -> None:
        self.last_used = now
        if not self.starts:
            self.starts.append(now)
            self.values.append(0.0)
        elif now - self.starts[self.current] >= self.window_ms:  # the current sample is complete
            self.current = (self.current + 1) % self.num
            if self.current >= len(self.starts):
                self.starts.append(now)
                self.values.append(0.0)
            else:
                self.starts[self.current] = now
                self.total -= self.values[self.current]
                self.values[self.current] = 0.0
        self.values[self.current] += value
        self.total += value

    def _purge(self, now: float) -> None:
        expire = self.num * self.window_ms
        for i, start in enumerate(self.starts):
            if now - start >= expire:
                self.starts[i] = now
                self.total -= self.values[i]
                self.values[i] = 0.0

    def elapsed(self, now: float) -> float:
        """Time since the oldest sample began, in ms (what ``window_size`` floors)."""
        return now - min(self.starts) if self.starts else 0.0

    def window_size(self, now: float) -> float:
        """The span the rate divides by, in ms (after expired samples are reset)."""
        raise NotImplementedError

    def measure(self, now: float) -> float:
        """Per second."""
        size = self.window_size(now)  # purges first
        return self.total / (size / 1000.0) if size > 0 else 0.0


class Rate(SampledStat):
    """Kafka's ``Rate``: spread over at least ``num - 1`` whole windows (``floor_ms``)."""

    __slots__ = ("floor_ms",)

    def __init__(self, num: int, window_ms: float) -> None:
        super().__init__(num, window_ms)
        self.floor_ms = (num - 1) * window_ms  # the least window_size can be

    def window_size(self, now: float) -> float:
        self._purge(now)
        elapsed = self.elapsed(now)
        full = int(elapsed // self.window_ms)
        if full < self.num - 1:
            elapsed += (self.num - 1 - full) * self.window_ms
        return elapsed


class SimpleRate(SampledStat):
    """Kafka's ``SimpleRate``: over one window at least."""

    __slots__ = ()

    def window_size(self, now: float) -> float:
        self._purge(now)
        return max(self.elapsed(now), self.window_ms)
