"""Client quota bookkeeping without a broker: Kafka's precedence of quota entities, what is measured
together, Kafka's sampled rate and throttle time, the entity configs feeding it, and the
throttled response the dispatch and the Fetch handler get."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from kbroker.config.broker import build_config
from kbroker.metrics.rates import Rate
from kbroker.protocol.outcome import NO_RESPONSE
from kbroker.security.principal import KafkaPrincipal, Session
from kbroker.security.quotas import (
    ClientQuotas,
    QuotaManager,
    fetch_response_size,
    produce_request_size,
    with_throttle,
)
from zk_compat.jvm import java_double

D = "<default>"
MB = 1048576.0


# -- precedence ------------------------------------------------------------------------------

LEVELS = [  # Kafka's order, most specific first: (entity, what it measures together for alice/c1)
    (("alice", "c1"), ("alice", "c1")),
    (("alice", D), ("alice", "c1")),
    (("alice", None), ("alice", "")),
    ((D, "c1"), ("alice", "c1")),
    ((D, D), ("alice", "c1")),
    ((D, None), ("alice", "")),
    ((None, "c1"), ("", "c1")),
    ((None, D), ("", "c1")),
]


@pytest.mark.parametrize("level", range(len(LEVELS)))
def test_precedence_first_match_wins(level):
    q = ClientQuotas("producer_byte_rate", 11, 1)
    # every level at or below this one configured, each with its own bound
    for i, (entity, _) in enumerate(LEVELS[level:], start=level):
        q.update(*entity, bound=1000.0 + i)
    tags, bound = q.resolve("alice", "c1")
    assert bound == 1000.0 + level
    assert tags == LEVELS[level][1]


def test_no_quota_and_unrelated_entities():
    q = ClientQuotas("producer_byte_rate", 11, 1)
    assert q.resolve("alice", "c1") is None
    q.update("bob", None, 5.0)
    q.update(None, "c2", 6.0)
    q.update("bob", "c1", 7.0)
    assert q.resolve("alice", "c1") is None
    assert q.record("alice", "c1", 10 * MB) == 0
    assert q.resolve("bob", "c9") == (("bob", ""), 5.0)
    assert q.resolve("ANONYMOUS", "c2") == (("", "c2"), 6.0)  # a client id quota works on PLAINTEXT


def test_update_and_removal_take_effect_at_once():
    q = ClientQuotas("producer_byte_rate", 11, 1)
    q.update(None, D, 10.0)
    assert q.resolve("u", "c") == (("", "c"), 10.0)
    q.update(None, "c", 20.0)
    assert q.resolve("u", "c") == (("", "c"), 20.0)
    q.update(None, "c", None)
    assert q.resolve("u", "c") == (("", "c"), 10.0)
    q.update(None, D, None)
    assert q.resolve("u", "c") is None


def test_client_quota_is_shared_by_every_user_of_the_client_id():
    q = ClientQuotas("producer_byte_rate", 11, 1)
    q.update(None, "shared", MB)
    now = 1_000_000.0
    assert q.record("alice", "shared", 6 * MB, now) == 0
    assert q.record("bob", "shared", 6 * MB, now) > 0  # 12 MB on one rate: over 10 s x 1 MB/s
    q.update("carol", None, MB)  # a user quota: carol's clients measured together, apart from others
    assert q.record("carol", "x", 6 * MB, now) == 0
    assert q.record("carol", "y", 6 * MB, now) > 0
    assert q.record("dave", "x", 6 * MB, now) == 0


# -- Kafka's rate and throttle time ------------------------------------------------------------

def test_rate_floors_the_window_at_num_minus_one_samples():
    r = Rate(11, 1000.0)
    r.record(10.0, 0.0)
    assert r.window_size(0.0) == 10_000.0
    assert r.measure(0.0) == pytest.approx(1.0)       # 10 units over the 10 s floor
    assert r.window_size(12_500.0) == 10_000.0         # the sample expired: the floor again
    assert r.measure(12_500.0) == 0.0


def test_rate_samples_advance_and_wrap_like_kafka():
    r = Rate(3, 1000.0)  # 3 samples of 1 s: floor 2 s
    r.record(6.0, 0.0)
    r.record(6.0, 1000.0)     # the first sample is complete: a second one
    r.record(6.0, 2500.0)     # a third
    assert r.window_size(2500.0) == 2500.0
    assert r.measure(2500.0) == pytest.approx(18.0 / 2.5)
    r.record(1.0, 3500.0)     # wraps: the oldest sample (t=0) is reused
    assert r.elapsed(3500.0) == 2500.0
    assert r.measure(3500.0) == pytest.approx(13.0 / 2.5)


def test_throttle_time_brings_the_rate_back_to_the_bound():
    q = ClientQuotas("producer_byte_rate", 11, 1)
    q.update(None, "c", MB)
    t = 0.0
    assert q.record("u", "c", 9 * MB, t) == 0
    # a young rate: 11 MB measured over the 10 s floor; only 11 s since its start bring it to 1 MB/s
    # (Kafka's formula alone would say 1 s, which the floor makes too short)
    throttle = q.record("u", "c", 2 * MB, t + 200.0)
    assert throttle == pytest.approx(11_000 - 200, abs=1)
    # a mature rate (samples span more than the floor): exactly Kafka's (O - T) / T * W
    q2 = ClientQuotas("producer_byte_rate", 11, 1)
    q2.update(None, "c", MB)
    for second in range(11):
        q2.record("u", "c", MB * 0.5, second * 1000.0)
    now = 10_500.0
    q2.record("u", "c", 0.0, now)
    rate = q2.rates[("", "c")]
    size = rate.window_size(now)
    total = 5.5 * MB + 6 * MB
    expected = ((total / (size / 1000)) - MB) / MB * size
    assert q2.record("u", "c", 6 * MB, now) == round(expected)


def test_throttle_is_bounded_by_the_sample_span():
    q = ClientQuotas("producer_byte_rate", 11, 1)
    q.update(None, "c", 1.0)
    assert q.record("u", "c", 1e12, 0.0) == 11_000
    q.update(None, "z", 0.0)
    assert q.record("u", "z", 1.0, 0.0) == 11_000


def test_unrecord_takes_back_a_throttled_fetch():
    q = ClientQuotas("consumer_byte_rate", 11, 1)
    q.update(None, "c", MB)
    assert q.record("u", "c", 9 * MB, 0.0) == 0
    assert q.record("u", "c", 2 * MB, 10.0) > 0
    q.unrecord("u", "c", 2 * MB, 10.0)
    assert q.record("u", "c", 0.5 * MB, 20.0) == 0  # 9.5 MB: within 10 s x 1 MB/s
    assert q.max_value_in_window("u", "c") == 10 * MB
    assert q.max_value_in_window("u", "other") is None


# -- the manager: entity configs in, throttled responses out -------------------------------------

class FakeEntityConfigs:
    def __init__(self) -> None:
        self.listeners = []

    def subscribe(self, fn) -> None:
        self.listeners.append(fn)

    def change(self, path: str, configs: dict[str, str]) -> None:
        for fn in self.listeners:
            fn(path, configs)


class FakeConn:
    def __init__(self, user: str = "ANONYMOUS") -> None:
        self.session = Session(principal=KafkaPrincipal("User", user))
        self.muted: list[float] = []

    def mute(self, seconds: float) -> None:
        self.muted.append(seconds)


def manager(**overrides: str) -> tuple[QuotaManager, FakeEntityConfigs]:
    configs = FakeEntityConfigs()
    config = build_config({k: (v, "test") for k, v in overrides.items()})
    return QuotaManager(config, configs), configs  # type: ignore[arg-type]


def test_entity_configs_feed_the_quotas_and_enable_them():
    qm, configs = manager()
    assert not qm.enabled
    configs.change("users/al%2Fice/clients/%3Cdefault%3E", {"SCRAM-SHA-256": "salt=...", "other": "1"})
    assert not qm.enabled  # no quota key: nothing to enforce yet
    configs.change("users/al%2Fice/clients/<default>", {"producer_byte_rate": "1024", "request_percentage": "50.5",
                                                        "consumer_byte_rate": "oops"})
    assert qm.enabled
    assert qm.produce.resolve("al/ice", "any") == (("al/ice", "any"), 1024.0)
    assert qm.request.resolve("al/ice", "any") == (("al/ice", "any"), 50.5)
    assert qm.fetch.resolve("al/ice", "any") is None  # not a number: ignored
    configs.change("users/al%2Fice/clients/<default>", {})
    assert qm.produce.resolve("al/ice", "any") is None
    assert qm.enabled  # as in Kafka, stays on until a restart
    configs.change("topics/t", {"producer_byte_rate": "1"})  # not a user or client entity: ignored
    assert qm.produce.bounds == {}


def test_window_keys_come_from_the_broker_config():
    qm, _ = manager(**{"quota.window.num": "5", "quota.window.size.seconds": "2"})
    assert (qm.produce.num, qm.produce.window_ms) == (5, 2000.0)


def produce_request(acks: int = 1, size: int = 1000):
    body = SimpleNamespace(acks=acks, transactional_id=None, topic_data=[
        SimpleNamespace(name="t", partition_data=[SimpleNamespace(index=0, records=b"x" * size)])])
    return SimpleNamespace(api_key=0, api_version=8, client_id="c"), body


def test_run_throttles_produce_with_throttle_time_and_mute():
    qm, configs = manager()
    configs.change("clients/c", {"producer_byte_rate": "1000"})
    header, body = produce_request(size=5000)
    conn = FakeConn()

    def handler(ctx, h, b, c):
        return {"responses": [], "throttle_time_ms": 0}
    assert qm.run(handler, None, header, body, conn) == {"responses": [], "throttle_time_ms": 0}
    assert conn.muted == []
    header, body = produce_request(size=20000)
    response = qm.run(handler, None, header, body, conn)
    assert response["throttle_time_ms"] > 0
    assert conn.muted == [response["throttle_time_ms"] / 1000]
    # acks=0: no response to carry it, the connection is muted all the same
    header, body = produce_request(acks=0, size=20000)
    assert qm.run(lambda *a: NO_RESPONSE, None, header, body, conn) is NO_RESPONSE
    assert len(conn.muted) == 2


def test_run_leaves_follower_fetches_and_cluster_requests_alone():
    qm, configs = manager()
    configs.change("clients/<default>", {"request_percentage": "0.000001"})
    conn = FakeConn()
    follower = SimpleNamespace(api_key=1, client_id="broker-1"), SimpleNamespace(replica_id=1)
    assert qm.run(lambda *a: {"throttle_time_ms": 0}, None, *follower, conn) == {"throttle_time_ms": 0}
    for api in (4, 5, 6, 7, 27, 56):
        qm.run(lambda *a: {}, None, SimpleNamespace(api_key=api, client_id="x"), None, conn)
    assert conn.muted == []
    # any other request is timed against request_percentage
    metadata = SimpleNamespace(api_key=3, client_id="x")
    response = qm.run(lambda *a: {"throttle_time_ms": 0}, None, metadata, None, conn)
    assert response["throttle_time_ms"] > 0 and conn.muted


def test_with_throttle_reaches_awaited_responses():
    async def later():
        await asyncio.sleep(0)
        return {"throttle_time_ms": 0, "x": 1}
    assert asyncio.run(with_throttle(later(), 250)) == {"throttle_time_ms": 250, "x": 1}
    assert with_throttle({"throttle_time_ms": 900}, 250) == {"throttle_time_ms": 900}


def test_fetch_quota_caps_and_empties_throttled_responses():
    qm, configs = manager()
    conn = FakeConn("alice")
    header = SimpleNamespace(api_key=1, client_id="cons")
    assert qm.fetch_quota(conn, header) is None
    configs.change("users/alice", {"consumer_byte_rate": "100000"})
    quota = qm.fetch_quota(conn, header)
    assert quota is not None and quota.max_bytes == 1_000_000
    assert quota.throttled_response(900_000, 7) is None
    throttled = quota.throttled_response(300_000, 7)
    assert throttled is not None
    assert throttled["responses"] == [] and throttled["session_id"] == 7 and throttled["throttle_time_ms"] > 0
    assert conn.muted == [throttled["throttle_time_ms"] / 1000]
    # the emptied response's bytes were taken back: a small one now fits
    assert quota.throttled_response(50_000, 7) is None


def test_wire_sizes():
    header, body = produce_request(size=1000)
    assert 1000 < produce_request_size(header, body) < 1100
    slice_like = SimpleNamespace(length=5000)
    size = fetch_response_size([("t", {"records": slice_like}), ("t", {"records": b""}), ("u", {"records": b"ab"})])
    assert 5002 < size < 5300


@pytest.mark.parametrize("value,text", [(50.0, "50.0"), (1e7, "1.0E7"), (12345678.5, "1.23456785E7"),
                                        (0.5, "0.5"), (1e-4, "1.0E-4"), (100.25, "100.25"), (0.0, "0.0")])
def test_double_quota_values_are_written_as_java_does(value, text):
    assert java_double(value) == text


def test_rate_total_follows_its_samples():
    import random
    rng = random.Random(7)
    r = Rate(4, 1000.0)
    now = 0.0
    for _ in range(2000):
        now += rng.choice((1.0, 50.0, 400.0, 1500.0, 6000.0))
        r.record(rng.uniform(-5, 100), now)
        if rng.random() < 0.3:
            r.measure(now)
        assert r.total == pytest.approx(sum(r.values))
