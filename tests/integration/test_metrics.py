"""GET /metrics of real brokers, read with prometheus_client's own parser: the JMX exporter's names for
Kafka's metrics are there and move by what confluent-kafka clients did; group lag follows the committed
offsets; on a 3-broker cluster the controller, under-replicated, offline and ISR gauges follow a broker
killed and brought back."""
from __future__ import annotations

import os
import re
import time
import urllib.request
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from kazoo_bridge.local_server import ZooKeeperServer
from kbroker.log.batches import build_batch
from kbroker.metrics import BrokerMetrics, Family, render
from tests.cluster.conftest import Cluster, wait_until
from tests.raw_client import request
from tests.security.test_quota_throttle import set_quota

from .conftest import REPO, free_port
from .helpers import create_topic

NAMES = [
    "kafka_server_brokertopicmetrics_bytesin_total", "kafka_server_brokertopicmetrics_messagesin_total",
    "kafka_server_brokertopicmetrics_bytesout_total", "kafka_server_replicamanager_underreplicatedpartitions",
    "kafka_server_brokertopicmetrics_totalproducerequests_total",
    "kafka_server_brokertopicmetrics_failedproducerequests_total",
    "kafka_server_brokertopicmetrics_totalfetchrequests_total",
    "kafka_server_brokertopicmetrics_failedfetchrequests_total", "kafka_server_brokertopicmetrics_bytesrejected_total",
    "kafka_server_replicamanager_isrshrinks_total", "kafka_server_replicamanager_isrexpands_total",
    "kafka_controller_kafkacontroller_offlinepartitionscount", "kafka_controller_kafkacontroller_activecontrollercount",
    "kafka_network_requestmetrics_requests_total", "kafka_network_requestmetrics_totaltimems",
    "kafka_network_requestmetrics_requestqueuetimems", "kafka_network_requestmetrics_localtimems",
    "kafka_network_requestmetrics_remotetimems", "kafka_network_requestmetrics_responsesendtimems",
    "kafka_network_requestmetrics_throttletimems",
    "kafka_log_log_size", "kafka_log_log_logendoffset", "kafka_consumergroup_lag",
    "kafka_consumergroup_current_offset",
]


class Scrape:
    """One GET /metrics, parsed: ``value(name, **labels)`` sums the samples carrying those labels."""

    def __init__(self, port: int) -> None:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            assert r.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
            text = r.read().decode()
        self.types = {}
        self.samples = []
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                self.types[sample.name] = family.type
                self.samples.append(sample)

    def value(self, name: str, **labels: str) -> float:
        return sum(s.value for s in self.samples
                   if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))

    def has(self, name: str, **labels: str) -> bool:
        return any(s.name == name and all(s.labels.get(k) == v for k, v in labels.items()) for s in self.samples)

    def only(self, name: str, **labels: str) -> float:
        """The value of the one sample with exactly these labels (a topic total is the sample without one)."""
        found = [s.value for s in self.samples if s.name == name and s.labels == labels]
        assert len(found) == 1, (name, labels, found)
        return found[0]


def test_label_values_and_help_texts_survive_the_parser():
    """Group ids are any string: quotes, backslashes and newlines in a label value are escaped."""
    odd = 'a "quoted"\\ group\nwith a newline'
    family = Family("kafka_consumergroup_lag", "gauge", "help with a \\ and a\nnewline")
    family.add(7, (("consumergroup", odd), ("topic", "t"), ("partition", "0")))
    counter = Family("kafka_server_brokertopicmetrics_bytesin_total", "counter", "bytes")
    counter.add(12).add(5, (("topic", "t"),))
    parsed = {f.name: f for f in text_string_to_metric_families(render([family, counter]).decode())}
    (sample,) = parsed["kafka_consumergroup_lag"].samples
    assert sample.labels == {"consumergroup": odd, "topic": "t", "partition": "0"} and sample.value == 7
    assert parsed["kafka_consumergroup_lag"].documentation == "help with a \\ and a\nnewline"
    assert parsed["kafka_server_brokertopicmetrics_bytesin"].type == "counter"
    assert [(s.labels, s.value) for s in parsed["kafka_server_brokertopicmetrics_bytesin"].samples] == \
        [({}, 12), ({"topic": "t"}, 5)]


