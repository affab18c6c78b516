"""``kbroker reassign`` against a real ZooKeeper and three broker processes: a move that changes
the leader and one that raises the replication factor, a move under an idempotent producer,
refused input leaving the cluster alone, and a slow move (its new replica SIGSTOPped) seen by
--list and --verify, then completed, and another cancelled.

The CLI runs as a subprocess, so exit codes and output are the real ones."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from zk_compat import layout
from zk_compat.znodes import BrokerIdZNode, ReassignPartitionsZNode

from .conftest import SESSION_TIMEOUT_MS, Cluster, wait_until
from .helpers import (
    consume_all as _consume_all,
    partition_state as _state,
    segment_bytes as _segment_bytes,
    wait_until_served,
)

LAG_MS = 2000
REPO = Path(__file__).resolve().parents[2]
BROKERS = {1, 2, 3}


@pytest.fixture(scope="module")
def cluster(zookeeper_server, tmp_path_factory) -> Iterator[Cluster]:
    c = Cluster(zookeeper_server, tmp_path_factory.mktemp("reassign"),
                overrides={"replica.lag.time.max.ms": str(LAG_MS), "replica.fetch.backoff.ms": "200"})
    try:
        c.start()
        yield c
    finally:
        c.stop()


def reassign(cluster: Cluster, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kbroker.cli", "reassign", "--bootstrap-server", cluster.bootstrap,
                           *args], cwd=REPO, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0 and not result.stderr, (result.returncode, result.stdout, result.stderr)
    return result.stdout


def plan(tmp_path: Path, name: str, moves: dict[tuple[str, int], list[int]]) -> str:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": r} for (t, p), r in moves.items()]}))
    return str(path)


def _create(cluster: Cluster, topic: str, partitions: int = 1, replication_factor: int = 2,
            replica_assignment: list[list[int]] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    new = (NewTopic(topic, num_partitions=len(replica_assignment), replication_factor=-1,
                    replica_assignment=replica_assignment)
           if replica_assignment else
           NewTopic(topic, num_partitions=partitions, replication_factor=replication_factor))
    admin.create_topics([new])[topic].result(15)
    count = len(replica_assignment) if replica_assignment else partitions
    wait_until(lambda: all((s := layout.get_partition_state(cluster.store, topic, p))
                           and len(s[0].isr) == len(_assignment(cluster, topic).partitions[p])
                           for p in range(count)), message=f"{topic}: every partition fully in sync")
    wait_until_served(cluster, topic, count, len(_assignment(cluster, topic).partitions[0]))


def _assignment(cluster: Cluster, topic: str):
    found = layout.get_topic_assignment(cluster.store, topic)
    assert found is not None
    return found


def _produce(cluster: Cluster, topic: str, count: int, partitions: int) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
    failures = []
    for i in range(count):
        producer.produce(topic, value=f"m{i}".encode(), partition=i % partitions,
                         on_delivery=lambda err, msg: err and failures.append(err))
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0
    assert failures == []


def _wait_verified(cluster: Cluster, path: str, timeout: float = 60) -> str:
    """Poll --verify until it exits 0 (every partition at its target)."""
    last: list[subprocess.CompletedProcess] = []

    def done():
        last[:] = [reassign(cluster, "--verify", "--reassignment-json-file", path)]
        return last[0].returncode == 0
    try:
        wait_until(done, timeout=timeout, interval=0.5, message="--verify to report every move complete")
    except AssertionError:
        raise AssertionError(f"{last[0].stdout}{last[0].stderr}\n{cluster.logs()}") from None
    return last[0].stdout


def _no_request_left(cluster: Cluster) -> None:
    wait_until(lambda: cluster.store.exists(ReassignPartitionsZNode.path()) is None,
               message="/admin/reassign_partitions removed")


def test_move_with_leader_change_and_a_larger_replication_factor(cluster, tmp_path):
    topic = "moved"
    _create(cluster, topic, partitions=2, replication_factor=2)
    _produce(cluster, topic, 2000, 2)
    before = _assignment(cluster, topic).partitions

    topics_file = tmp_path / "topics.json"
    topics_file.write_text(json.dumps({"topics": [{"topic": topic}], "version": 1}))
    out = ok(reassign(cluster, "--generate", "--topics-to-move-json-file", str(topics_file),
                      "--broker-list", "1,2,3"))
    lines = out.splitlines()
    assert lines[0] == "Current partition replica assignment"
    current = json.loads(lines[1])
    assert current == {"version": 1, "partitions": [
        {"topic": topic, "partition": p, "replicas": before[p], "log_dirs": ["any"] * 2} for p in range(2)]}
    assert lines[2] == "" and lines[3] == "Proposed partition reassignment configuration"
    proposed = json.loads(lines[4])
    assert proposed["version"] == 1
    assert sorted(e["partition"] for e in proposed["partitions"]) == [0, 1]
    for e in proposed["partitions"]:
        assert e["topic"] == topic and len(set(e["replicas"])) == 2 and set(e["replicas"]) <= BROKERS
        assert e["log_dirs"] == ["any", "any"]

    leader = _state(cluster, topic, 0).leader
    keep = next(r for r in before[0] if r != leader)
    added = (BROKERS - set(before[0])).pop()
    target = {(topic, 0): [added, keep], (topic, 1): before[1] + [(BROKERS - set(before[1])).pop()]}
    path = plan(tmp_path, "move", target)
    out = ok(reassign(cluster, "--execute", "--reassignment-json-file", path))
    assert out.splitlines() == [
        "Current partition replica assignment", "", json.dumps(current, separators=(",", ":")), "",
        "Save this to use as the --reassignment-json-file option during rollback",
        f"Successfully started partition reassignments for {topic}-0,{topic}-1"]

    out = _wait_verified(cluster, path)
    assert out.splitlines() == ["Status of partition reassignment:",
                                f"Reassignment of partition {topic}-0 is complete.",
                                f"Reassignment of partition {topic}-1 is complete.",
                                "",  # the log-dir moves' lines (none), as Kafka prints them
                                "Clearing broker-level throttles on brokers 1,2,3",
                                f"Clearing topic-level throttles on topic {topic}"]
    after = _assignment(cluster, topic)
    assert after.partitions == {0: target[(topic, 0)], 1: target[(topic, 1)]}
    assert not after.adding_replicas and not after.removing_replicas
    state0 = _state(cluster, topic, 0)
    assert state0.leader in target[(topic, 0)] and state0.leader != leader
    assert sorted(state0.isr) == sorted(target[(topic, 0)])
    assert sorted(_state(cluster, topic, 1).isr) == [1, 2, 3]
    _no_request_left(cluster)
    assert ok(reassign(cluster, "--list")).strip() == "No partition reassignments found."
    wait_until(lambda: not (cluster.brokers[leader].dirs / f"{topic}-0").exists(),
               message=f"broker {leader}'s copy of {topic}-0 deleted")
    for p in range(2):
        replicas = target[(topic, p)]
        first = cluster.brokers[replicas[0]]
        wait_until(lambda: all(_segment_bytes(cluster.brokers[r], topic, p) == _segment_bytes(first, topic, p)
                               for r in replicas), message=f"{topic}-{p} identical on {replicas}")
        assert len(_segment_bytes(first, topic, p)) > 1000 * 8
    got = _consume_all(cluster.bootstrap, topic, 2, 2000)
    for p in range(2):
        assert [v for _, v in got[p]] == [f"m{i}".encode() for i in range(p, 2000, 2)]
        assert [o for o, _ in got[p]] == list(range(1000))


class _SteadyProducer(threading.Thread):
    """An idempotent acks=all producer writing numbered messages to one partition until stopped."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 2, "message.timeout.ms": 120000, "retry.backoff.ms": 100,
                                  "topic.metadata.refresh.interval.ms": 1000})
        self.acked: list[int] = []
        self.failed: list[str] = []
        self.sent = 0
        self._halt = threading.Event()

    def _delivered(self, err, msg) -> None:
        if err is not None:
            self.failed.append(str(err))
        else:
            self.acked.append(int(msg.value()))

    def run(self) -> None:
        while not self._halt.is_set():
            for _ in range(20):
                try:
                    self.producer.produce(self.topic, value=str(self.sent).encode(), partition=0,
                                          on_delivery=self._delivered)
                except BufferError:
                    break
                self.sent += 1
            self.producer.poll(0.01)

    def finish(self) -> None:
        self._halt.set()
        self.join(10)
        assert self.producer.flush(120) == 0, "messages still undelivered after 120 s"


