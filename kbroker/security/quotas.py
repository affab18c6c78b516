"""Client quotas as Kafka 2.8 enforces them (ClientQuotaManager, ClientRequestQuotaManager, KIP-219).

Three quota types, each a ``ClientQuotas``: ``producer_byte_rate`` (bytes of Produce requests per
second), ``consumer_byte_rate`` (bytes of consumer Fetch responses per second) and
``request_percentage`` (handler time, in percent of one thread, per second). Their values come from
the entity configs (``/config/users/<u>``, ``/config/clients/<c>``, ``/config/users/<u>/clients/<c>``,
``<default>`` in any place), followed live through ``EntityConfigs``.

Which entity applies to a connection (its principal's name, ``ANONYMOUS`` on PLAINTEXT, and the
request header's client id) is Kafka's precedence, first match wins::

    users/<u>/clients/<c>, users/<u>/clients/<default>, users/<u>,
    users/<default>/clients/<c>, users/<default>/clients/<default>, users/<default>,
    clients/<c>, clients/<default>

and the entity decides what is measured together, as Kafka's metric tags do: a client-id quota is
one rate for every connection with that client id (whatever its user), a user quota one rate for
the user, a user+client quota one per (user, client id).

Rates are Kafka's ``Rate`` over a ``SampledStat``: ``quota.window.num`` samples of
``quota.window.size.seconds``; the rate is the samples' sum over the time since the oldest sample
began, never less than ``num - 1`` whole windows. A request that takes the rate above the bound is
throttled by Kafka's ``(rate - bound) / bound * window`` ms, the delay that brings the rate back to
the bound, plus, while the samples span less than that floor of ``num - 1`` windows, the part of
the floor not yet elapsed (Kafka leaves it out, so a fast client of a new sensor gets throttles
that cannot bring the rate down and overshoots its quota by half in the first 10 s); never more
than the span of all samples, after which every sample has expired.

Throttling is KIP-219's: the response goes out at once with ``throttle_time_ms``, and the
connection is muted (nothing more read from it) for that long. A throttled consumer Fetch is
answered empty and its bytes are taken back (``FetchQuota``). Follower fetches and the
controller's requests are never throttled. ``enabled`` stays False until some quota is
configured, so the dispatcher pays one attribute test per request until then.

Where it hooks in: the ``Dispatcher`` (handlers) hands every request to ``QuotaManager.run`` once ``enabled``
(it times the handler for request_percentage, records a Produce request's size, sets the
response's ``throttle_time_ms``, also on an awaited response, and mutes the connection); the
Fetch handler asks ``fetch_quota`` for a consumer's ``FetchQuota``, which caps the fetch and, when
the response is built, records its size or answers empty.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from kbroker.config.broker import BrokerConfig
from kbroker.metrics.rates import Rate
from kbroker.protocol import message_types as msg
from kbroker.protocol.header import RequestHeader
from kbroker.protocol.outcome import CLOSE, NO_RESPONSE
from kbroker.replication.fetch_read import PartitionAnswers, records_size
from kbroker.security.entity_configs import DEFAULT, EntityConfigs, parse_entity_path
from kbroker.security.principal import Session

log = logging.getLogger(__name__)

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
# Kafka's quota config keys and their types (QuotaConfigs): LONG keys take integral values only.
QUOTA_KEYS: dict[str, str] = {
    PRODUCER_BYTE_RATE: "LONG",
    CONSUMER_BYTE_RATE: "LONG",
    REQUEST_PERCENTAGE: "DOUBLE",
    CONTROLLER_MUTATION_RATE: "DOUBLE",  # stored and described; not enforced (CreateTopics etc.)
}

# Never throttled: the controller's and the brokers' own requests (Kafka's cluster actions).
# LeaderAndIsr, StopReplica, UpdateMetadata, ControlledShutdown, WriteTxnMarkers, AlterIsr,
# and the SASL exchange.
EXEMPT_APIS = frozenset({4, 5, 6, 7, 17, 27, 36, 56})
PRODUCE, FETCH = 0, 1
SENSOR_EXPIRY_MS = 3600_000  # Kafka drops a client's sensors after an hour without a request


def _now_ms() -> float:
    return time.monotonic() * 1000.0


class ClientQuotas:
    """One quota type (``producer_byte_rate`` ...): the configured bounds by entity and the rates
    of the clients measured against them."""

    def __init__(self, key: str, num: int, window_s: int) -> None:
        self.key = key
        self.num = num
        self.window_ms = window_s * 1000.0
        # entity -> bound; an entity is (user, client id), either None when absent, "<default>" for a default
        self.bounds: dict[tuple[str | None, str | None], float] = {}
        self._resolved: dict[tuple[str, str], tuple[tuple[str, str], float] | None] = {}
        self.rates: dict[tuple[str, str], Rate] = {}
        self._records = 0

    # -- configuration ---------------------------------------------------------------------

    def update(self, user: str | None, client: str | None, bound: float | None) -> None:
        entity = (user, client)
        if bound is None:
            if self.bounds.pop(entity, None) is None:
                return
        else:
            self.bounds[entity] = bound
        self._resolved = {}  # replaced, never mutated in place: the event loop may be reading it

    def resolve(self, user: str, client: str) -> tuple[tuple[str, str], float] | None:
        """Kafka's precedence: (what is measured together, the bound), or None when no quota applies."""
        key = (user, client)
        resolved = self._resolved
        if key in resolved:
            return resolved[key]
        b = self.bounds
        found: tuple[tuple[str, str], float] | None = None
        for entity, tags in (((user, client), key), ((user, DEFAULT), key), ((user, None), (user, "")),
                             ((DEFAULT, client), key), ((DEFAULT, DEFAULT), key), ((DEFAULT, None), (user, "")),
                             ((None, client), ("", client)), ((None, DEFAULT), ("", client))):
            bound = b.get(entity)
            if bound is not None:
                found = (tags, bound)
                break
        if len(resolved) > 10_000:
            resolved = self._resolved = {}
        resolved[key] = found
        return found

    # -- measuring -------------------------------------------------------------------------

    def _rate(self, tags: tuple[str, str], now: float) -> Rate:
        rate = self.rates.get(tags)
        if rate is None:
            self._expire(now)
            rate = self.rates[tags] = Rate(self.num, self.window_ms)
        return rate

    def _expire(self, now: float) -> None:
        self._records += 1
        if self._records % 1000 == 0:
            for tags, rate in list(self.rates.items()):
                if now - rate.last_used > SENSOR_EXPIRY_MS:
                    del self.rates[tags]

    def record(self, user: str, client: str, value: float, now: float | None = None) -> int:
        """Record ``value`` for the client and return the throttle time in ms (0 within the quota)."""
        found = self.resolve(user, client)
        if found is None:
            return 0
        tags, bound = found
        now = _now_ms() if now is None else now
        rate = self._rate(tags, now)
        rate.record(value, now)
        if rate.total * 1000.0 <= bound * rate.floor_ms:
            return 0  # within the bound even over the shortest window the rate can have
        observed = rate.measure(now)
        if observed <= bound:
            return 0
        if bound <= 0:
            return int(self.num * self.window_ms)
        size = rate.window_size(now)
        # Kafka's delay, (observed - bound) / bound * window, brings the rate back to the bound if
        # the window grows by it; a young rate's window is floored at num - 1 windows and does not
        # grow, so the time it lacks of that floor is added (0 once the samples span the floor).
        throttle = (observed - bound) / bound * size + (size - rate.elapsed(now))
        return int(min(round(throttle), self.num * self.window_ms))

    def unrecord(self, user: str, client: str, value: float, now: float | None = None) -> None:
        """Take back what a throttled (emptied) Fetch recorded."""
        found = self.resolve(user, client)
        if found is not None:
            now = _now_ms() if now is None else now
            self._rate(found[0], now).record(-value, now)

    def max_value_in_window(self, user: str, client: str) -> float | None:
        """The most one request may take without being throttled for sure (Kafka caps a consumer's
        fetch max_bytes to it): bound * (num - 1) windows. None without a quota."""
        found = self.resolve(user, client)
        if found is None:
            return None
        return found[1] * (self.num - 1) * self.window_ms / 1000.0


