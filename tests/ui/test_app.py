"""The web app of `kbroker ui` in process (aiohttp's test server on 127.0.0.1), fed hand-built snapshots through the
real sampler and history (a SQLite file in the test's tmp dir): every page and its JSON twin, updates by
server-sent events, /metrics, basic auth, and nothing loaded from elsewhere."""
from __future__ import annotations

import asyncio
import base64
import json
import re
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from kbroker.ui.app import STATIC, Credentials, Ui, page_html
from kbroker.ui.history import History
from kbroker.ui.model import Rates
from kbroker.ui.sampler import Sampler
from kbroker.ui.views import STATUSES
from tests.ui.builders import FakeClock
from tests.ui.conftest import HandCollector
from tests.ui.snapshots import T0, cluster_snapshot


class CountingSampler(Sampler):
    """The real sampler, counting its rounds and maintenance runs."""

    def __init__(self, history: History, clock: FakeClock) -> None:
        super().__init__(history, clock=clock)
        self.rounds = 0
        self.maintained = 0

    def ingest(self, snapshot):
        self.rounds += 1
        super().ingest(snapshot)

    def maintain(self) -> None:
        self.maintained += 1
        super().maintain()


def sampler_at(tmp_path: Path, kind: type[CountingSampler] = CountingSampler) -> CountingSampler:
    clock = FakeClock(T0 / 1000)
    return kind(History(tmp_path / "history.sqlite", clock=clock), clock)


@asynccontextmanager
async def serving(ui: Ui) -> AsyncIterator[TestClient]:
    client = TestClient(TestServer(ui.app(sample=False), host="127.0.0.1"))
    await client.start_server()
    try:
        yield client
    finally:
        await client.close()


def make_ui(tmp_path: Path, *snapshots, credentials: Credentials | None = None) -> tuple[Ui, HandCollector]:
    collector = HandCollector(snapshots or [cluster_snapshot()])
    return Ui(collector, lambda: sampler_at(tmp_path), interval=1.0, credentials=credentials), collector


async def test_every_page_and_its_json_twin(tmp_path: Path):
    ui, _ = make_ui(tmp_path, cluster_snapshot(rates=Rates(1000.0, 500.0, 20.0)))
    async with serving(ui) as client:
        await ui.sample_once()
        for path, page in [("/", "overview"), ("/groups", "groups"), ("/groups/kafka-group", "group"),
                           ("/topics", "topics"), ("/topics/orders", "topic"), ("/brokers", "brokers")]:
            answer = await client.get(path)
            assert answer.status == 200, path
            assert f'data-page="{page}"' in await answer.text()
            twin = await client.get("/api/" if path == "/" else "/api" + path)
            assert twin.status == 200, path
            assert (await twin.json())["seq"] == 1

        overview = await (await client.get("/api/")).json()
        assert (overview["brokers_up"], overview["brokers_down"], overview["controller"]) == (2, 1, 1)
        assert [(p["topic"], p["partition"]) for p in overview["offline"]] == [("orders", 2)]
        assert [(p["topic"], p["partition"]) for p in overview["under_replicated"]] == [("orders", 1), ("orders", 2)]
        assert [(p["topic"], p["partition"]) for p in overview["under_min_isr"]] == [("orders", 1)]
        statuses = [g["status"] for g in (await (await client.get("/api/groups")).json())["groups"]]
        assert len(statuses) == 2
        assert overview["groups_by_status"] == {s: statuses.count(s) for s in overview["groups_by_status"]}
        assert overview["throughput_bytes"]["names"] == ["bytes_in", "bytes_out"]
        assert overview["throughput_bytes"]["y"] == [[1000.0], [500.0]]
        assert overview["throughput_messages"] == {"x": [T0 / 1000], "names": ["messages_in"], "y": [[20.0]],
                                              "from": (T0 - 3_600_000) / 1000, "to": T0 / 1000}

        groups = {g["name"]: g for g in (await (await client.get("/api/groups")).json())["groups"]}
        assert groups["zk-group"]["storage"] == "zookeeper" and groups["kafka-group"]["storage"] == "kafka"
        assert groups["kafka-group"]["total_lag"] == 120  # (100 - 40) on partitions 0 and 1

        one = await (await client.get("/api/groups/kafka-group?span=24h&per_partition=1")).json()
        assert [(p["partition"], p["committed"], p["log_end"], p["lag"]) for p in one["partitions"]] == \
            [(0, 40, 100, 60), (1, 40, 100, 60)]
        assert one["members"][0]["client_id"] == "client-a"
        assert one["chart"]["span"] == "24h" and one["chart"]["per_partition"] is True
        assert (one["chart"]["names"], one["chart"]["y"]) == (["orders-0", "orders-1"], [[60.0], [60.0]])

        topics = {t["name"]: t for t in (await (await client.get("/api/topics")).json())["topics"]}
        assert topics["orders"]["partitions"] == 3 and topics["orders"]["under_replicated"] == 2
        assert topics["orders"]["non_preferred_leaders"] == 1 and topics["orders"]["offline"] == 1
        assert topics["orders"]["size_bytes"] == -1  # partition 2's leader is offline: its size is unknown
        assert topics["orders"]["messages_per_second"] is None  # a rate needs two rounds
        assert topics["__consumer_offsets"]["size_bytes"] == 512 and topics["__consumer_offsets"]["internal"]

        orders = await (await client.get("/api/topics/orders")).json()
        flags = {p["partition"]: (p["under_replicated"], p["preferred_leader"], p["offline"])
                 for p in orders["partitions"]}
        assert flags == {0: (False, True, False), 1: (True, False, False), 2: (True, False, True)}

        brokers = await (await client.get("/api/brokers")).json()
        assert [(d["broker"], d["path"], d["offline"]) for d in brokers["log_dirs"]] == \
            [(1, "/data/k1", False), (2, "/data/k2", False), (2, "/data/k2b", True)]
        assert brokers["log_dirs"][0]["partitions"][0] == {"topic": "orders", "partition": 0, "size_bytes": 4096}
        assert brokers["log_dirs"][0]["free_bytes"] == 10_000_000