def test_writes_during_a_move_are_each_read_once(cluster, tmp_path):
    topic = "busy"
    _create(cluster, topic, partitions=1, replication_factor=2)
    before = _assignment(cluster, topic).partitions[0]
    leader = _state(cluster, topic, 0).leader
    target = [next(r for r in before if r != leader), (BROKERS - set(before)).pop()]
    producer = _SteadyProducer(cluster.bootstrap, topic)
    producer.start()
    try:
        wait_until(lambda: len(producer.acked) > 500, message="acknowledged writes before the move")
        path = plan(tmp_path, "busy", {(topic, 0): target})
        ok(reassign(cluster, "--execute", "--reassignment-json-file", path))
        _wait_verified(cluster, path)
        moved = len(producer.acked)
        wait_until(lambda: len(producer.acked) > moved + 500, timeout=30,
                   message="writes acknowledged after the move")
    finally:
        producer.finish()
    assert producer.failed == []
    assert _assignment(cluster, topic).partitions[0] == target
    assert _state(cluster, topic, 0).leader != leader
    acked = sorted(producer.acked)
    got = _consume_all(cluster.bootstrap, topic, 1, len(acked), timeout=90)
    values = [int(v) for _, v in got[0]]
    offsets = [o for o, _ in got[0]]
    assert offsets == list(range(len(offsets))), "offsets repeat, skip or go back"
    assert len(values) == len(set(values)), "a message appears twice"
    assert values == acked, "every message was acknowledged (none failed), so exactly these, in order"


