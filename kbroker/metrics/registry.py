"""The counters. The hot paths only add to plain ints in dicts and lists that already exist (no lock: the
broker is one event loop); anything derived (totals over topics, percentiles) is computed at scrape time.

Request timings keep the last RING samples of each phase per request type, as Kafka's histograms keep a
bounded reservoir of recent samples; a scrape sorts a copy to read the percentiles.
"""
from __future__ import annotations

RING = 1024  # samples kept per request type and phase (a power of two: the slot is count & (RING - 1))
# Kafka's RequestMetrics histograms, in the order ``RequestMetrics.record`` takes them
PHASES = ("requestqueuetimems", "localtimems", "remotetimems", "responsequeuetimems", "responsesendtimems",
          "totaltimems")
# the percentiles the JMX exporter turns into quantile labels (50thPercentile -> "0.50", 999th -> "0.999")
QUANTILES = (("0.50", 0.50), ("0.75", 0.75), ("0.95", 0.95), ("0.98", 0.98), ("0.99", 0.99), ("0.999", 0.999))
# Kafka times fetches twice: as "Fetch" and as "FetchConsumer" or "FetchFollower"
FETCH_CONSUMER = -1
FETCH_FOLLOWER = -2


class RequestStats:
    """One request type: how many (by version), and the recent time of each phase in ms."""
    __slots__ = ("count", "versions", "times", "sums")

    def __init__(self) -> None:
        self.count = 0
        self.versions: dict[int, int] = {}
        self.times = [[0.0] * RING for _ in PHASES]
        self.sums = [0.0] * len(PHASES)

    def recent(self, phase: int) -> list[float]:
        """The samples of ``phase`` kept now, sorted."""
        return sorted(self.times[phase][:min(self.count, RING)])


class BrokerMetrics:
    """One broker's counters (a registry per broker, so brokers sharing a process stay apart)."""

    def __init__(self) -> None:
        self.bytes_in: dict[str, int] = {}     # by topic: record bytes clients produced
        self.messages_in: dict[str, int] = {}  # by topic: records clients produced
        self.bytes_out: dict[str, int] = {}    # by topic: record bytes sent to consumers (not followers)
        self.requests: dict[int, RequestStats] = {}  # by api key (or FETCH_CONSUMER / FETCH_FOLLOWER)

    def produced(self, topic: str, size: int, records: int) -> None:
        self.bytes_in[topic] = self.bytes_in.get(topic, 0) + size
        self.messages_in[topic] = self.messages_in.get(topic, 0) + records

    def fetched(self, topic: str, size: int) -> None:
        self.bytes_out[topic] = self.bytes_out.get(topic, 0) + size

    def request(self, key: int, version: int, received: float, dispatched: float, returned: float,
                ready: float, queued: float, sent: float) -> None:
        """One answered request, from its monotonic instants (seconds): read off the socket, handed to the
        handler, handler returned (or parked its answer), answer ready, answer queued for the socket, written."""
        stats = self.requests.get(key)
        if stats is None:
            stats = self.requests[key] = RequestStats()
        i = stats.count & (RING - 1)
        stats.count += 1
        versions = stats.versions
        versions[version] = versions.get(version, 0) + 1
        times, sums = stats.times, stats.sums
        ms = (dispatched - received) * 1000.0
        times[0][i] = ms
        sums[0] += ms
        ms = (returned - dispatched) * 1000.0
        times[1][i] = ms
        sums[1] += ms
        ms = (ready - returned) * 1000.0
        times[2][i] = ms
        sums[2] += ms
        ms = (queued - ready) * 1000.0
        times[3][i] = ms
        sums[3] += ms
        ms = (sent - queued) * 1000.0
        times[4][i] = ms
        sums[4] += ms
        ms = (sent - received) * 1000.0
        times[5][i] = ms
        sums[5] += ms