def test_metrics_move_with_produce_fetch_and_commits(broker_factory):
    port = free_port()
    broker = broker_factory({"status.listener": f"http://127.0.0.1:{port}"})
    create_topic(broker.bootstrap, "metered", 2)
    before = Scrape(port)
    for name in NAMES:
        assert before.has(name) or name.startswith(("kafka_consumergroup", "kafka_network", "kafka_server_broker")), \
            name
    assert before.types["kafka_server_brokertopicmetrics_bytesin_total"] == "counter"
    assert before.types["kafka_controller_kafkacontroller_activecontrollercount"] == "gauge"
    assert before.only("kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert before.only("kafka_log_log_logendoffset", topic="metered", partition="1") == 0
    assert before.only("kafka_server_app_info", id="0") == 1  # broker.id's default
    # the log dir's file system as statvfs says now; free space moves with whatever else writes on this disk
    volume = os.statvfs(broker.dirs)
    logdir = str(broker.dirs.resolve())
    assert before.only("kafka_log_logmanager_totalbytes", logdirectory=logdir) == volume.f_blocks * volume.f_frsize
    usable = before.only("kafka_log_logmanager_usablebytes", logdirectory=logdir)
    assert abs(usable - volume.f_bavail * volume.f_frsize) < 256 << 20

    # 20 Produce requests of one record each (flushed one by one), then 180 records in batches
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(20):
        producer.produce("metered", value=b"single %d" % i, partition=0)
        assert producer.flush(30) == 0
    after_singles = Scrape(port)
    produced = (after_singles.value("kafka_network_requestmetrics_requests_total", request="Produce")
                - before.value("kafka_network_requestmetrics_requests_total", request="Produce"))
    assert produced == 20
    # one partition each: one TotalProduceRequests mark each, as Kafka marks one per partition of a request
    assert after_singles.only("kafka_server_brokertopicmetrics_totalproducerequests_total", topic="metered") == 20
    for i in range(180):
        producer.produce("metered", value=b"v" * 100 + b"%d" % i, partition=1 if i < 100 else 0)
    assert producer.flush(30) == 0

    produced_scrape = Scrape(port)
    assert produced_scrape.only("kafka_server_brokertopicmetrics_messagesin_total", topic="metered") == 200
    bytes_in = produced_scrape.only("kafka_server_brokertopicmetrics_bytesin_total", topic="metered")
    # what was produced is what the log holds (a fresh topic): the record batches, byte for byte
    assert bytes_in == produced_scrape.value("kafka_log_log_size", topic="metered") > 200 * 100
    assert produced_scrape.only("kafka_server_brokertopicmetrics_bytesin_total") >= bytes_in  # every topic
    assert produced_scrape.only("kafka_log_log_logendoffset", topic="metered", partition="0") == 100
    assert produced_scrape.only("kafka_log_log_logendoffset", topic="metered", partition="1") == 100
    requests = produced_scrape.value("kafka_network_requestmetrics_requests_total", request="Produce")
    assert requests == produced_scrape.only("kafka_network_requestmetrics_totaltimems_count", request="Produce")
    assert produced_scrape.types["kafka_network_requestmetrics_totaltimems"] == "summary"
    p99 = produced_scrape.only("kafka_network_requestmetrics_totaltimems", request="Produce", quantile="0.99")
    p50 = produced_scrape.only("kafka_network_requestmetrics_totaltimems", request="Produce", quantile="0.50")
    assert 0 < p50 <= p99
    for phase in ("requestqueuetimems", "localtimems", "remotetimems", "throttletimems", "responsequeuetimems",
                  "responsesendtimems"):
        assert produced_scrape.only(f"kafka_network_requestmetrics_{phase}", request="Produce", quantile="0.99") >= 0
        assert produced_scrape.only(f"kafka_network_requestmetrics_{phase}_count", request="Produce") == requests
    # no quota: nothing throttled
    assert produced_scrape.value("kafka_network_requestmetrics_throttletimems") == 0

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "meters", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition("metered", 0, 0), TopicPartition("metered", 1, 0)])
        assert _consume_all(consumer, 200) == 200
        consumer.commit(offsets=[TopicPartition("metered", 0, 60), TopicPartition("metered", 1, 100)],
                        asynchronous=False)
    finally:
        consumer.close()

    consumed = Scrape(port)
    assert consumed.only("kafka_server_brokertopicmetrics_bytesout_total", topic="metered") == bytes_in
    assert consumed.value("kafka_network_requestmetrics_requests_total", request="FetchConsumer") >= 1
    assert consumed.value("kafka_network_requestmetrics_requests_total", request="Fetch") == \
        consumed.value("kafka_network_requestmetrics_requests_total", request="FetchConsumer")
    group = {"consumergroup": "meters", "topic": "metered"}
    assert consumed.only("kafka_consumergroup_current_offset", **group, partition="0") == 60
    assert consumed.only("kafka_consumergroup_current_offset", **group, partition="1") == 100
    assert consumed.only("kafka_consumergroup_lag", **group, partition="0") == 40
    assert consumed.only("kafka_consumergroup_lag", **group, partition="1") == 0
    assert consumed.only("kafka_consumergroup_lag_sum", **group) == 40
    assert consumed.only("kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert consumed.only("kafka_controller_kafkacontroller_offlinepartitionscount") == 0

    # the dashboard and the alert rules in monitoring/ ask for series the broker serves
    # (the README writes families as kafka_log_log_{size,logendoffset}: expanded first)
    braces = re.compile(r"(kafka_[a-z_]*)\{([a-z_,]+)\}([a-z_]*)")
    name = re.compile(r"\bkafka_(?:server|controller|network|log|consumergroup|topic)_[a-z_]*[a-z]")
    used = set()
    for path in ("monitoring/grafana-kbroker.json", "monitoring/kbroker-alerts.yml", "README.md"):
        text = (REPO / path).read_text()
        if path == "README.md":  # "Watching a cluster" names `kbroker ui`'s own /metrics (tests/ui/test_app.py)
            start = text.index("\n## Watching a cluster")
            end = text.find("\n## ", start + 1)
            text = text[:start] + (text[end:] if end >= 0 else "")
        text = braces.sub(lambda m: " ".join(m[1] + part + m[3] for part in m[2].split(",")), text)
        used |= set(name.findall(text))
    assert used and used <= {sample.name for sample in consumed.samples}


TOPIC_REQUESTS = ("totalproducerequests", "failedproducerequests", "bytesrejected", "totalfetchrequests",
                  "failedfetchrequests")
MESSAGE_TOO_LARGE, INVALID_RECORD, UNKNOWN_TOPIC_OR_PARTITION, OFFSET_OUT_OF_RANGE, INVALID_TOPIC = 10, 87, 3, 1, 17


def _produce(bootstrap: str, topic: str, index: int, records: bytes) -> int:
    """One Produce v8 (acks=1) of one partition; its error code."""
    body = {"transactional_id": None, "acks": 1, "timeout_ms": 10000,
            "topic_data": [{"name": topic, "partition_data": [{"index": index, "records": records}]}]}
    return request(bootstrap, 0, 8, body).responses[0].partition_responses[0].error_code


def _fetch(bootstrap: str, topic: str, index: int, offset: int) -> int:
    """One consumer's Fetch v4 (no session, no wait) of one partition; its error code."""
    body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
            "topics": [{"topic": topic, "partitions": [{"partition": index, "fetch_offset": offset,
                                                        "partition_max_bytes": 1 << 20}]}]}
    return request(bootstrap, 1, 4, body).responses[0].partitions[0].error_code


