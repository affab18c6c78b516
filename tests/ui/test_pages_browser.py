"""Every page of `kbroker ui` in a real headless browser (Debian's chromium, driven by Playwright) against a real
3-broker ZooKeeper-mode cluster with a ZooKeeper-stored group (OffsetCommit v0, with the ids and owners nodes a
ZooKeeper-era consumer writes) and a Kafka-stored group that lags; `kbroker ui` runs as a process.

Each page's tables say what Kafka's Admin API (confluent-kafka) answers, the group's lag chart is drawn, nothing is
logged to the console as an error, no request leaves 127.0.0.1, and a sampling round pushed by the server changes a
cell with no reload. Burrow's statuses, pushed to the open groups page: the ZooKeeper-era group turns STALL, STOP and
OK again as it commits without moving, goes silent and catches up; each log dir's free and total space on the
brokers page is statvfs's; a Kafka-stored group keeping up with a producer
turns STOP when its consumer stops and OK when it resumes. A broker killed at the end turns down on the open
overview, with its partitions under-replicated.
A screenshot of each page is written to the directory the test prints (pytest's tmp dir),
and also to ``$KBROKER_UI_SCREENSHOTS`` when set (the README's come from ``KBROKER_UI_SCREENSHOTS=docs/ui``).
"""
from __future__ import annotations

import os
import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec
from kazoo.client import KazooClient
from playwright.sync_api import ConsoleMessage, Page, Request, sync_playwright

from tests.cluster.conftest import Cluster, wait_until
from tests.cluster.helpers import wait_until_served
from tests.raw_client import request
from tests.ui.ui_process import UiProcess

TOPIC = "web-orders"
PARTITIONS = 3
ZK_GROUP = "web-zk-era-group"
KAFKA_GROUP = "web-lagging-group"
LIVE_GROUP = "web-live-group"
ZK_CONSUMER = f"{ZK_GROUP}_host-1-{uuid.uuid4().hex[:8]}"
OFFSET_COMMIT, OFFSET_FETCH = 8, 9
BYTE_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}  # as ui.js's bytes() writes
FREE_SLACK = 256 << 20  # bytes a disk's free space may move between two measurements on this shared machine
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def web_cluster(zookeeper_server, tmp_path_factory) -> Iterator[Cluster]:
    c = Cluster(zookeeper_server, tmp_path_factory.mktemp("ui-web-cluster")).with_status_listeners()
    try:
        c.start()
        yield c
    finally:
        c.stop()


def produce(bootstrap: str, n: int, partition: int | None = None) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(n):
        producer.produce(TOPIC, value=b"v%d" % i, partition=i % PARTITIONS if partition is None else partition)
    assert producer.flush(30) == 0


def commit_v0(bootstrap: str, offsets: dict[int, int]) -> None:
    """OffsetCommit v0, as pykafka's balanced consumer commits: the broker writes it to ZooKeeper."""
    answer = request(bootstrap.split(",")[0], OFFSET_COMMIT, 0, {"group_id": ZK_GROUP, "topics": [
        {"name": TOPIC, "partitions": [{"partition_index": p, "committed_offset": o, "committed_metadata": ""}
                                       for p, o in offsets.items()]}]})
    assert all(p.error_code == 0 for t in answer.topics for p in t.partitions)


def fetch_v0(bootstrap: str) -> dict[int, int]:
    """The ZooKeeper-stored group's offsets, as OffsetFetch v0 answers them (what the Admin API has for it)."""
    answer = request(bootstrap.split(",")[0], OFFSET_FETCH, 0, {"group_id": ZK_GROUP, "topics": [
        {"name": TOPIC, "partition_indexes": list(range(PARTITIONS))}]})
    return {p.partition_index: p.committed_offset for t in answer.topics for p in t.partitions}


def register_zk_consumer(zk: KazooClient) -> None:
    zk.create(f"/consumers/{ZK_GROUP}/ids/{ZK_CONSUMER}", b'{"version":1,"subscription":{"web-orders":1}}',
              ephemeral=True, makepath=True)
    for p in range(PARTITIONS):
        zk.create(f"/consumers/{ZK_GROUP}/owners/{TOPIC}/{p}", ZK_CONSUMER.encode(), ephemeral=True, makepath=True)


