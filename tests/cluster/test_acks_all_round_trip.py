"""acks=all on three brokers at the speed of a round trip (issue 29), on a real ZooKeeper-mode cluster whose
followers' fetches wait up to replica.fetch.wait.max.ms = 30 s at their leader:

- nothing on the acks=all path waits for a timer: twenty acks=all writes in a row, with the followers' fetches
  parked at the leader before each, are each acknowledged in well under 5 s (a leader that waited for a parked
  follower fetch to time out would take 30 s: its append completes the parked fetches, as Kafka's
  ReplicaManager.appendRecords completes the delayed fetches it unblocks);
- the leader's /metrics says where the time goes, as Kafka's RequestMetrics do: an acks=all Produce's
  RemoteTimeMs is its wait for the ISR (above 0 at the median), an acks=1 Produce's is 0 (answered at once).

Each test's topics are led by a broker of their own (replica assignments), so each leader's Produce timings
hold that test's requests alone (the metrics keep each type's last 1024 requests)."""
from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.conftest import Cluster
from tests.cluster.helpers import wait_until_served
from tests.integration.test_metrics import Scrape

FETCH_WAIT_MS = 30000
WRITES = 20
ACKED_WITHIN_S = 5.0
# leaders: each test's topics on a broker of their own
ACKS_ALL_TIMER_LEADER, ACKS_ALL_METRICS_LEADER, ACKS_ONE_METRICS_LEADER = 3, 1, 2


@pytest.fixture(scope="module")
def cluster(zookeeper_server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    # Kafka wants replica.fetch.wait.max.ms <= replica.lag.time.max.ms: with the lag time above the wait, a
    # follower whose idle fetch waits the full 30 s stays in the ISR
    c = Cluster(zookeeper_server, tmp_path_factory.mktemp("acks-all-round-trip"), overrides={
        "replica.fetch.wait.max.ms": str(FETCH_WAIT_MS), "replica.lag.time.max.ms": "60000"}).with_status_listeners()
    try:
        c.start()
        yield c
    finally:
        c.stop()


def scrape(cluster: Cluster, broker_id: int) -> Scrape:
    return Scrape(cluster.status_port(broker_id))


def create_led_by(cluster: Cluster, topic: str, leader: int) -> None:
    """One partition, replication factor 3 with ``leader`` first, min.insync.replicas 2; served with a full ISR."""
    replicas = [leader, *(b for b in sorted(cluster.brokers) if b != leader)]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, replica_assignment=[replicas],
                                  config={"min.insync.replicas": "2"})])[topic].result(30)
    wait_until_served(cluster, topic, 1, 3, timeout=60)


def write_one_at_a_time(cluster: Cluster, topic: str, acks: str, count: int, pause_s: float) -> list[float]:
    """``count`` writes, each acknowledged within ACKED_WITHIN_S before the next goes after ``pause_s`` (the
    followers' fetches park at the leader meanwhile); each one's send-to-acknowledgement time in s."""
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": acks, "linger.ms": 0})
    took: list[float] = []
    for i in range(count):
        time.sleep(pause_s)
        acked: list[float] = []
        sent = time.monotonic()
        producer.produce(topic, value=b"write %d" % i,
                         on_delivery=lambda err, msg: acked.append(time.monotonic()) if err is None else None)
        assert producer.flush(ACKED_WITHIN_S) == 0, f"write {i} (acks={acks}) not acknowledged in {ACKED_WITHIN_S} s"
        assert acked, f"write {i} failed"
        took.append(acked[0] - sent)
    producer.flush(1)
    return took


def test_acks_all_waits_for_no_follower_fetch_timeout(cluster):
    topic = "round-trip-timer"
    create_led_by(cluster, topic, ACKS_ALL_TIMER_LEADER)
    before = scrape(cluster, ACKS_ALL_TIMER_LEADER)
    took = write_one_at_a_time(cluster, topic, "all", WRITES, pause_s=0.2)
    print(f"acks=all with replica.fetch.wait.max.ms={FETCH_WAIT_MS}: acknowledged in "
          f"{', '.join(f'{t * 1000:.1f}' for t in took)} ms")
    assert max(took) < ACKED_WITHIN_S, took
    after = scrape(cluster, ACKS_ALL_TIMER_LEADER)
    produced = (after.value("kafka_network_requestmetrics_requests_total", request="Produce")
                - before.value("kafka_network_requestmetrics_requests_total", request="Produce"))
    assert produced == WRITES
    # the followers did wait at the leader between the writes (their long polls are on): some parked fetch
    # lasted over the pause before a write completed it, none the 30 s
    parked = after.only("kafka_network_requestmetrics_remotetimems", request="FetchFollower", quantile="0.999")
    assert 150 < parked < FETCH_WAIT_MS, parked


def test_remote_time_is_the_isr_wait_of_acks_all_and_none_for_acks_1(cluster):
    waited, answered = "remote-time-acks-all", "remote-time-acks-1"
    create_led_by(cluster, waited, ACKS_ALL_METRICS_LEADER)
    create_led_by(cluster, answered, ACKS_ONE_METRICS_LEADER)
    write_one_at_a_time(cluster, waited, "all", WRITES, pause_s=0.05)
    write_one_at_a_time(cluster, answered, "1", WRITES, pause_s=0.05)

    def produce_phase(broker_id: int, phase: str, quantile: str) -> float:
        return scrape(cluster, broker_id).only(f"kafka_network_requestmetrics_{phase}", request="Produce",
                                               quantile=quantile)

    for leader in (ACKS_ALL_METRICS_LEADER, ACKS_ONE_METRICS_LEADER):  # the leaders' Produce timings: ours alone
        assert scrape(cluster, leader).only("kafka_network_requestmetrics_remotetimems_count",
                                            request="Produce") == WRITES
    acks_all = {q: produce_phase(ACKS_ALL_METRICS_LEADER, "remotetimems", q) for q in ("0.50", "0.99")}
    acks_one = {q: produce_phase(ACKS_ONE_METRICS_LEADER, "remotetimems", q) for q in ("0.50", "0.999")}
    print(f"Produce RemoteTimeMs: acks=all {acks_all}, acks=1 {acks_one}")
    assert 0 < acks_all["0.50"] <= acks_all["0.99"] < ACKED_WITHIN_S * 1000
    assert acks_one["0.999"] == 0  # answered when its handler returned: nothing parked
    # an acks=all answer's total time holds its remote time
    assert produce_phase(ACKS_ALL_METRICS_LEADER, "totaltimems", "0.50") >= acks_all["0.50"]
