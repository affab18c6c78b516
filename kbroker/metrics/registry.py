"""The counters. The hot paths only add to plain ints in dicts and lists that already exist (no lock: the
broker is one event loop); anything derived (totals over topics, percentiles) is computed at scrape time.

Request timings keep the last RING requests of each type, as Kafka's histograms keep a bounded reservoir
of recent samples; a scrape works out their phase times and sorts them to read the percentiles. (So
the summaries carry quantiles and ``_count`` and no ``_sum``, as the JMX exporter's rendering of Kafka's
histograms does.)
"""
from __future__ import annotations

from typing import Protocol

RING = 1024  # requests kept per type (a power of two: the place is count & (RING - 1))
# Kafka's RequestMetrics histograms, in the order ``_phases`` computes them (Kafka's own order)
PHASES = ("requestqueuetimems", "localtimems", "remotetimems", "throttletimems", "responsequeuetimems",
          "responsesendtimems", "totaltimems")
# the percentiles the JMX exporter turns into quantile labels (50thPercentile -> "0.50", 999th -> "0.999")
QUANTILES = (("0.50", 0.50), ("0.75", 0.75), ("0.95", 0.95), ("0.98", 0.98), ("0.99", 0.99), ("0.999", 0.999))
# Kafka times fetches twice: as "Fetch" and as "FetchConsumer" or "FetchFollower"
FETCH_CONSUMER = -1
FETCH_FOLLOWER = -2
# Kafka error codes ReplicaManager leaves out of FailedProduceRequests / FailedFetchRequests: the "known"
# failures (leadership moves, unknown partitions, records refused as too large or corrupt, a failed log dir,
# out of range offsets); the meters are meant for a broker's unexpected failures.
MESSAGE_TOO_LARGE = 10
_EXPECTED_PRODUCE_ERRORS = frozenset((
    3,   # UNKNOWN_TOPIC_OR_PARTITION
    6,   # NOT_LEADER_OR_FOLLOWER
    MESSAGE_TOO_LARGE,
    18,  # RECORD_LIST_TOO_LARGE
    2,   # CORRUPT_MESSAGE
    56,  # KAFKA_STORAGE_ERROR
    17,  # INVALID_TOPIC_EXCEPTION: an internal topic, which Kafka refuses without marking a failure
))
_EXPECTED_FETCH_ERRORS = frozenset((
    3,   # UNKNOWN_TOPIC_OR_PARTITION
    6,   # NOT_LEADER_OR_FOLLOWER
    75,  # UNKNOWN_LEADER_EPOCH
    74,  # FENCED_LEADER_EPOCH
    9,   # REPLICA_NOT_AVAILABLE
    56,  # KAFKA_STORAGE_ERROR
    1,   # OFFSET_OUT_OF_RANGE
))


class TimedRequest(Protocol):
    """A request's monotonic instants (seconds), as the reactor kept them: bytes read off the socket, handed to
    the handler, handler returned (or parked its answer), answer ready, answer queued for the socket, written;
    and ``throttle_ms``, the throttle a client quota gave it (the time its connection is muted for, 0 when none)."""
    received: float
    dispatched: float
    returned: float
    ready_at: float
    queued: float
    sent: float
    throttle_ms: float


def _phases(r: TimedRequest) -> tuple[float, float, float, float, float, float, float]:
    """The PHASES of one request, in ms. ThrottleTimeMs is no span of the request's own: as Kafka's
    (apache/kafka core/src/main/scala/kafka/network/RequestChannel.scala, updateRequestMetrics records the
    request's apiThrottleTimeMs, the throttle the quota managers returned), it is the time the connection is
    muted for after the answer, which the next request waits out, so TotalTimeMs does not include it."""
    return ((r.dispatched - r.received) * 1000.0, (r.returned - r.dispatched) * 1000.0,
            (r.ready_at - r.returned) * 1000.0, r.throttle_ms, (r.queued - r.ready_at) * 1000.0,
            (r.sent - r.queued) * 1000.0, (r.sent - r.received) * 1000.0)