def test_invalid_input_is_refused_and_changes_nothing(cluster, tmp_path):
    topic = "stay"
    _create(cluster, topic, partitions=1, replication_factor=2)
    before = _assignment(cluster, topic)
    state = _state(cluster, topic, 0)
    bad_json = tmp_path / "bad.json"
    bad_json.write_text('{"version": 1, "partitions": [')
    cases = [
        (plan(tmp_path, "unknown-topic", {("nope", 0): [1, 2]}), "Topic 'nope' not found."),
        (plan(tmp_path, "unknown-partition", {(topic, 5): [1, 2]}),
         f"The proposed assignment contains non-existent partitions: {topic}-5"),
        (plan(tmp_path, "unknown-broker", {(topic, 0): [1, 9]}), "Unknown broker id 9"),
        (plan(tmp_path, "duplicate", {(topic, 0): [2, 2]}),
         f"Partition replica lists may not contain duplicate entries: {topic}-0 contains multiple entries for 2"),
        (str(bad_json), "not valid JSON"),
    ]
    for path, message in cases:
        result = reassign(cluster, "--execute", "--reassignment-json-file", path)
        assert result.returncode == 1, (path, result.stdout, result.stderr)
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: ") and message in lines[0], (message, result.stderr)
        assert "Successfully" not in result.stdout
    result = reassign(cluster, "--verify", "--reassignment-json-file", str(bad_json))
    assert result.returncode == 1 and result.stderr.startswith("Error: ")
    topics_file = tmp_path / "topics.json"
    topics_file.write_text(json.dumps({"topics": [{"topic": topic}]}))
    result = reassign(cluster, "--generate", "--topics-to-move-json-file", str(topics_file), "--broker-list", "1,7")
    assert result.returncode == 1 and result.stderr.strip() == "Error: Unknown broker id 7 in --broker-list"
    time.sleep(1)  # a request would have been acted upon by now
    assert cluster.store.exists(ReassignPartitionsZNode.path()) is None
    after = _assignment(cluster, topic)
    assert (after.partitions, after.adding_replicas, after.removing_replicas) == (
        before.partitions, before.adding_replicas, before.removing_replicas)
    assert _state(cluster, topic, 0) == state
    assert ok(reassign(cluster, "--list")).strip() == "No partition reassignments found."