async def test_before_the_first_sample_the_api_says_why_and_a_failed_round_keeps_the_last(tmp_path: Path):
    ui, collector = make_ui(tmp_path, OSError("no broker answers at 127.0.0.1:1"))
    async with serving(ui) as client:
        assert await ui.sample_once() is None
        answer = await client.get("/api/groups")
        assert answer.status == 503
        assert (await answer.json()) == {"error": "OSError: no broker answers at 127.0.0.1:1", "waiting": True}
        assert (await client.get("/groups")).status == 200  # the page itself loads and waits

        collector.give(cluster_snapshot())
        collector.give(TimeoutError("metadata timed out"))
        assert (await ui.sample_once()) is not None
        assert await ui.sample_once() is None
        body = await (await client.get("/api/groups")).json()
        assert body["seq"] == 1 and body["sample_error"] == "TimeoutError: metadata timed out"


async def test_unknown_names_and_bad_spans_are_answered_plainly(tmp_path: Path):
    ui, _ = make_ui(tmp_path)
    async with serving(ui) as client:
        await ui.sample_once()
        answer = await client.get("/api/groups/nobody")
        assert answer.status == 404 and "nobody" in (await answer.json())["error"]
        assert (await client.get("/api/topics/nothing")).status == 404
        assert (await client.get("/api/groups/kafka-group?storage=zookeeper")).status == 404
        assert (await client.get("/api/groups/zk-group?storage=zookeeper")).status == 200
        answer = await client.get("/api/groups/kafka-group?span=2h")
        assert answer.status == 400 and "1h, 24h, 7d" in (await answer.json())["error"]


async def test_each_round_is_pushed_to_open_pages_as_a_server_sent_event(tmp_path: Path):
    ui, collector = make_ui(tmp_path, cluster_snapshot(T0), cluster_snapshot(T0 + 1000, log_end=150))
    async with serving(ui) as client:
        await ui.sample_once()
        events = await client.get("/api/events")
        assert events.headers["Content-Type"] == "text/event-stream"

        async def next_update() -> dict[str, int]:
            while True:
                line = (await events.content.readline()).decode()
                if line.startswith("data: "):
                    return json.loads(line[len("data: "):])

        assert await next_update() == {"seq": 1, "taken_ms": T0}  # the round already there, at once
        await ui.sample_once()
        assert await next_update() == {"seq": 2, "taken_ms": T0 + 1000}
        groups = {g["name"]: g for g in (await (await client.get("/api/groups")).json())["groups"]}
        assert groups["kafka-group"]["total_lag"] == 220
        assert groups["kafka-group"]["sparkline"] == [120, 220]
        topics = {t["name"]: t for t in (await (await client.get("/api/topics")).json())["topics"]}
        assert topics["orders"]["messages_per_second"] == 100.0  # 50 more on each of two partitions in a second
        events.close()


async def test_metrics_name_lag_and_status_as_kafka_exporter_does(tmp_path: Path):
    # the log end was at the committed offset a minute before: the group lags by a minute
    ui, _ = make_ui(tmp_path, cluster_snapshot(T0 - 60_000, log_end=40), cluster_snapshot(T0))
    async with serving(ui) as client:
        empty = await client.get("/metrics")
        assert empty.status == 200 and "kafka_consumergroup_lag" in await empty.text()
        await ui.sample_once()
        await ui.sample_once()
        view = next(g for g in (await (await client.get("/api/groups")).json())["groups"] if g["name"] == "kafka-group")
        answer = await client.get("/metrics")
        assert answer.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for family in text_string_to_metric_families(await answer.text()) for s in family.samples}
    group = ("consumergroup", "kafka-group")
    assert samples["kafka_consumergroup_lag", (group, ("partition", "1"), ("topic", "orders"))] == 60
    assert samples["kafka_consumergroup_current_offset", (group, ("partition", "0"), ("topic", "orders"))] == 40
    assert samples["kafka_consumergroup_lag_sum", (group, ("topic", "orders"))] == 120
    assert view["lag_seconds"] is not None and 0 < view["lag_seconds"] <= 60
    assert samples["kafka_consumergroup_lag_seconds", (group, ("storage", "kafka"))] == view["lag_seconds"]
    status = {name: value for (metric, labels), value in samples.items()
              if metric == "kafka_consumergroup_status" and group in labels for name in [dict(labels)["status"]]}
    assert status == {name: int(name == view["status"]) for name in STATUSES}
    assert samples["kafka_brokers", ()] == 2