def test_per_topic_request_counters_count_as_kafka(broker_factory):
    """Kafka's BrokerTopicMetrics request meters: one mark per partition of a Produce or Fetch that reaches
    the log; "failed" only for unexpected errors (an invalid record, not a record too large, whose bytes
    go to BytesRejected, nor an out of range fetch); partitions the metadata does not know are not counted."""
    port = free_port()
    broker = broker_factory({"status.listener": f"http://127.0.0.1:{port}"})
    topic = "requested"
    create_topic(broker.bootstrap, topic, 1, {"cleanup.policy": "compact", "max.message.bytes": "2000"})
    before = Scrape(port)
    now = int(time.time() * 1000)
    for i in range(5):
        assert _produce(broker.bootstrap, topic, 0, bytes(build_batch([(b"k%d" % i, b"v", now)]))) == 0
    big = bytes(build_batch([(b"big", b"x" * 5000, now)]))
    assert _produce(broker.bootstrap, topic, 0, big) == MESSAGE_TOO_LARGE
    keyless = bytes(build_batch([(None, b"v", now)]))  # a compacted topic refuses it: Kafka counts it failed
    assert _produce(broker.bootstrap, topic, 0, keyless) == INVALID_RECORD
    assert _produce(broker.bootstrap, topic, 7, keyless) == UNKNOWN_TOPIC_OR_PARTITION  # not in the metadata
    for _ in range(4):
        assert _fetch(broker.bootstrap, topic, 0, 0) == 0
    assert _fetch(broker.bootstrap, topic, 0, 1000) == OFFSET_OUT_OF_RANGE
    assert _fetch(broker.bootstrap, topic, 7, 0) == UNKNOWN_TOPIC_OR_PARTITION

    after = Scrape(port)
    names = {name: f"kafka_server_brokertopicmetrics_{name}_total" for name in TOPIC_REQUESTS}
    for name, full in names.items():
        assert after.types[full] == "counter"
        assert not before.has(full, topic=topic), name
    got = {name: after.value(full, topic=topic) for name, full in names.items()}  # none yet: 0
    assert got == {"totalproducerequests": 7, "failedproducerequests": 1, "bytesrejected": len(big),
                   "totalfetchrequests": 5, "failedfetchrequests": 0}
    for name, full in names.items():  # the sample without a topic: all topics
        assert after.only(full) - before.only(full) == got[name], name

    # an internal topic: refused (INVALID_TOPIC_EXCEPTION) after Kafka's mark, and no failure
    assert _produce(broker.bootstrap, "__transaction_state", 0, keyless) == INVALID_TOPIC
    internal = Scrape(port)
    assert internal.only(names["totalproducerequests"], topic="__transaction_state") == 1
    assert internal.value(names["failedproducerequests"], topic="__transaction_state") == 0