class RequestStats:
    """One request type: how many (by version), and its last RING requests themselves (the reactor's own
    records of them, so recording one is a store: the phase times are worked out at scrape time)."""
    __slots__ = ("count", "versions", "kept")

    def __init__(self) -> None:
        self.count = 0
        self.versions: dict[int, int] = {}
        self.kept: list[TimedRequest | None] = [None] * RING

    def recent(self) -> list[list[float]]:
        """Per phase, the times (ms) of the requests kept now, sorted."""
        kept = [r for r in self.kept if r is not None]
        return [sorted(column) for column in zip(*map(_phases, kept), strict=True)] if kept else [[] for _ in PHASES]


class BrokerMetrics:
    """One broker's counters (a registry per broker, so brokers sharing a process stay apart)."""

    def __init__(self) -> None:
        self.bytes_in: dict[str, int] = {}     # by topic: record bytes clients produced
        self.messages_in: dict[str, int] = {}  # by topic: records clients produced
        self.bytes_out: dict[str, int] = {}    # by topic: record bytes sent to consumers (not followers)
        # by topic, as Kafka's BrokerTopicMetrics count them (ReplicaManager): one per partition of a request
        # that reached the log (past the ACL, metadata and request checks); "failed" only for errors Kafka
        # calls unexpected (not leadership, unknown partition, too large, corrupt, storage, out of range)
        self.produce_requests: dict[str, int] = {}
        self.failed_produce_requests: dict[str, int] = {}
        self.bytes_rejected: dict[str, int] = {}  # record bytes of appends refused as larger than max.message.bytes
        self.fetch_requests: dict[str, int] = {}  # consumers' and followers' partition reads
        self.failed_fetch_requests: dict[str, int] = {}
        self.replication_bytes_out = 0         # record bytes sent to followers
        self.requests: dict[int, RequestStats] = {}  # by api key (or FETCH_CONSUMER / FETCH_FOLLOWER)

    def produced(self, topic: str, size: int, records: int) -> None:
        self.produce_requests[topic] = self.produce_requests.get(topic, 0) + 1
        self.bytes_in[topic] = self.bytes_in.get(topic, 0) + size
        self.messages_in[topic] = self.messages_in.get(topic, 0) + records

    def produce_refused(self, topic: str, code: int, size: int) -> None:
        """A partition's append that reached the log and was refused with Kafka error ``code``."""
        self.produce_requests[topic] = self.produce_requests.get(topic, 0) + 1
        if code == MESSAGE_TOO_LARGE:
            self.bytes_rejected[topic] = self.bytes_rejected.get(topic, 0) + size
        elif code not in _EXPECTED_PRODUCE_ERRORS:
            self.failed_produce_requests[topic] = self.failed_produce_requests.get(topic, 0) + 1

    def fetched(self, topic: str, size: int) -> None:
        self.bytes_out[topic] = self.bytes_out.get(topic, 0) + size

    def fetch_read(self, topic: str) -> None:
        self.fetch_requests[topic] = self.fetch_requests.get(topic, 0) + 1

    def fetch_failed(self, topic: str, code: int) -> None:
        """A partition read that failed with Kafka error ``code``."""
        if code not in _EXPECTED_FETCH_ERRORS:
            self.failed_fetch_requests[topic] = self.failed_fetch_requests.get(topic, 0) + 1

    def request(self, key: int, version: int, timed: TimedRequest) -> None:
        """One answered request (written to its socket): counted, and kept among its type's last RING."""
        stats = self.requests.get(key)
        if stats is None:
            stats = self.requests[key] = RequestStats()
        stats.kept[stats.count & (RING - 1)] = timed
        stats.count += 1
        versions = stats.versions
        versions[version] = versions.get(version, 0) + 1
