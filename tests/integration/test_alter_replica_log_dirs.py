"""AlterReplicaLogDirs (34) against real broker processes: a partition moves between the two log dirs of
one broker under a steady acks=all producer (confluent-kafka), through ``kbroker reassign`` with
``log_dirs`` in the reassignment JSON and directly; every acknowledged message is read back once, in
order, before and after a restart; the checkpoints follow the partition; and Kafka's error codes."""
from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from kbroker.log import checkpoint
from kbroker.protocol import decode_response, encode_request
from kbroker.tools.client import Connection
from tests.cluster.helpers import consume_all
from tests.integration.conftest import REPO, BrokerProcess
from tests.integration.helpers import create_topic

ALTER, DESCRIBE = 34, 35
NONE, REPLICA_NOT_AVAILABLE, CLUSTER_AUTHORIZATION_FAILED, KAFKA_STORAGE_ERROR, LOG_DIR_NOT_FOUND = 0, 9, 31, 56, 57


def _start(base: Path, overrides: dict[str, str]) -> Iterator[BrokerProcess]:
    bp = BrokerProcess(base, overrides)
    bp.start()
    try:
        yield bp
    finally:
        bp.kill()


@pytest.fixture(scope="module")
def jbod(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker with two log dirs; small segments, so a move copies several."""
    base = tmp_path_factory.mktemp("jbod")
    yield from _start(base, {"log.dirs": f"{base / 'a'},{base / 'b'}", "log.segment.bytes": "262144",
                             "log.segment.delete.delay.ms": "500", "num.partitions": "1"})


def dirs_of(bp: BrokerProcess) -> tuple[str, str]:
    a, b = bp.overrides["log.dirs"].split(",")
    return str(Path(a).resolve()), str(Path(b).resolve())


def alter(bp: BrokerProcess, moves: list[tuple[str, str, list[int]]], version: int = 1) -> dict:
    conn = Connection(bp.host, bp.port)
    try:
        response = conn.send(ALTER, {"dirs": [{"path": path, "topics": [{"name": topic, "partitions": parts}]}
                                              for path, topic, parts in moves]}, version=version)
    finally:
        conn.close()
    return {(r.topic_name, p.partition_index): p.error_code for r in response.results for p in r.partitions}


def placement(bp: BrokerProcess, topic: str) -> dict[tuple[int, bool], str]:
    """(partition, is future) -> log dir, from DescribeLogDirs."""
    conn = Connection(bp.host, bp.port)
    try:
        response = conn.send(DESCRIBE, {"topics": [{"topic": topic, "partitions": list(range(8))}]})
    finally:
        conn.close()
    return {(p.partition_index, p.is_future_key): r.log_dir
            for r in response.results for t in r.topics if t.name == topic for p in t.partitions}


def partition_count(bp: BrokerProcess, log_dir: str) -> int:
    conn = Connection(bp.host, bp.port)
    try:
        response = conn.send(DESCRIBE, {"topics": None})
    finally:
        conn.close()
    return sum(len(t.partitions) for r in response.results if r.log_dir == log_dir for t in r.topics)


def wait_moved(bp: BrokerProcess, topic: str, target: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while placement(bp, topic) != {(0, False): target}:
        assert time.monotonic() < deadline, f"{topic}-0 did not settle in {target}: {placement(bp, topic)}"
        time.sleep(0.1)


class SteadyProducer(threading.Thread):
    """acks=all, idempotent, a few hundred small messages a second until stopped; records what was acknowledged.

    At most ``MAX_UNACKED`` messages wait for their acknowledgement: while the broker is down (the crash tests
    kill it seven times) the backlog stops growing, so the final flush drains it in seconds even on a loaded
    machine. Messages the flush could not deliver are a failure: librdkafka would keep sending them after
    the thread ends, with no delivery report to count them, and ``read_back`` would find them unacknowledged."""

    MAX_UNACKED = 2000

    def __init__(self, bootstrap: str, topic: str, value_size: int = 300) -> None:
        super().__init__(daemon=True)
        # message.timeout.ms: the crash tests' producer lives through several kills and restarts
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 5, "message.timeout.ms": 300000, "batch.size": 16384,
                                  "reconnect.backoff.max.ms": 500})
        self.topic = topic
        self.value_size = value_size
        self.acked: list[bytes] = []
        self.failed: list[str] = []
        self.stop = threading.Event()

    def _delivered(self, err, msg) -> None:
        if err is not None:
            self.failed.append(str(err))
        else:
            self.acked.append(msg.value())

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            if n - len(self.acked) - len(self.failed) < self.MAX_UNACKED:
                for _ in range(20):
                    self.producer.produce(self.topic, value=b"m%08d-" % n + b"x" * self.value_size,
                                          on_delivery=self._delivered)
                    n += 1
            self.producer.poll(0.02)
        left = self.producer.flush(60)
        if left:
            self.failed.append(f"{left} messages still undelivered after a 60 s flush")

    def wait_acked(self, count: int, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while len(self.acked) < count:
            assert time.monotonic() < deadline and not self.failed, (len(self.acked), self.failed[:3])
            time.sleep(0.05)


def reassign_cli(bp: BrokerProcess, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kbroker.cli", "reassign", "--bootstrap-server", bp.bootstrap,
                           *argv], capture_output=True, text=True, cwd=REPO, timeout=120)


def read_back(bp: BrokerProcess, topic: str, acked: list[bytes]) -> None:
    got = consume_all(bp.bootstrap, topic, 1, len(acked))[0]
    assert [offset for offset, _ in got] == list(range(len(got)))
    values = [v for _, v in got]
    assert len(values) == len(acked) and values == acked  # every acknowledged message once, in order


def checkpointed(directory: str, name: str) -> set:
    return set(checkpoint.read_checkpoint(Path(directory) / name))


def test_move_under_steady_acks_all_producer_then_restart(jbod: BrokerProcess, tmp_path: Path):
    a, b = dirs_of(jbod)
    create_topic(jbod.bootstrap, "steady")
    source = placement(jbod, "steady")[(0, False)]
    target = b if source == a else a
    producer = SteadyProducer(jbod.bootstrap, "steady")
    producer.start()
    try:
        producer.wait_acked(3000)
        # through the tool, as kafka-reassign-partitions.sh: log_dirs beside the (unchanged) replicas
        plan = tmp_path / "plan.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": "steady", "partition": 0, "replicas": [0], "log_dirs": [target]}]}))
        done = reassign_cli(jbod, "--execute", "--reassignment-json-file", str(plan), "--timeout", "60000")
        assert done.returncode == 0, done.stderr
        assert "Successfully started log directory move for: steady-0-0" in done.stdout
        wait_moved(jbod, "steady", target)
        verify = reassign_cli(jbod, "--verify", "--reassignment-json-file", str(plan))
        assert "Reassignment of replica steady-0-0 completed successfully." in verify.stdout, verify.stdout
        assert verify.returncode == 0
        cancel = reassign_cli(jbod, "--cancel", "--reassignment-json-file", str(plan))
        assert cancel.stdout.splitlines() == ["None of the specified partition reassignments are active.",
                                              "None of the specified partition moves are active.",
                                              "Clearing broker-level throttles on broker 0",
                                              "Clearing topic-level throttles on topic steady"]
        acked_after_first = len(producer.acked)
        producer.wait_acked(acked_after_first + 1500)
        # and back, directly
        assert alter(jbod, [(source, "steady", [0])]) == {("steady", 0): NONE}
        wait_moved(jbod, "steady", source)
        producer.wait_acked(len(producer.acked) + 1500)
    finally:
        producer.stop.set()
        producer.join(90)
    assert not producer.failed, producer.failed[:3]
    read_back(jbod, "steady", producer.acked)
    # the checkpoints followed the partition; the replaced copy is gone once file.delete.delay.ms passed
    tp = ("steady", 0)
    for name in (checkpoint.RECOVERY_POINT, checkpoint.LOG_START_OFFSET, checkpoint.HIGH_WATERMARK):
        assert tp in checkpointed(source, name) and tp not in checkpointed(target, name), name
    deadline = time.monotonic() + 30
    while any(Path(target).glob("steady-0*")):
        assert time.monotonic() < deadline, list(Path(target).glob("steady-0*"))
        time.sleep(0.2)
    jbod.restart()
    assert placement(jbod, "steady") == {(0, False): source}
    read_back(jbod, "steady", producer.acked)


def test_error_codes_and_preferred_dir(jbod: BrokerProcess):
    a, b = dirs_of(jbod)
    create_topic(jbod.bootstrap, "errs")
    here = placement(jbod, "errs")[(0, False)]
    assert alter(jbod, [("/no/such/dir", "errs", [0]), ], version=0) == {("errs", 0): LOG_DIR_NOT_FOUND}
    assert alter(jbod, [("a", "errs", [0])]) == {("errs", 0): LOG_DIR_NOT_FOUND}  # relative: never a log dir
    # already there: success, and nothing moves
    assert alter(jbod, [(here, "errs", [0])]) == {("errs", 0): NONE}
    assert placement(jbod, "errs") == {(0, False): here}
    # not hosted (yet): REPLICA_NOT_AVAILABLE, and the log is created where asked later (Kafka 2.8). Both go to
    # the dir holding more partitions, where placing by load would never put the first (nor both).
    fuller = max((a, b), key=lambda d: partition_count(jbod, d))
    assert alter(jbod, [(fuller, "later-a", [0]), (fuller, "later-b", [0])]) == {
        ("later-a", 0): REPLICA_NOT_AVAILABLE, ("later-b", 0): REPLICA_NOT_AVAILABLE}
    create_topic(jbod.bootstrap, "later-a")
    create_topic(jbod.bootstrap, "later-b")
    assert placement(jbod, "later-a") == {(0, False): fuller}
    assert placement(jbod, "later-b") == {(0, False): fuller}
    # an unknown partition of a known topic: not hosted either
    assert alter(jbod, [(a, "errs", [5])]) == {("errs", 5): REPLICA_NOT_AVAILABLE}


def test_kafka_python_admin_moves_and_describes(jbod: BrokerProcess):
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient
    from kafka.errors import LogDirNotFoundError, NoError

    create_topic(jbod.bootstrap, "kp")
    producer = KafkaProducer(bootstrap_servers=jbod.bootstrap, acks="all")
    for i in range(500):
        producer.send("kp", b"kp%d" % i)
    producer.flush(30)
    producer.close()
    source = placement(jbod, "kp")[(0, False)]
    target = next(d for d in dirs_of(jbod) if d != source)
    admin = KafkaAdminClient(bootstrap_servers=jbod.bootstrap)
    try:
        answer = admin.alter_replica_log_dirs({("kp", 0, 0): target, ("kp", 1, 0): "/nowhere"})
        assert {tuple(r): e for r, e in answer.items()} == {("kp", 0, 0): NoError, ("kp", 1, 0): LogDirNotFoundError}
        wait_moved(jbod, "kp", target)
        dirs = admin.describe_log_dirs({"kp": [0]})
        found = [(d, t, p) for b in dirs for d in b["log_dirs"] for t in d["topics"] for p in t["partitions"]]
        assert [(d["log_dir"], p["partition_index"], p["is_future_key"]) for d, _, p in found] == [(target, 0, False)]
        assert found[0][2]["partition_size"] > 500 * 3
    finally:
        admin.close()
    assert [v for _, v in consume_all(jbod.bootstrap, "kp", 1, 500)[0]] == [b"kp%d" % i for i in range(500)]


def test_aborted_transactions_stay_hidden_after_a_move_and_a_restart(jbod: BrokerProcess):
    """The producer state follows the partition: its snapshot and aborted-transaction index entries."""
    from confluent_kafka import Consumer, TopicPartition

    create_topic(jbod.bootstrap, "txn-moved")
    producer = Producer({"bootstrap.servers": jbod.bootstrap, "transactional.id": "mover-txn"})
    producer.init_transactions(30)
    for outcome in ("commit", "abort", "commit"):
        producer.begin_transaction()
        for i in range(50):
            producer.produce("txn-moved", value=f"{outcome}-{i}".encode())
        producer.flush(30)
        producer.commit_transaction(30) if outcome == "commit" else producer.abort_transaction(30)
    source = placement(jbod, "txn-moved")[(0, False)]
    target = next(d for d in dirs_of(jbod) if d != source)
    assert alter(jbod, [(target, "txn-moved", [0])]) == {("txn-moved", 0): NONE}
    wait_moved(jbod, "txn-moved", target)
    jbod.restart()

    consumer = Consumer({"bootstrap.servers": jbod.bootstrap, "group.id": "txn-moved-check",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition("txn-moved", 0, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 100 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got.append(msg.value())
        quiet = time.monotonic() + 1
        while time.monotonic() < quiet:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                got.append(msg.value())
    finally:
        consumer.close()
    assert got == [f"commit-{i}".encode() for i in range(50)] * 2
    # a transaction after the move works on the moved log's producer state
    producer.begin_transaction()
    producer.produce("txn-moved", value=b"after")
    producer.commit_transaction(30)


def test_a_move_back_before_the_copy_ends_cancels_it(jbod: BrokerProcess):
    create_topic(jbod.bootstrap, "cancelled")
    producer = Producer({"bootstrap.servers": jbod.bootstrap, "linger.ms": 20, "batch.size": 200000})
    for _ in range(30 * 1024):  # 30 MB: the copy takes longer than two requests
        producer.produce("cancelled", value=b"c" * 1024)
        producer.poll(0)
    assert producer.flush(120) == 0
    source = placement(jbod, "cancelled")[(0, False)]
    target = next(d for d in dirs_of(jbod) if d != source)
    # both requests in one write: the broker takes the second before the copy can end, whatever the scheduler does
    there, back = ({"dirs": [{"path": d, "topics": [{"name": "cancelled", "partitions": [0]}]}]}
                   for d in (target, source))
    with socket.create_connection((jbod.host, jbod.port), timeout=30) as sock:
        sock.sendall(encode_request(ALTER, 1, 1, "t", there) + encode_request(ALTER, 1, 2, "t", back))
        stream = sock.makefile("rb")
        for correlation_id in (1, 2):
            frame = stream.read(struct.unpack(">i", stream.read(4))[0])
            got, answer = decode_response(ALTER, 1, frame)
            assert got == correlation_id and answer.results[0].partitions[0].error_code == NONE
    wait_moved(jbod, "cancelled", source)
    deadline = time.monotonic() + 30
    while any(Path(target).glob("cancelled-0*")):  # the copy is removed once the worker lets go of it
        assert time.monotonic() < deadline, list(Path(target).glob("cancelled-0*"))
        time.sleep(0.1)
    assert "cancelled-0: moved" not in jbod.log()


def test_offline_dir_is_a_storage_error(tmp_path: Path):
    (tmp_path / "file").write_text("not a directory")
    bad = tmp_path / "file" / "logs"  # cannot be created: offline from the start
    for bp in _start(tmp_path, {"log.dirs": f"{tmp_path / 'good'},{bad}"}):
        create_topic(bp.bootstrap, "t")
        good = str((tmp_path / "good").resolve())
        assert alter(bp, [(str(bad), "t", [0])]) == {("t", 0): KAFKA_STORAGE_ERROR}
        assert placement(bp, "t") == {(0, False): good}
        out = subprocess.run([sys.executable, "-m", "kbroker.cli", "log-dirs", "--describe", "--bootstrap-server",
                              bp.bootstrap, "--topic-list", "t"], capture_output=True, text=True, cwd=REPO,
                             timeout=60)
        lines = out.stdout.splitlines()
        assert lines[:2] == ["Querying brokers for log directories information",
                             "Received log directory information from brokers 0"]
        assert json.loads(lines[2]) == {"version": 1, "brokers": [{"broker": 0, "logDirs": [
            {"logDir": good, "error": None, "partitions": [
                {"partition": "t-0", "size": 0, "offsetLag": 0, "isFuture": False}]},
            {"logDir": str(bad), "error": "org.apache.kafka.common.errors.KafkaStorageException",
             "partitions": []}]}]}


def test_cluster_alter_is_required(tmp_path: Path):
    for bp in _start(tmp_path, {"log.dirs": f"{tmp_path / 'a'},{tmp_path / 'b'}",
                                "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                                "super.users": "User:admin", "allow.everyone.if.no.acl.found": "false"}):
        assert alter(bp, [(str((tmp_path / "b").resolve()), "t", [0, 1])]) == {
            ("t", 0): CLUSTER_AUTHORIZATION_FAILED, ("t", 1): CLUSTER_AUTHORIZATION_FAILED}


def test_new_replica_placed_and_follower_moved_in_a_zookeeper_cluster(zookeeper_server, tmp_path: Path):
    """kafka-reassign-partitions.sh's other use: a new replica on broker 2 lands in the log dir the JSON
    names (REPLICA_NOT_AVAILABLE until the controller created it); then broker 2's follower replica moves
    while its fetcher appends, and after the leader stops, broker 2 serves every acknowledged message."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.cluster.conftest import Cluster

    cluster = Cluster(zookeeper_server, tmp_path, size=2)
    for b in cluster.brokers.values():
        b.overrides["log.dirs"] = f"{b.dirs}-a,{b.dirs}-b"
    try:
        cluster.start()
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("rep", 1, -1, replica_assignment=[[1]])])["rep"].result(30)
        second = cluster.brokers[2]
        first_dir, second_dir = dirs_of(second)
        producer = SteadyProducer(cluster.bootstrap, "rep")
        producer.start()
        try:
            producer.wait_acked(2000)
            plan = tmp_path / "plan.json"
            plan.write_text(json.dumps({"version": 1, "partitions": [
                {"topic": "rep", "partition": 0, "replicas": [1, 2], "log_dirs": ["any", second_dir]}]}))
            done = reassign_cli(cluster.brokers[1], "--execute", "--reassignment-json-file", str(plan),
                                "--timeout", "60000")
            assert done.returncode == 0, done.stdout + done.stderr
            assert "Successfully started log directory move for: rep-0-2" in done.stdout
            deadline = time.monotonic() + 60
            while (verify := reassign_cli(cluster.brokers[1], "--verify", "--reassignment-json-file",
                                          str(plan))).returncode != 0:
                assert time.monotonic() < deadline, verify.stdout
                time.sleep(0.5)
            assert "Reassignment of replica rep-0-2 completed successfully." in verify.stdout
            assert placement(second, "rep") == {(0, False): second_dir}
            producer.wait_acked(len(producer.acked) + 1000)
            assert alter(second, [(first_dir, "rep", [0])]) == {("rep", 0): NONE}
            wait_moved(second, "rep", first_dir)
            producer.wait_acked(len(producer.acked) + 1000)
        finally:
            producer.stop.set()
            producer.join(90)
        assert not producer.failed, producer.failed[:3]
        cluster.brokers[1].stop_cleanly()  # controlled shutdown: broker 2, in the ISR, leads
        read_back(second, "rep", producer.acked)
    finally:
        cluster.stop()