def consume_and_commit(bootstrap: str, count: int) -> None:
    """A Kafka-stored group's member reads ``count`` records, commits, and leaves: the group lags from then on."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": KAFKA_GROUP, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "client.id": "web-lagging-client"})
    try:
        consumer.subscribe([TOPIC])
        got = 0
        deadline = time.monotonic() + 60
        while got < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got += 1
        assert got == count
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()


class AdminView:
    """What Kafka's Admin API answers about the topic and the groups."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.admin = AdminClient({"bootstrap.servers": bootstrap})

    def metadata(self):
        return self.admin.list_topics(timeout=10)

    def log_ends(self) -> dict[int, int]:
        futures = self.admin.list_offsets({TopicPartition(TOPIC, p): OffsetSpec.latest() for p in range(PARTITIONS)},
                                          request_timeout=10)
        return {tp.partition: f.result().offset for tp, f in futures.items()}

    def kafka_committed(self) -> dict[int, int]:
        listed = self.admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(KAFKA_GROUP)])
        return {tp.partition: tp.offset for tp in listed[KAFKA_GROUP].result().topic_partitions if tp.topic == TOPIC}


def cells(page: Page, table: str, column: str) -> dict[str, str]:
    """A column of one of the page's tables, by row key (the rows' data-key)."""
    found: dict[str, str] = page.eval_on_selector_all(
        f"#{table} tbody tr[data-key]",
        f"rows => Object.fromEntries(rows.map(r => [r.dataset.key, r.querySelector('td[data-col={column}]')"
        f".textContent]))")
    return found


class Browser:
    """One page in chromium that records console errors and every request's host."""

    def __init__(self, page: Page, shots: Path) -> None:
        self.page = page
        self.shots = shots
        self.errors: list[str] = []
        self.hosts: set[str] = set()
        page.on("console", self._console)
        page.on("pageerror", lambda exc: self.errors.append(f"page error: {exc}"))
        page.on("request", self._request)

    def _console(self, message: ConsoleMessage) -> None:
        if message.type in ("error", "assert"):
            self.errors.append(f"console {message.type}: {message.text}")

    def _request(self, req: Request) -> None:
        self.hosts.add(urlsplit(req.url).hostname or req.url)

    def open(self, url: str) -> None:
        self.page.goto(url)
        self.page.wait_for_selector("body[data-seq]")  # the page has drawn a round's JSON

    def shoot(self, name: str) -> None:
        self.page.screenshot(path=str(self.shots / f"{name}.png"), full_page=True)


def test_every_page_in_a_browser(web_cluster: Cluster, tmp_path: Path) -> None:
    bootstrap = web_cluster.bootstrap
    admin = AdminView(bootstrap)
    admin.admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})])[TOPIC].result(30)
    wait_until_served(web_cluster, TOPIC, PARTITIONS, isr=3)
    produce(bootstrap, 60)
    zk = KazooClient(hosts=web_cluster.zookeeper_connect)
    zk.start(timeout=10)
    register_zk_consumer(zk)
    commit_v0(bootstrap, {0: 12, 1: 15, 2: 20})
    consume_and_commit(bootstrap, 30)
    produce(bootstrap, 30)  # the Kafka group has stopped: it lags by these and the 30 it did not read

    metrics = ",".join(f"http://127.0.0.1:{web_cluster.status_port(b)}/metrics" for b in sorted(web_cluster.brokers))
    ui = UiProcess(tmp_path / "ui.log", ["--bootstrap-server", bootstrap, "--zookeeper", web_cluster.zookeeper_connect,
                                         "--broker-metrics", metrics, "--interval", "1",
                                         "--history", str(tmp_path / "history.sqlite")]).start()
    shots = tmp_path / "screenshots"
    shots.mkdir()
    try:
        ends, committed, zk_committed = admin.log_ends(), admin.kafka_committed(), fetch_v0(bootstrap)
        assert sum(committed.values()) == 30 and sum(ends.values()) == 90 and zk_committed == {0: 12, 1: 15, 2: 20}
        # the member committed the partitions it read from (those it never fetched from have no offset)
        kafka_lag = sum(ends[p] - committed[p] for p in committed)
        assert kafka_lag >= 30

        seen: list[object] = []

        def ui_caught_up() -> bool:  # a round taken after the workload above, with both groups in it
            seen[:] = [ui.get_json("/api/groups")]
            groups = (seen[0] or {}).get("groups", [])
            lag = {g["name"]: g["total_lag"] for g in groups}
            return lag.get(KAFKA_GROUP) == kafka_lag and lag.get(ZK_GROUP) == 90 - 47
        try:
            wait_until(ui_caught_up, 60, "kbroker ui's rounds with both groups", interval=0.5)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; last answer {seen}\n{ui.log()}") from None

        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                browser = Browser(chromium.new_page(viewport={"width": 1280, "height": 900}), shots)
                check_live_update(browser, ui.url, admin)
                check_pages(browser, ui.url, admin, web_cluster)
                check_statuses(browser, ui.url, admin)
                check_consumer_stops_and_resumes(browser, ui.url, admin)
                check_broker_down(browser, ui.url, admin, web_cluster)
            finally:
                chromium.close()
        assert not browser.errors, browser.errors
        assert browser.hosts == {"127.0.0.1"}, browser.hosts
    finally:
        zk.stop()
        zk.close()
        rc = ui.stop()
    assert rc == 0, ui.log()
    print(f"screenshots of every page: {shots}")
    copy_to = os.environ.get("KBROKER_UI_SCREENSHOTS")
    if copy_to:
        Path(copy_to).mkdir(parents=True, exist_ok=True)
        for shot in shots.iterdir():
            shutil.copy(shot, Path(copy_to) / shot.name)
    assert sorted(p.name for p in shots.iterdir()) == sorted(
        f"{name}.png" for name in ("overview", "groups", "group", "topics", "topic", "brokers"))