class QuotaConnection(Protocol):
    """What the quotas use of a client's connection (the network layer's): whose it is, and muting it (KIP-219)."""

    @property
    def session(self) -> Session: ...

    def mute(self, seconds: float) -> None: ...


class FetchQuota:
    """The consumer quota of one Fetch: caps its max bytes, and at response time records the
    response's size; over the quota, the response is replaced by an empty one (bytes taken back)
    and the connection muted."""

    __slots__ = ("quotas", "user", "client", "conn", "max_bytes")

    def __init__(self, quotas: ClientQuotas, user: str, client: str, conn: QuotaConnection, max_bytes: int) -> None:
        self.quotas = quotas
        self.user = user
        self.client = client
        self.conn = conn
        self.max_bytes = max_bytes

    def throttled_response(self, size: int, session_id: int) -> msg.FetchResponse | None:
        """None: send the response. Else the empty, throttled response to send instead."""
        now = _now_ms()
        throttle = self.quotas.record(self.user, self.client, size, now)
        if throttle <= 0:
            return None
        self.quotas.unrecord(self.user, self.client, size, now)
        self.conn.mute(throttle / 1000.0)
        return {"throttle_time_ms": throttle, "error_code": 0, "session_id": session_id, "responses": []}


def fetch_response_size(partitions: PartitionAnswers) -> int:
    """About what a Fetch response of these partitions takes on the wire (records plus fields)."""
    size = 16
    topics = set()
    for topic, out in partitions:
        if topic not in topics:
            topics.add(topic)
            size += 6 + len(topic)
        size += 46 + records_size(out.get("records"))
    return size


