"""ElectLeaders (43) on three broker processes over a real ZooKeeper, driven by confluent-kafka's and
kafka-python's ``elect_leaders`` and by ``kbroker leader-election`` (a subprocess: real output and
exit codes). One cluster for the module; the tests run in order and share its topics:

- ``pref``: four partitions preferring broker 1. Restarting broker 1 moves every leadership away;
  preferred elections move them back (confluent-kafka, kafka-python, the CLI, and a raw request
  with timeout_ms 0 that answers REQUEST_TIMED_OUT), a second election answers ELECTION_NOT_NEEDED.
- unknown partitions, NOT_CONTROLLER from a broker that is not the controller, the election type
  and the answer for null topic_partitions, straight on the wire.
- ``unc``: replicas [2, 3]. Broker 3 stops (the ISR shrinks to [2]), records go to broker 2 alone, then
  broker 2 stops (the partition goes offline, ISR [2]) and broker 3 comes back out of sync: with
  unclean.leader.election.enable=false it stays offline until an unclean election makes 3 its leader
  (losing those records, as unclean elections do); broker 2 then follows it.
"""
from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import ElectionType, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient

from kbroker.controller import election
from kbroker.protocol import API_KEYS
from kbroker.tools.client import Connection
from zk_compat import layout
from zk_compat.znodes import PartitionState

from .conftest import Cluster, wait_until
from .helpers import consume_all, partition_state, wait_until_served

REPO = Path(__file__).resolve().parents[2]
ELECT = API_KEYS["ElectLeaders"]
NOT_NEEDED, UNKNOWN, NOT_CONTROLLER, REQUEST_TIMED_OUT = 84, 3, 41, 7
PREFERRED_NOT_AVAILABLE, ELIGIBLE_NOT_AVAILABLE = 80, 83


@pytest.fixture(scope="module")
def cluster(zookeeper_server, tmp_path_factory) -> Iterator[Cluster]:
    c = Cluster(zookeeper_server, tmp_path_factory.mktemp("elect"), overrides={
        "auto.leader.rebalance.enable": "false",  # only the elections under test move leaders back
        "unclean.leader.election.enable": "false"})
    try:
        c.start()
        yield c
    finally:
        c.stop()


def cli(cluster: Cluster, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kbroker.cli", "leader-election", "--bootstrap-server",
                           cluster.bootstrap, *args], cwd=REPO, capture_output=True, text=True, timeout=90,
                          stdin=subprocess.DEVNULL)


def create(cluster: Cluster, topic: str, assignment: list[list[int]]) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=len(assignment), replication_factor=-1,
                                  replica_assignment=assignment)])[topic].result(30)
    wait_until(lambda: all((s := layout.get_partition_state(cluster.store, topic, p)) and len(s[0].isr) == len(r)
                           for p, r in enumerate(assignment)), 30, f"{topic}: every replica in sync")
    wait_until_served(cluster, topic, len(assignment), len(assignment[0]), timeout=30)


def leaders_seen(cluster: Cluster, topic: str) -> dict[int, int]:
    """partition -> leader, as a client's Metadata shows it."""
    md = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(topic, timeout=10).topics[topic]
    return {p: m.leader for p, m in md.partitions.items()}


def controller_id(cluster: Cluster) -> int:
    found = layout.get_controller_id(cluster.store)
    assert found is not None
    return found


def brokers_known_to(cluster: Cluster, broker_id: int) -> list[int]:
    admin = AdminClient({"bootstrap.servers": cluster.brokers[broker_id].bootstrap})
    return sorted(admin.list_topics(timeout=10).brokers)


def raw_elect(cluster: Cluster, broker_id: int, election_type: int, partitions: dict[str, list[int]] | None,
              version: int = 2, timeout_ms: int = 30000):
    broker = cluster.brokers[broker_id]
    conn = Connection(broker.host, broker.port, timeout=60)
    try:
        body = {"election_type": election_type, "timeout_ms": timeout_ms, "topic_partitions": None
                if partitions is None else [{"topic": t, "partition_id": ps} for t, ps in partitions.items()]}
        return conn.send(ELECT, body, version=version)
    finally:
        conn.close()


def produce(cluster: Cluster, topic: str, partition: int, values: list[bytes]) -> None:
    """acks=all, each one acknowledged (raises otherwise)."""
    failures: list = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                         "message.timeout.ms": 30000})
    for value in values:
        producer.produce(topic, value, partition=partition,
                         on_delivery=lambda err, msg: failures.append(err) if err else None)
    assert producer.flush(45) == 0 and not failures, failures


def codes(response) -> dict[tuple[str, int], int]:
    return {(r.topic, p.partition_id): p.error_code for r in response.replica_election_results
            for p in r.partition_result}