def test_throttle_time_is_what_a_quota_throttled_a_producer_and_a_consumer_for(broker_factory):
    """Kafka's ThrottleTimeMs: the throttle a client quota gave a request (the throttle_time_ms its client hears,
    the time its connection is then muted for), 0 for the requests no quota throttled. A quota of 1 KiB/s lets
    a new client have 10 s of it (10 KiB, quota.window.num - 1 windows) before the first throttle."""
    port = free_port()
    broker = broker_factory({"status.listener": f"http://127.0.0.1:{port}", "num.partitions": "1"})
    create_topic(broker.bootstrap, "throttled", 1)
    free = Producer({"bootstrap.servers": broker.bootstrap, "client.id": "free-producer"})
    for i in range(4):
        free.produce("throttled", value=b"free %d" % i)
        assert free.flush(30) == 0
    unthrottled = Scrape(port)
    assert unthrottled.only("kafka_network_requestmetrics_throttletimems_count", request="Produce") == 4
    assert unthrottled.value("kafka_network_requestmetrics_throttletimems") == 0

    set_quota(broker, "slow-producer", "producer_byte_rate", 1024)
    set_quota(broker, "slow-consumer", "consumer_byte_rate", 1024)
    heard: list[float] = []  # the throttle times the clients heard, in s
    slow = Producer({"bootstrap.servers": broker.bootstrap, "client.id": "slow-producer", "linger.ms": 0,
                     "throttle_cb": lambda event: heard.append(event.throttle_time)})
    for _ in range(10):  # 16 KiB at a time: the second is over the 10 KiB (the first, if the quota came late)
        slow.produce("throttled", value=b"p" * 16384)
        assert slow.flush(30) == 0
        slow.poll(0.2)  # the throttle callback
        if heard:
            break
    assert heard and max(heard) > 0, "the producer was never throttled"
    scrape = Scrape(port)
    produce = {q: scrape.only("kafka_network_requestmetrics_throttletimems", request="Produce", quantile=q)
               for q in ("0.50", "0.999")}
    # the unthrottled requests (the free producer's 4 and the slow one's first) are 0, the throttled one its throttle
    assert produce["0.50"] == 0
    assert produce["0.999"] == pytest.approx(max(heard) * 1000, abs=1)
    assert scrape.value("kafka_network_requestmetrics_throttletimems", request="FetchConsumer") == 0

    heard.clear()
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "client.id": "slow-consumer", "group.id": "slow",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100,
                         "throttle_cb": lambda event: heard.append(event.throttle_time)})
    try:
        consumer.assign([TopicPartition("throttled", 0, 0)])  # over 16 KiB to read: the first fetch is over
        wait_until(lambda: consumer.poll(0.2) is None and heard, 30, "the consumer throttled", interval=0)
    finally:
        consumer.close()
    fetched = Scrape(port)
    assert fetched.only("kafka_network_requestmetrics_throttletimems", request="FetchConsumer",
                        quantile="0.999") == pytest.approx(max(heard) * 1000, abs=1)
    assert fetched.only("kafka_network_requestmetrics_throttletimems", request="Fetch", quantile="0.999") == \
        fetched.only("kafka_network_requestmetrics_throttletimems", request="FetchConsumer", quantile="0.999")
    # the throttle is not the requests' own time: their answers left at once
    assert fetched.only("kafka_network_requestmetrics_totaltimems", request="Produce", quantile="0.999") < 1000