def _stopped(cluster: Cluster, broker_id: int):
    class Stopped:
        def __enter__(self):
            os.kill(cluster.brokers[broker_id].proc.pid, signal.SIGSTOP)

        def __exit__(self, *exc):
            os.kill(cluster.brokers[broker_id].proc.pid, signal.SIGCONT)
    return Stopped()


def test_slow_move_is_listed_then_completes_and_another_is_cancelled(cluster, tmp_path):
    controller = layout.get_controller_id(cluster.store)
    other, slow = sorted(BROKERS - {controller})
    # the controller keeps working: the broker being added is never the controller
    _create(cluster, "slow", replica_assignment=[[controller, other]])
    _create(cluster, "undo", replica_assignment=[[controller, other]])
    _produce(cluster, "slow", 300, 1)
    _produce(cluster, "undo", 300, 1)

    grow = plan(tmp_path, "grow", {("slow", 0): [controller, other, slow]})
    with _stopped(cluster, slow):
        ok(reassign(cluster, "--execute", "--reassignment-json-file", grow))
        wait_until(lambda: _assignment(cluster, "slow").adding_replicas, message="the move under way")
        assert ok(reassign(cluster, "--list")).splitlines() == [
            "Current partition reassignments:",
            f"slow-0: replicas: {controller},{other},{slow}. adding: {slow}."]
        result = reassign(cluster, "--verify", "--reassignment-json-file", grow)
        assert result.returncode == 1 and not result.stderr
        assert result.stdout.splitlines() == ["Status of partition reassignment:",
                                              "Reassignment of partition slow-0 is still in progress.", ""]
        # another move while one is under way needs --additional, as in Kafka
        shrink = plan(tmp_path, "shrink", {("undo", 0): [controller, slow]})
        result = reassign(cluster, "--execute", "--reassignment-json-file", shrink)
        assert result.returncode == 1 and "Cannot execute because there is an existing partition assignment" \
            in result.stderr
        assert sorted(_state(cluster, "slow", 0).isr) == sorted([controller, other])
    _wait_verified(cluster, grow, timeout=SESSION_TIMEOUT_MS / 1000 + 40)
    assert _assignment(cluster, "slow").partitions[0] == [controller, other, slow]
    _no_request_left(cluster)
    wait_until(lambda: all(cluster.store.exists(BrokerIdZNode.path(i)) for i in BROKERS),
               timeout=SESSION_TIMEOUT_MS / 1000 + 20, message="every broker registered")

    with _stopped(cluster, slow):
        out = ok(reassign(cluster, "--execute", "--reassignment-json-file", shrink))
        assert out.splitlines()[-1] == "Successfully started partition reassignment for undo-0"
        wait_until(lambda: _assignment(cluster, "undo").adding_replicas, message="the move under way")
        assert ok(reassign(cluster, "--list")).splitlines() == [
            "Current partition reassignments:",
            f"undo-0: replicas: {controller},{slow},{other}. adding: {slow}. removing: {other}."]
        # --preserve-throttles: clearing them needs the stopped broker to answer (as Kafka's tool waits for it)
        assert ok(reassign(cluster, "--cancel", "--reassignment-json-file", shrink,
                           "--preserve-throttles")).splitlines() == [
            "Successfully cancelled partition reassignment for: undo-0",
            "None of the specified partition moves are active."]
        undone = _assignment(cluster, "undo")
        assert undone.partitions[0] == [controller, other]
        assert not undone.adding_replicas and not undone.removing_replicas
        _no_request_left(cluster)
        assert ok(reassign(cluster, "--list")).strip() == "No partition reassignments found."
        assert ok(reassign(cluster, "--cancel", "--reassignment-json-file", shrink,
                           "--preserve-throttles")).splitlines() == [
            "None of the specified partition reassignments are active.",
            "None of the specified partition moves are active."]
    time.sleep(2)  # the controller must not start the cancelled move again
    assert _assignment(cluster, "undo").partitions[0] == [controller, other]
    assert cluster.store.exists(ReassignPartitionsZNode.path()) is None
    result = reassign(cluster, "--verify", "--reassignment-json-file", shrink)
    assert result.returncode == 1 and result.stdout.splitlines()[1] == (
        f"There is no active reassignment of partition undo-0, but replica set is {controller},{other} "
        f"rather than {controller},{slow}.")
    wait_until(lambda: all(cluster.store.exists(BrokerIdZNode.path(i)) for i in BROKERS),
               timeout=SESSION_TIMEOUT_MS / 1000 + 20, message="every broker registered")
    wait_until(lambda: sorted(_state(cluster, "undo", 0).isr) == sorted([controller, other]), timeout=30,
               message="undo-0's ISR back to its original replicas")
    got = _consume_all(cluster.bootstrap, "undo", 1, 300)
    assert [v for _, v in got[0]] == [f"m{i}".encode() for i in range(300)]