def test_preferred_election_moves_leadership_back(cluster: Cluster) -> None:
    create(cluster, "pref", [[1, 2, 3], [1, 3, 2], [1, 2, 3], [1, 3, 2]])
    assert set(leaders_seen(cluster, "pref").values()) == {1}
    cluster.brokers[1].stop()  # controlled shutdown hands every leadership over
    wait_until(lambda: all(partition_state(cluster, "pref", p).leader != 1 for p in range(4)), 30,
               "leaders moved off broker 1")
    cluster.brokers[1].start()
    wait_until(lambda: all(1 in partition_state(cluster, "pref", p).isr for p in range(4)), 60,
               "broker 1 back in every ISR")
    wait_until_served(cluster, "pref", 4, 3, timeout=30)
    assert 1 not in leaders_seen(cluster, "pref").values()
    produce(cluster, "pref", 0, [b"before-%d" % i for i in range(20)])

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    result = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("pref", 0)]).result(60)
    assert {(tp.topic, tp.partition): err for tp, err in result.items()} == {("pref", 0): None}
    assert partition_state(cluster, "pref", 0).leader == 1
    # answered once the controller's metadata showed it; every broker follows within moments
    wait_until(lambda: leaders_seen(cluster, "pref")[0] == 1, 15, "pref-0 led by broker 1 in Metadata")
    # the new leader serves: what was acknowledged before is there, and it takes more
    produce(cluster, "pref", 0, [b"after-%d" % i for i in range(20)])
    got = consume_all(cluster.bootstrap, "pref", 4, 40)
    assert got[0] == [(i, b"before-%d" % i) for i in range(20)] + [(20 + i, b"after-%d" % i) for i in range(20)]

    again = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("pref", 0)]).result(60)
    (err,) = again.values()
    assert isinstance(err, KafkaError) and err.code() == KafkaError.ELECTION_NOT_NEEDED

    kadmin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=60000)
    try:
        response = kadmin.elect_leaders(0, {"pref": [1]})
        assert response.error_code == 0 and codes(response) == {("pref", 1): 0}
        assert partition_state(cluster, "pref", 1).leader == 1
        response = kadmin.elect_leaders(0, {"pref": [1]})  # kafka-python ignores ELECTION_NOT_NEEDED
        assert codes(response) == {("pref", 1): NOT_NEEDED}
    finally:
        kadmin.close()

    out = cli(cluster, "--election-type", "preferred", "--topic", "pref", "--partition", "2")
    assert (out.returncode, out.stdout, out.stderr) == (
        0, "Successfully completed leader election (PREFERRED) for partitions pref-2\n", "")
    assert partition_state(cluster, "pref", 2).leader == 1

    # timeout_ms 0: the election is made, but not yet in the controller's metadata when the time is up
    assert codes(raw_elect(cluster, controller_id(cluster), 0, {"pref": [3]}, timeout_ms=0)) == {
        ("pref", 3): REQUEST_TIMED_OUT}
    wait_until(lambda: leaders_seen(cluster, "pref")[3] == 1, 15, "pref-3 led by broker 1 in Metadata")
    out = cli(cluster, "--election-type", "PREFERRED", "--all-topic-partitions")
    assert (out.returncode, out.stdout, out.stderr) == (0, "", "")  # nothing left to elect, nothing listed
    out = cli(cluster, "--election-type", "preferred", "--topic", "pref", "--partition", "2")
    assert (out.returncode, out.stdout) == (0, "Valid replica already elected for partitions pref-2\n")


def test_unknown_partitions_and_not_controller(cluster: Cluster, tmp_path: Path) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    result = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("pref", 9),
                                                          TopicPartition("no-such-topic", 0)]).result(60)
    assert {(tp.topic, tp.partition): err.code() for tp, err in result.items()} == {
        ("pref", 9): KafkaError.UNKNOWN_TOPIC_OR_PART, ("no-such-topic", 0): KafkaError.UNKNOWN_TOPIC_OR_PART}

    plan = tmp_path / "election.json"
    plan.write_text(json.dumps({"partitions": [{"topic": "pref", "partition": 0},
                                               {"topic": "pref", "partition": 7}]}))
    out = cli(cluster, "--election-type", "preferred", "--path-to-json-file", str(plan))
    assert out.returncode == 1
    assert out.stdout.splitlines() == [
        "Valid replica already elected for partitions pref-0",
        "Error completing leader election (PREFERRED) for partition: pref-7: "
        "org.apache.kafka.common.errors.UnknownTopicOrPartitionException: The partition does not exist."]
    assert out.stderr == "Error: 1 replica(s) could not be elected\n"

    controller = controller_id(cluster)
    other = next(b for b in cluster.brokers if b != controller)
    assert codes(raw_elect(cluster, other, 0, {"pref": [0, 1]})) == {("pref", 0): NOT_CONTROLLER,
                                                                     ("pref", 1): NOT_CONTROLLER}
    assert codes(raw_elect(cluster, controller, 1, {"gone": [0]})) == {("gone", 0): UNKNOWN}
    # v0 has no election type (preferred) and no top-level error code
    assert codes(raw_elect(cluster, controller, 0, {"pref": [0]}, version=0)) == {("pref", 0): NOT_NEEDED}
    # null topic_partitions: every partition, but only those that needed an election are listed
    everything = raw_elect(cluster, controller, 0, None)
    assert everything.error_code == 0 and codes(everything) == {}