def measure_copy_rate(mb: int, base: Path) -> dict:
    """A ``mb`` MB partition moved between the two log dirs of an idle broker: the copy rate, from the
    broker's own "moving" and "moved" log lines (DescribeLogDirs polled until it shows the end)."""
    import re
    from datetime import datetime

    bp = BrokerProcess(base, {"log.dirs": f"{base / 'a'},{base / 'b'}"})
    bp.start()
    try:
        create_topic(bp.bootstrap, "big")
        producer = Producer({"bootstrap.servers": bp.bootstrap, "acks": "1", "linger.ms": 20,
                             "batch.size": 1 << 20, "queue.buffering.max.kbytes": 1 << 20})
        value = b"v" * 1024
        for _ in range(mb * 1024):
            while True:
                try:
                    producer.produce("big", value=value)
                    break
                except BufferError:
                    producer.poll(0.05)
        assert producer.flush(300) == 0
        source = placement(bp, "big")[(0, False)]
        target = next(d for d in dirs_of(bp) if d != source)
        size = sum(p.stat().st_size for p in (Path(source) / "big-0").glob("*.log"))
        started = time.monotonic()
        assert alter(bp, [(target, "big", [0])]) == {("big", 0): NONE}
        # the event loop keeps serving during the copy: DescribeLogDirs answers, showing the future replica
        slowest, saw_future = 0.0, False
        while True:
            asked = time.monotonic()
            found = placement(bp, "big")
            slowest = max(slowest, time.monotonic() - asked)
            saw_future = saw_future or (0, True) in found
            if found == {(0, False): target}:
                break
            assert time.monotonic() - started < 600, found
            time.sleep(0.02)
        polled = time.monotonic() - started
        stamps = {}
        for line in bp.log().splitlines():
            found = re.match(r"\[(\S+ \S+)\] INFO big-0: (moving|moved) from", line)
            if found:
                stamps[found[2]] = datetime.strptime(found[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        seconds = stamps["moved"] - stamps["moving"]
        return {"bytes": size, "copy_seconds": round(seconds, 3), "copy_mb_per_s": round(size / 1e6 / seconds, 1),
                "seconds_until_describe_showed_it": round(polled, 3), "future_replica_seen": saw_future,
                "slowest_describe_log_dirs_ms": round(slowest * 1000, 1)}
    finally:
        bp.stop()
        bp.kill()


if __name__ == "__main__":  # python -m tests.integration.test_alter_replica_log_dirs [MB]
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        print(json.dumps(measure_copy_rate(int(sys.argv[1]) if len(sys.argv) > 1 else 200, Path(scratch))))