def test_failed_request_counters_leave_out_the_errors_kafka_expects():
    metrics = BrokerMetrics()
    for code in (3, 6, 2, 18, 56, 17, 87, 19, -1):  # ... NOT_ENOUGH_REPLICAS, UNKNOWN_SERVER_ERROR count as failed
        metrics.produce_refused("t", code, 100)
    metrics.produce_refused("t", MESSAGE_TOO_LARGE, 3000)
    assert (metrics.produce_requests, metrics.failed_produce_requests, metrics.bytes_rejected) == \
        ({"t": 10}, {"t": 3}, {"t": 3000})
    for code in (1, 3, 6, 9, 56, 74, 75, 2, -1):  # CORRUPT_MESSAGE and UNKNOWN_SERVER_ERROR count as failed
        metrics.fetch_failed("t", code)
    assert metrics.failed_fetch_requests == {"t": 2}


def _consume_all(consumer: Consumer, want: int) -> int:
    got = 0

    def more() -> bool:
        nonlocal got
        for message in consumer.consume(want - got, timeout=1):
            if message.error() is None:
                got += 1
        return got >= want
    wait_until(more, 60, f"{want} records consumed", interval=0)
    return got


def test_metrics_enabled_false_counts_nothing_but_serves_the_state(broker_factory):
    port = free_port()
    broker = broker_factory({"status.listener": f"http://127.0.0.1:{port}", "metrics.enabled": "false"})
    create_topic(broker.bootstrap, "unmetered", 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(10):
        producer.produce("unmetered", value=b"%d" % i)
    assert producer.flush(30) == 0
    scrape = Scrape(port)
    assert not scrape.has("kafka_server_brokertopicmetrics_bytesin_total")
    assert not scrape.has("kafka_network_requestmetrics_requests_total")
    assert scrape.only("kafka_log_log_logendoffset", topic="unmetered", partition="0") == 10


# -- a 3-broker cluster --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def watched_cluster(zookeeper_server: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    # a follower that stops fetching leaves the ISR after 2 s (the leader checks every second)
    cluster = Cluster(zookeeper_server, tmp_path_factory.mktemp("metrics-cluster"),
                      overrides={"replica.lag.time.max.ms": "2000", "controlled.shutdown.enable": "false"}
                      ).with_status_listeners()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def _total(cluster: Cluster, name: str, **labels: str) -> float:
    return sum(Scrape(cluster.status_port(i)).value(name, **labels) for i, b in cluster.brokers.items() if b.running)


def test_controller_replica_and_isr_gauges_follow_a_broker_killed_and_restarted(watched_cluster):
    cluster = watched_cluster
    wait_until(lambda: _total(cluster, "kafka_controller_kafkacontroller_activecontrollercount") == 1, 30,
               "one active controller")
    controller = next(i for i in cluster.brokers
                      if Scrape(cluster.status_port(i)).value("kafka_controller_kafkacontroller_activecontrollercount"))
    victim = max(i for i in cluster.brokers if i != controller)
    leader = next(i for i in cluster.brokers if i not in (controller, victim))
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topics = [NewTopic("watched-rf3", 1, -1, replica_assignment=[[leader, victim, controller]]),
              NewTopic("watched-lonely", 1, -1, replica_assignment=[[victim]])]
    for future in admin.create_topics(topics, operation_timeout=30, request_timeout=30).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(10):
        producer.produce("watched-rf3", value=b"%d" % i)
    assert producer.flush(30) == 0
    wait_until(lambda: Scrape(cluster.status_port(victim)).value("kafka_log_log_logendoffset",
                                                                  topic="watched-rf3") == 10,
               30, "the victim replicated the records")
    leader_port = cluster.status_port(leader)
    start = Scrape(leader_port)
    assert start.only("kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert start.only("kafka_server_brokertopicmetrics_messagesin_total", topic="watched-rf3") == 10
    assert start.value("kafka_network_requestmetrics_requests_total", request="FetchFollower") > 0
    # the leader sent the followers the batches, each follower appended them: replication, not consumer bytes
    assert start.only("kafka_server_brokertopicmetrics_replicationbytesout_total") >= \
        2 * start.only("kafka_log_log_size", topic="watched-rf3", partition="0") > 0
    victim_view = Scrape(cluster.status_port(victim))
    assert victim_view.only("kafka_server_brokertopicmetrics_replicationbytesin_total") >= \
        victim_view.only("kafka_log_log_size", topic="watched-rf3", partition="0") > 0
    assert start.only("kafka_server_brokertopicmetrics_bytesout_total") == 0
    # Kafka counts followers' partition reads as fetch requests too; their appends are no produce requests
    assert start.only("kafka_server_brokertopicmetrics_totalfetchrequests_total", topic="watched-rf3") > 0
    assert 0 < start.only("kafka_server_brokertopicmetrics_totalproducerequests_total", topic="watched-rf3") <= 10
    assert victim_view.value("kafka_server_brokertopicmetrics_totalproducerequests_total", topic="watched-rf3") == 0
    assert start.only("kafka_network_requestmetrics_remotetimems_count", request="FetchFollower") > 0
    assert Scrape(cluster.status_port(controller)).only("kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    shrinks, expands = (start.only("kafka_server_replicamanager_isrshrinks_total"),
                        start.only("kafka_server_replicamanager_isrexpands_total"))

    cluster.brokers[victim].kill()
    try:
        wait_until(lambda: Scrape(leader_port).only("kafka_server_replicamanager_underreplicatedpartitions") == 1,
                   30, "the leader's partition under-replicated")
        assert Scrape(leader_port).only("kafka_server_replicamanager_isrshrinks_total") == shrinks + 1
        wait_until(lambda: Scrape(cluster.status_port(controller))
                   .only("kafka_controller_kafkacontroller_offlinepartitionscount") == 1,
                   30, "the lonely partition offline on the controller")
        assert _total(cluster, "kafka_controller_kafkacontroller_offlinepartitionscount") == 1
    finally:
        cluster.brokers[victim].start()
    wait_until(lambda: Scrape(leader_port).only("kafka_server_replicamanager_underreplicatedpartitions") == 0,
               60, "the partition fully replicated again")
    assert Scrape(leader_port).only("kafka_server_replicamanager_isrexpands_total") == expands + 1
    wait_until(lambda: _total(cluster, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0, 30,
               "no partition offline")
    assert _total(cluster, "kafka_controller_kafkacontroller_activecontrollercount") == 1