def produce_request_size(header: RequestHeader, body: msg.ProduceRequest) -> int:
    """About what a Produce request took on the wire (Kafka records the request's size)."""
    size = 20 + len(header.client_id or "") + len(getattr(body, "transactional_id", None) or "")
    for topic in body.topic_data:
        size += 6 + len(topic.name)
        for data in topic.partition_data:
            records = data.records
            size += 8 + (len(records) if records is not None else 0)
    return size


class QuotaManager:
    """The three quota types, fed by the entity configs; what the broker's dispatch and the Fetch
    handler ask."""

    def __init__(self, config: BrokerConfig, entity_configs: EntityConfigs) -> None:
        self.config = config
        self.entity_configs = entity_configs
        num, window = config.quota_window_num, config.quota_window_size_seconds
        self.produce = ClientQuotas(PRODUCER_BYTE_RATE, num, window)
        self.fetch = ClientQuotas(CONSUMER_BYTE_RATE, num, window)
        self.request = ClientQuotas(REQUEST_PERCENTAGE, num, window)
        self._by_key = {q.key: q for q in (self.produce, self.fetch, self.request)}
        self.enabled = False  # like Kafka, once on it stays on until a restart
        entity_configs.subscribe(self.on_entity_configs)

    def on_entity_configs(self, path: str, configs: dict[str, str]) -> None:
        try:
            user, client = parse_entity_path(path)
        except ValueError:
            return
        for key, quotas in self._by_key.items():
            text = configs.get(key)
            bound: float | None = None
            if text is not None:
                try:
                    bound = float(text)
                except ValueError:
                    log.error("quota %s=%r of %s ignored: not a number", key, text, path)
            quotas.update(user, client, bound)
            if bound is not None and not self.enabled:
                log.info("client quotas enabled (%s %s=%s)", path, key, text)
                self.enabled = True

    # -- enforcement -----------------------------------------------------------------------

    def run(self, handler: Callable[..., Any], ctx: Any, header: RequestHeader, body: Any,
            conn: QuotaConnection) -> Any:
        """Run one request's handler under the quotas (the dispatcher calls this when
        ``enabled``): record its bytes and time, and throttle (KIP-219) when over a quota."""
        api = header.api_key
        if api in EXEMPT_APIS or (api == FETCH and body.replica_id >= 0):
            return handler(ctx, header, body, conn)
        user = conn.session.principal.name
        client = header.client_id or ""
        timed = (self.request.resolve(user, client) is not None
                 and not (api == PRODUCE and body.acks == 0))  # acks=0: no request quota, as in Kafka
        started = time.perf_counter_ns() if timed else 0
        result = handler(ctx, header, body, conn)
        throttle = 0
        now = _now_ms()
        if api == PRODUCE:
            throttle = self.produce.record(user, client, produce_request_size(header, body), now)
        if timed:
            percent = (time.perf_counter_ns() - started) * 1e-7  # ns -> percent of one thread-second
            throttle = max(throttle, self.request.record(user, client, percent, now))
        if throttle <= 0:
            return result
        conn.mute(throttle / 1000.0)
        return with_throttle(result, throttle)

    def fetch_quota(self, conn: QuotaConnection, header: RequestHeader) -> FetchQuota | None:
        """The consumer quota of a consumer Fetch, or None when none applies."""
        if not self.enabled:
            return None
        user = conn.session.principal.name
        client = header.client_id or ""
        cap = self.fetch.max_value_in_window(user, client)
        if cap is None:
            return None
        return FetchQuota(self.fetch, user, client, conn, max(1, min(int(cap), 0x7FFFFFFF)))


def with_throttle(result: Any, throttle_ms: int) -> Any:
    """The response with ``throttle_time_ms`` at least ``throttle_ms`` (also once an awaited one is ready)."""
    if result is NO_RESPONSE or result is CLOSE or result is None:
        return result
    if asyncio.iscoroutine(result) or isinstance(result, asyncio.Future):
        async def later() -> Any:
            return with_throttle(await result, throttle_ms)
        return later()
    if isinstance(result, dict):
        result["throttle_time_ms"] = max(result.get("throttle_time_ms") or 0, throttle_ms)
    elif hasattr(result, "throttle_time_ms"):
        try:
            result.throttle_time_ms = max(result.throttle_time_ms or 0, throttle_ms)
        except AttributeError:
            pass
    return result