async def test_basic_auth_guards_every_route(tmp_path: Path):
    secret = tmp_path / "ui-auth"
    secret.write_text("# who may look\nops:s3cret:with-colon\n")
    credentials = Credentials.read(str(secret))
    assert credentials == Credentials("ops", "s3cret:with-colon")
    ui, _ = make_ui(tmp_path, credentials=credentials)
    async with serving(ui) as client:
        await ui.sample_once()
        for path in ("/", "/api/groups", "/metrics", "/static/ui.js", "/api/events"):
            answer = await client.get(path)
            assert answer.status == 401 and answer.headers["WWW-Authenticate"].startswith("Basic"), path
        wrong = base64.b64encode(b"ops:guess").decode()
        assert (await client.get("/api/groups", headers={"Authorization": f"Basic {wrong}"})).status == 401
        right = base64.b64encode(b"ops:s3cret:with-colon").decode()
        assert (await client.get("/api/groups", headers={"Authorization": f"Basic {right}"})).status == 200


@pytest.mark.parametrize("text", ["", "# only a comment\n", "no-colon-here\n", ":password-without-user\n"])
def test_a_malformed_credentials_file_is_refused_with_its_name(tmp_path: Path, text: str):
    path = tmp_path / "auth"
    path.write_text(text)
    with pytest.raises(ValueError, match=f"{path}: expected one line user:password"):
        Credentials.read(str(path))


async def test_the_loop_samples_at_its_interval_and_runs_maintenance_off_the_event_loop(tmp_path: Path):
    sampler = sampler_at(tmp_path)
    ui = Ui(HandCollector([cluster_snapshot()]), lambda: sampler, interval=0.05, maintain_every=0.0)
    task = asyncio.create_task(ui.sample_forever())
    try:
        while sampler.rounds < 3 or sampler.maintained < 2:
            await asyncio.sleep(0.01)
    finally:
        task.cancel()
    assert sampler.maintained >= 2


def test_pages_load_only_what_kbroker_serves():
    """Offline use: no CDN, no web fonts; every script and style a page names is under /static/ and exists."""
    html = page_html("group", 'a"<b>')
    assert 'data-name="a&quot;&lt;b&gt;"' in html
    for ref in re.findall(r'(?:src|href)="([^"]*)"', html):
        assert ref.startswith(("/", "data:")) and not ref.startswith("//"), ref
        if ref.startswith("/static/"):
            assert (STATIC / ref.removeprefix("/static/")).is_file(), ref
    for name in ("ui.js", "ui.css"):
        text = (STATIC / name).read_text()
        assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)", text), name
        assert "@import" not in text and "@font-face" not in text
    assert "MIT License" in (STATIC / "uPlot.LICENSE").read_text()
    assert (STATIC / "uPlot.iife.min.js").read_text().startswith("/*! https://github.com/leeoniya/uPlot (v1.6.32)")


async def test_a_history_that_cannot_keep_a_sample_is_reported_and_the_last_round_stays(tmp_path: Path):
    class FullDisk(CountingSampler):
        def ingest(self, snapshot):
            if self.rounds:
                raise sqlite3.OperationalError("database or disk is full")
            super().ingest(snapshot)

    ui = Ui(HandCollector([cluster_snapshot(T0), cluster_snapshot(T0 + 1000)]),
            lambda: sampler_at(tmp_path, FullDisk), interval=1.0)
    async with serving(ui) as client:
        await ui.open_history()
        assert await ui.sample_once() is not None
        assert await ui.sample_once() is None
        body = await (await client.get("/api/brokers")).json()
        assert body["seq"] == 1 and body["sample_error"] == "history: database or disk is full"


async def test_a_failing_round_is_logged_and_the_loop_goes_on(tmp_path: Path):
    class Broken(CountingSampler):
        def ingest(self, snapshot):
            super().ingest(snapshot)
            if self.rounds == 1:
                raise RuntimeError("a bug in one round")

    sampler = sampler_at(tmp_path, Broken)
    ui = Ui(HandCollector([cluster_snapshot()]), lambda: sampler, interval=0.02)
    task = asyncio.create_task(ui.sample_forever())
    try:
        while sampler.rounds < 3:  # the rounds after the failing one still run
            await asyncio.sleep(0.01)
    finally:
        task.cancel()