def test_additional_move_retargets_a_move_under_way(cluster, tmp_path):
    controller = layout.get_controller_id(cluster.store)
    other, slow = sorted(BROKERS - {controller})
    wait_until(lambda: all(cluster.store.exists(BrokerIdZNode.path(i)) for i in BROKERS),
               timeout=SESSION_TIMEOUT_MS / 1000 + 20, message="every broker registered")
    _create(cluster, "retarget", replica_assignment=[[controller, other]])
    _produce(cluster, "retarget", 300, 1)
    first = plan(tmp_path, "first", {("retarget", 0): [controller, slow]})
    second = plan(tmp_path, "second", {("retarget", 0): [controller, other, slow]})
    with _stopped(cluster, slow):
        ok(reassign(cluster, "--execute", "--reassignment-json-file", first))
        wait_until(lambda: _assignment(cluster, "retarget").adding_replicas, message="the first move under way")
        ok(reassign(cluster, "--execute", "--additional", "--reassignment-json-file", second))
        wait_until(lambda: _assignment(cluster, "retarget").partitions[0] == [controller, other, slow]
                   and not _assignment(cluster, "retarget").removing_replicas, message="the move re-targeted")
        assert ok(reassign(cluster, "--list")).splitlines() == [
            "Current partition reassignments:",
            f"retarget-0: replicas: {controller},{other},{slow}. adding: {slow}."]
    _wait_verified(cluster, second, timeout=SESSION_TIMEOUT_MS / 1000 + 40)
    assert _assignment(cluster, "retarget").partitions[0] == [controller, other, slow]
    _no_request_left(cluster)
    got = _consume_all(cluster.bootstrap, "retarget", 1, 300)
    assert [v for _, v in got[0]] == [f"m{i}".encode() for i in range(300)]


def test_cancel_after_an_added_replica_joined_the_isr_leaves_only_replicas_in_it(cluster, tmp_path):
    """A move from [c] to [c, o, s] with s stopped: o catches up and joins the ISR, the move cannot
    finish; cancelling it returns the assignment to [c], and the controller takes o out of the ISR."""
    controller = layout.get_controller_id(cluster.store)
    other, slow = sorted(BROKERS - {controller})
    wait_until(lambda: all(cluster.store.exists(BrokerIdZNode.path(i)) for i in BROKERS),
               timeout=SESSION_TIMEOUT_MS / 1000 + 20, message="every broker registered")
    _create(cluster, "joined", replica_assignment=[[controller]])
    _produce(cluster, "joined", 100, 1)
    grow = plan(tmp_path, "grow3", {("joined", 0): [controller, other, slow]})
    with _stopped(cluster, slow):
        ok(reassign(cluster, "--execute", "--reassignment-json-file", grow))
        wait_until(lambda: other in _state(cluster, "joined", 0).isr, timeout=30, message=f"{other} in the ISR")
        ok(reassign(cluster, "--cancel", "--reassignment-json-file", grow, "--preserve-throttles"))
        wait_until(lambda: _state(cluster, "joined", 0).isr == [controller], timeout=10,
                   message="the ISR cut back to the replicas")
        assert _assignment(cluster, "joined").partitions[0] == [controller]
        assert _state(cluster, "joined", 0).leader == controller
    got = _consume_all(cluster.bootstrap, "joined", 1, 100)
    assert len(got[0]) == 100