def test_unclean_election_elects_a_live_out_of_sync_replica(cluster: Cluster) -> None:
    create(cluster, "unc", [[2, 3]])
    create(cluster, "lonely", [[2]])
    cluster.brokers[3].stop()
    wait_until(lambda: partition_state(cluster, "unc", 0).isr == [2], 30, "unc-0's ISR down to [2]")
    produce(cluster, "unc", 0, [b"only-on-2-%d" % i for i in range(5)])  # broker 3 never sees these
    cluster.brokers[2].stop()
    wait_until(lambda: partition_state(cluster, "unc", 0).leader == -1, 30, "unc-0 offline")
    cluster.brokers[3].start()
    controller = controller_id(cluster)
    # the controller sees broker 3 alive (its UpdateMetadata names it)
    wait_until(lambda: 3 in brokers_known_to(cluster, controller), 30, "broker 3 registered again")
    state = partition_state(cluster, "unc", 0)
    assert (state.leader, state.isr) == (-1, [2])  # unclean.leader.election.enable=false keeps it offline

    response = raw_elect(cluster, controller, 0, {"unc": [0]})  # the preferred replica, 2, is dead
    assert codes(response) == {("unc", 0): PREFERRED_NOT_AVAILABLE}
    response = raw_elect(cluster, controller, 1, {"lonely": [0], "pref": [0]})
    assert codes(response) == {("lonely", 0): ELIGIBLE_NOT_AVAILABLE, ("pref", 0): NOT_NEEDED}

    out = cli(cluster, "--election-type", "unclean", "--topic", "unc", "--partition", "0")
    assert (out.returncode, out.stdout, out.stderr) == (
        0, "Successfully completed leader election (UNCLEAN) for partitions unc-0\n", "")
    state = partition_state(cluster, "unc", 0)
    assert (state.leader, state.isr) == (3, [3])
    wait_until(lambda: leaders_seen(cluster, "unc")[0] == 3, 15, "unc-0 led by broker 3 in Metadata")
    produce(cluster, "unc", 0, [b"on-3"])  # the partition is writable again
    assert consume_all(cluster.bootstrap, "unc", 1, 1)[0] == [(0, b"on-3")]  # an unclean election loses what only 2 had

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})  # (kept: the future needs its handle)
    result = admin.elect_leaders(ElectionType.UNCLEAN, [TopicPartition("unc", 0)]).result(60)
    assert [err.code() for err in result.values()] == [KafkaError.ELECTION_NOT_NEEDED]  # 3 leads now
    cluster.brokers[2].start()
    wait_until(lambda: sorted(partition_state(cluster, "unc", 0).isr) == [2, 3], 60, "broker 2 follows broker 3")


# -- the choice rules alone (no brokers) ---------------------------------------------------------

def _state(leader: int, isr: list[int]) -> PartitionState:
    return PartitionState(leader=leader, leader_epoch=4, isr=isr, controller_epoch=1)


@pytest.mark.parametrize("replicas, leader, isr, live, expected", [
    ([1, 2, 3], 1, [1, 2, 3], {1, 2, 3}, NOT_NEEDED),
    ([1, 2, 3], 2, [1, 2, 3], {1, 2, 3}, (1, [1, 2, 3])),     # the ISR stays as it is
    ([1, 2, 3], 2, [2, 3], {1, 2, 3}, PREFERRED_NOT_AVAILABLE),  # alive but out of sync
    ([1, 2, 3], 2, [1, 2, 3], {2, 3}, PREFERRED_NOT_AVAILABLE),  # in the ISR but dead (or shutting down)
    ([1, 2, 3], -1, [1], {2, 3}, PREFERRED_NOT_AVAILABLE),
])
def test_preferred_choice(replicas, leader, isr, live, expected) -> None:
    got = election.choose(("t", 0), replicas, _state(leader, isr), election.PREFERRED, live)
    assert (got.code if isinstance(got, election.Refusal) else got) == expected


@pytest.mark.parametrize("replicas, leader, isr, live, expected", [
    ([1, 2, 3], 2, [2], {1, 2, 3}, NOT_NEEDED),                # a live leader: nothing to do
    ([1, 2, 3], -1, [3, 1], {1, 2, 3}, (1, [3, 1])),           # a live ISR member first, ISR kept
    ([1, 2, 3], 1, [1, 3], {2, 3}, (3, [3])),                  # dead leader: the live ISR member, ISR cut to live
    ([1, 2, 3], -1, [1], {3, 2}, (2, [2])),                    # nobody in sync alive: first live replica alone
    ([1, 2], -1, [1], {3}, ELIGIBLE_NOT_AVAILABLE),            # no replica alive
])
def test_unclean_choice(replicas, leader, isr, live, expected) -> None:
    got = election.choose(("t", 0), replicas, _state(leader, isr), election.UNCLEAN, live)
    assert (got.code if isinstance(got, election.Refusal) else got) == expected