# (the predicates of wait_for_function are functions: a bare expression would be eval'd in the page, which the
# pages' Content-Security-Policy refuses)
def check_pages(browser: Browser, url: str, admin: AdminView, cluster: Cluster) -> None:
    page = browser.page
    meta = admin.metadata()
    ends, committed, zk_committed = admin.log_ends(), admin.kafka_committed(), fetch_v0(admin.bootstrap)

    browser.open(url)
    assert page.text_content("#health dd[data-col=brokers_up]") == str(len(meta.brokers)) == "3"
    assert page.text_content("#health dd[data-col=brokers_down]") == "0"
    assert page.text_content("#health dd[data-col=controller]") == str(meta.controller_id)
    assert cells(page, "broker-table", "address") == {str(b.id): f"{b.host}:{b.port}" for b in meta.brokers.values()}
    page.wait_for_function("() => Object.keys(window.kbrokerCharts).length === 2")
    browser.shoot("overview")

    browser.open(url + "groups")
    storage = cells(page, "group-table", "storage")
    assert storage[f"kafka/{KAFKA_GROUP}"] == "kafka" and storage[f"zookeeper/{ZK_GROUP}"] == "zookeeper"
    lag = cells(page, "group-table", "total_lag")
    assert lag[f"kafka/{KAFKA_GROUP}"] == str(sum(ends[p] - committed[p] for p in committed))
    assert lag[f"zookeeper/{ZK_GROUP}"] == str(sum(ends[p] - zk_committed[p] for p in ends))
    assert page.locator("#group-table svg.spark").count() >= 2
    browser.shoot("groups")

    browser.open(url + f"groups/{KAFKA_GROUP}")
    assert cells(page, "partition-table", "committed") == {f"{TOPIC}/{p}": str(o) for p, o in committed.items()}
    assert cells(page, "partition-table", "log_end") == {f"{TOPIC}/{p}": str(ends[p]) for p in committed}
    assert cells(page, "partition-table", "lag") == {f"{TOPIC}/{p}": str(ends[p] - committed[p]) for p in committed}
    # the lag chart: uPlot drew its canvas from points of the history
    page.wait_for_function("() => window.kbrokerCharts.lag && window.kbrokerCharts.lag.data[0].length > 0")
    drawn = page.evaluate("""() => {
        const canvas = document.querySelector('#block-lag canvas');
        const pixels = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
        let painted = 0;
        for (let i = 3; i < pixels.length; i += 4) if (pixels[i] !== 0) painted++;
        return painted;
    }""")
    assert drawn > 0
    browser.shoot("group")
    page.click("button[data-span='24h']")
    page.wait_for_function("() => new URLSearchParams(location.search).get('span') === '24h' && "
                           "document.querySelector(\"button[data-span='24h']\").className === 'on'")
    assert page.evaluate("window.kbrokerCharts.lag.data[0].length") > 0
    page.check("#per-partition")  # one series per partition the group has committed
    page.wait_for_function("() => window.kbrokerCharts.lag.series.length > 2")
    assert sorted(page.evaluate("window.kbrokerCharts.lag.series.slice(1).map(s => s.label)")) == sorted(
        f"{TOPIC}-{p}" for p in committed)

    browser.open(url + f"groups/{ZK_GROUP}")
    assert cells(page, "partition-table", "committed") == {f"{TOPIC}/{p}": str(o) for p, o in zk_committed.items()}
    assert set(cells(page, "partition-table", "owner").values()) == {ZK_CONSUMER}

    browser.open(url + "topics")
    assert cells(page, "topic-table", "partitions")[TOPIC] == str(PARTITIONS)
    assert cells(page, "topic-table", "replication_factor")[TOPIC] == "3"
    browser.shoot("topics")

    browser.open(url + f"topics/{TOPIC}")
    theirs = meta.topics[TOPIC].partitions
    assert cells(page, "partition-table", "leader") == {str(p): str(theirs[p].leader) for p in theirs}
    assert cells(page, "partition-table", "replicas") == {str(p): ",".join(map(str, theirs[p].replicas))
                                                          for p in theirs}
    assert {k: sorted(v.split(",")) for k, v in cells(page, "partition-table", "isr").items()} == {
        str(p): sorted(map(str, theirs[p].isrs)) for p in theirs}
    assert cells(page, "partition-table", "log_end") == {str(p): str(o) for p, o in ends.items()}
    browser.shoot("topic")

    browser.open(url + "brokers")
    paths = cells(page, "dir-table", "path")
    assert sorted(paths.values()) == sorted(str(b.dirs) for b in cluster.brokers.values())
    assert set(cells(page, "dir-table", "state").values()) == {"online"}
    # free and total: statvfs of each dir as its broker's /metrics published it, shown to 0.1 of the unit; free space
    # moves with whatever else writes on this shared disk, so until a round agrees with statvfs taken now
    def disks_agree() -> bool:
        for column in ("free", "total"):
            for key, text in cells(page, "dir-table", column).items():
                volume = os.statvfs(paths[key])
                want = volume.f_bavail * volume.f_frsize if column == "free" else volume.f_blocks * volume.f_frsize
                number, unit = text.split()
                scale = BYTE_UNITS[unit]
                if abs(float(number) * scale - want) > 0.051 * scale + (FREE_SLACK if column == "free" else 0):
                    return False
        return True
    wait_until(disks_agree, 60, "the log dirs' free and total space as statvfs says", interval=1)
    browser.shoot("brokers")


def check_live_update(browser: Browser, url: str, admin: AdminView) -> None:
    """A round pushed by the server (SSE) changes the log end cell of the open page, which is not reloaded."""
    page = browser.page
    browser.open(url + f"groups/{KAFKA_GROUP}")
    page.evaluate("window.kbrokerNotReloaded = true")
    partition = min(admin.kafka_committed())
    cell = f"#partition-table tr[data-key='{TOPIC}/{partition}'] td[data-col=log_end]"
    before = int(page.text_content(cell) or "")
    produce(admin.bootstrap, 7, partition=partition)
    expected = admin.log_ends()[partition]
    assert expected == before + 7
    page.wait_for_function(f"() => document.querySelector(\"{cell}\").textContent === '{expected}'", timeout=30_000)
    assert page.evaluate("window.kbrokerNotReloaded") is True


def check_statuses(browser: Browser, url: str, admin: AdminView) -> None:
    """Burrow's rules on the open groups page as the ZooKeeper-era consumer misbehaves: committing the same lagging
    offsets again and again turns it STALL, no commit for longer than its window spans STOP, and committing the
    log end (it resumed and caught up) OK again."""
    page = browser.page
    browser.open(url + "groups")
    page.evaluate("window.kbrokerNotReloaded = true")
    status = f"#group-table tr[data-key='zookeeper/{ZK_GROUP}'] td[data-col=status]"

    def shows(value: str) -> None:
        page.wait_for_function(f"() => document.querySelector(\"{status}\").textContent === '{value}'",
                               timeout=90_000)

    lagging = fetch_v0(admin.bootstrap)
    assert all(lagging[p] < end for p, end in admin.log_ends().items())
    stop = threading.Event()

    def commit_without_moving() -> None:
        while not stop.is_set():
            commit_v0(admin.bootstrap, lagging)
            stop.wait(0.5)
    committer = threading.Thread(target=commit_without_moving, name="stalled-consumer")
    committer.start()
    try:
        shows("STALL")
    finally:
        stop.set()
        committer.join()
    shows("STOP")
    commit_v0(admin.bootstrap, admin.log_ends())
    shows("OK")
    assert cells(page, "group-table", "total_lag")[f"zookeeper/{ZK_GROUP}"] == "0"
    assert page.evaluate("window.kbrokerNotReloaded") is True


class Background:
    """A loop in a thread until stopped: a steady producer, a consumer polling with auto-commit."""

    def __init__(self, name: str, step) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(step,), name=name)
        self._thread.start()

    def _run(self, step) -> None:
        state = step(None)
        try:
            while not self._stop.is_set():
                step(state)
        finally:
            state.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive()


def producing(bootstrap: str) -> Background:
    class Steady:
        def __init__(self) -> None:
            self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})

        def close(self) -> None:
            self.producer.flush(10)

    def step(state: Steady | None) -> Steady:
        if state is None:
            return Steady()
        for i in range(5):
            state.producer.produce(TOPIC, value=b"steady", partition=i % PARTITIONS)
        state.producer.poll(0.25)
        return state
    return Background("steady-producer", step)


def consuming(bootstrap: str) -> Background:
    def step(consumer: Consumer | None) -> Consumer:
        if consumer is None:
            consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": LIVE_GROUP, "client.id": "web-live",
                                 "auto.offset.reset": "earliest", "enable.auto.commit": True,
                                 "auto.commit.interval.ms": 500})
            consumer.subscribe([TOPIC])
            return consumer
        consumer.poll(0.2)
        return consumer
    return Background("live-consumer", step)


def check_consumer_stops_and_resumes(browser: Browser, url: str, admin: AdminView) -> None:
    """A Kafka-stored group keeping up with a steady producer is OK; its consumer stops and it turns STOP; it
    resumes and turns OK again (each pushed to the open groups page)."""
    page = browser.page
    browser.open(url + "groups")
    page.evaluate("window.kbrokerNotReloaded = true")
    status = f"#group-table tr[data-key='kafka/{LIVE_GROUP}'] td[data-col=status]"

    def shows(value: str) -> None:
        page.wait_for_function(f"() => document.querySelector(\"{status}\")?.textContent === '{value}'",
                               timeout=90_000)

    producer = producing(admin.bootstrap)
    try:
        consumer = consuming(admin.bootstrap)
        try:
            shows("OK")
            # it keeps up on every partition (OK from a run of commits, not from a lone first one)
            partitions = f"#group-table tr[data-key='kafka/{LIVE_GROUP}'] td[data-col=partitions]"
            page.wait_for_function(f"() => document.querySelector(\"{partitions}\").textContent === '{PARTITIONS}'",
                                   timeout=60_000)
            shows("OK")
        finally:
            consumer.stop()
        shows("STOP")
        consumer = consuming(admin.bootstrap)
        try:
            shows("OK")
        finally:
            consumer.stop()
    finally:
        producer.stop()
    assert page.evaluate("window.kbrokerNotReloaded") is True


def check_broker_down(browser: Browser, url: str, admin: AdminView, cluster: Cluster) -> None:
    """A broker killed while the overview is open: it turns down and its partitions under-replicated, pushed by
    the server to the open page."""
    page = browser.page
    browser.open(url)
    page.evaluate("window.kbrokerNotReloaded = true")
    meta = admin.metadata()
    victim = max(b for b in cluster.brokers if b != meta.controller_id)
    cluster.brokers[victim].kill()
    page.wait_for_function("() => document.querySelector('#health dd[data-col=brokers_down]').textContent === '1'",
                           timeout=60_000)
    assert cells(page, "broker-table", "up")[str(victim)] == "down"
    # every partition of the topic had a replica on it (replication factor 3 of 3 brokers)
    page.wait_for_function(f"""() => [...document.querySelectorAll('#problem-table tr[data-key]')]
        .filter(r => r.dataset.key.startsWith('{TOPIC}/') && r.dataset.key.endsWith('/under-replicated'))
        .length === {PARTITIONS}""", timeout=60_000)
    assert int(page.text_content("#health dd[data-col=under_replicated]") or "") >= PARTITIONS
    assert page.evaluate("window.kbrokerNotReloaded") is True
