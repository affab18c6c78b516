"""``kbroker serve`` with ``broker.processes=2`` over a real ZooKeeper (issue 24, item 1): two brokers under
consecutive ids with their own log dirs and cores, served to confluent-kafka, kafka-python and kcat through either
port; one SIGKILLed is started again and is back in every ISR; SIGTERM stops both with a controlled shutdown."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer, TopicPartition as KafkaTopicPartition

from bench.harness.broker_process import HOST, accepts, launch, neighbouring_free_ports
from kazoo_bridge.local_server import ZooKeeperServer
from kazoo_bridge.store import KazooStore, connect
from kbroker.host.plan import parse_cpulist
from tests.cluster.conftest import wait_until

SESSION_TIMEOUT_MS = 6000
TOPIC = "host-mode"
PARTITIONS = 4
STOP_TIMEOUT = 90.0

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


class Host:
    """A ``kbroker serve`` supervisor process and what the test reads of it."""

    def __init__(self, zookeeper: ZooKeeperServer, base: Path) -> None:
        self.port = neighbouring_free_ports(HOST, 2)
        self.status_port = neighbouring_free_ports(HOST, 2)
        self.zookeeper_connect = f"{zookeeper.hosts}/kbhost-{uuid.uuid4().hex[:12]}"
        self.dirs = [base / "disk0", base / "disk1"]
        self.log_path = base / "host.log"
        self.properties = base / "server.properties"
        self.properties.write_text("\n".join([
            "broker.processes=2",
            "broker.id=1",
            f"zookeeper.connect={self.zookeeper_connect}",
            f"zookeeper.session.timeout.ms={SESSION_TIMEOUT_MS}",
            f"listeners=PLAINTEXT://{HOST}:{self.port}",
            f"status.listener=http://{HOST}:{self.status_port}",
            f"log.dirs={','.join(map(str, self.dirs))}",
            "offsets.topic.replication.factor=2",
            "offsets.topic.num.partitions=4",
            "group.initial.rebalance.delay.ms=0",
            "",
        ]))
        self.proc = launch([sys.executable, "-m", "kbroker.cli", "serve", str(self.properties)], self.log_path,
                           env=dict(os.environ, PYTHONUNBUFFERED="1"))
        self.store: KazooStore | None = None

    def bootstrap(self, index: int) -> str:
        return f"{HOST}:{self.port + index}"

    def log(self) -> str:
        return self.log_path.read_bytes().decode(errors="replace")

    def children(self) -> dict[int, int]:
        """broker id -> pid of the supervisor's live children (read from /proc, not from the supervisor's log)."""
        try:
            pids = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
        except OSError:
            return {}
        out = {}
        for pid in map(int, pids):
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            name = Path(argv[-2].decode()).name if len(argv) > 1 else ""
            if name.startswith("broker-") and name.endswith(".properties"):
                out[int(name[len("broker-"):-len(".properties")])] = pid
        return out

    def zk(self) -> KazooStore:
        if self.store is None:
            self.store = connect(self.zookeeper_connect, SESSION_TIMEOUT_MS, 5000)
        return self.store

    def registered(self) -> list[int]:
        try:
            return sorted(int(i) for i in self.zk().get_children("/brokers/ids"))
        except Exception:
            return []

    def isrs(self, topic: str) -> dict[int, list[int]]:
        out = {}
        for p in self.zk().get_children(f"/brokers/topics/{topic}/partitions"):
            data, _ = self.zk().get(f"/brokers/topics/{topic}/partitions/{p}/state")
            out[int(p)] = sorted(json.loads(data or b"{}")["isr"])
        return out

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for pid in self.children().values():  # (none once the supervisor is gone: PR_SET_PDEATHSIG)
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def host(zookeeper_server: ZooKeeperServer, tmp_path: Path) -> Iterator[Host]:
    h = Host(zookeeper_server, tmp_path)
    try:
        yield h
    except BaseException:
        print(h.log()[-30000:])
        raise
    finally:
        h.close()


def serving(host: Host) -> bool:
    log = host.log()
    assert host.proc.poll() is None, f"kbroker serve exited with {host.proc.returncode}\n{log}"
    return all(f"[broker {i}] kbroker {i} serving on" in log for i in (1, 2)) and \
        accepts(HOST, host.port) and accepts(HOST, host.port + 1)


def leaders_everywhere(host: Host, topic: str) -> bool:
    for index in (0, 1):
        meta = AdminClient({"bootstrap.servers": host.bootstrap(index)}).list_topics(topic, timeout=5)
        t = meta.topics.get(topic)
        if t is None or t.error is not None or len(t.partitions) != PARTITIONS or \
                any(p.leader < 0 or len(p.isrs) != 2 for p in t.partitions.values()):
            return False
    return True


def produce_with_each_client(host: Host, index: int, tag: str) -> set[bytes]:
    """Through ``host``'s process ``index``: confluent-kafka, kafka-python and kcat each write ten values."""
    values = {f"{tag}-{client}-{index}-{n}".encode() for client in ("ck", "kp", "kcat") for n in range(10)}
    producer = Producer({"bootstrap.servers": host.bootstrap(index), "acks": "all", "enable.idempotence": True})
    for v in sorted(v for v in values if b"-ck-" in v):
        producer.produce(TOPIC, v, key=v)
    assert producer.flush(30) == 0
    kp = KafkaProducer(bootstrap_servers=host.bootstrap(index), acks="all")
    for v in sorted(v for v in values if b"-kp-" in v):
        kp.send(TOPIC, v, key=v).get(timeout=30)
    kp.close()
    lines = b"".join(v + b"\n" for v in sorted(v for v in values if b"-kcat-" in v))
    done = subprocess.run(["kcat", "-P", "-b", host.bootstrap(index), "-t", TOPIC, "-X", "acks=all"],
                          input=lines, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return values


def consume_with_each_client(host: Host, index: int, expected: set[bytes]) -> None:
    """Every value of the topic, read through process ``index`` by confluent-kafka (a group), kafka-python and
    kcat: each reads exactly ``expected``."""
    consumer = Consumer({"bootstrap.servers": host.bootstrap(index), "group.id": f"g-{uuid.uuid4().hex[:8]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": True})
    consumer.subscribe([TOPIC])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < len(expected) and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    consumer.close()
    assert sorted(got) == sorted(expected), "confluent-kafka"

    kc = KafkaConsumer(bootstrap_servers=host.bootstrap(index), enable_auto_commit=False)
    parts = [KafkaTopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    kc.assign(parts)
    kc.seek_to_beginning(*parts)
    got = []
    deadline = time.monotonic() + 60
    while len(got) < len(expected) and time.monotonic() < deadline:
        for records in kc.poll(timeout_ms=500).values():
            got.extend(r.value for r in records)
    kc.close()
    assert sorted(got) == sorted(expected), "kafka-python"

    done = subprocess.run(["kcat", "-C", "-b", host.bootstrap(index), "-t", TOPIC, "-o", "beginning", "-e", "-q"],
                          capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert sorted(done.stdout.split(b"\n")[:-1]) == sorted(expected), "kcat"


def test_two_brokers_served_supervised_and_stopped(host: Host) -> None:
    wait_until(lambda: serving(host), 60, "both brokers serving")

    # two brokers registered in ZooKeeper under consecutive ids
    assert wait_until(lambda: host.registered() == [1, 2], 30, "/brokers/ids = [1, 2]")
    children = host.children()
    assert sorted(children) == [1, 2]
    # each in a process group of its own: a terminal's Ctrl-C reaches the supervisor, which stops them in order
    assert all(os.getpgid(pid) == pid != os.getpgid(host.proc.pid) for pid in children.values())

    # disjoint cpu sets: every core of the supervisor's set is one child's (one each on a 2-core machine)
    sets = {}
    for broker_id, pid in children.items():
        status = Path(f"/proc/{pid}/status").read_text()
        line = next(x for x in status.splitlines() if x.startswith("Cpus_allowed_list:"))
        sets[broker_id] = set(parse_cpulist(line.split(":", 1)[1]))
    assert sets[1] and sets[2] and not sets[1] & sets[2]
    assert sets[1] | sets[2] == os.sched_getaffinity(host.proc.pid)

    # each process its own status listener (port + i)
    for index in (0, 1):
        with urllib.request.urlopen(f"http://{HOST}:{host.status_port + index}/metrics", timeout=10) as answer:
            assert answer.status == 200

    admin = AdminClient({"bootstrap.servers": host.bootstrap(0)})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 2)])[TOPIC].result(30)
    wait_until(lambda: leaders_everywhere(host, TOPIC), 30, "every partition led, ISR of 2, on both brokers")

    # disjoint log dirs: each broker reports its own (DescribeLogDirs through kbroker log-dirs)
    described = subprocess.run([sys.executable, "-m", "kbroker.cli", "log-dirs", "--bootstrap-server",
                                host.bootstrap(1), "--describe", "--broker-list", "1,2"],
                               capture_output=True, text=True, timeout=60)
    assert described.returncode == 0, described.stderr
    brokers = json.loads(described.stdout.splitlines()[-1])["brokers"]
    dirs = {b["broker"]: [d["logDir"] for d in b["logDirs"]] for b in brokers}
    assert dirs == {1: [str(host.dirs[0])], 2: [str(host.dirs[1])]}
    assert all(sorted(d["partition"] for d in b["logDirs"][0]["partitions"] if d["partition"].startswith(TOPIC))
               == [f"{TOPIC}-{p}" for p in range(PARTITIONS)] for b in brokers)

    # confluent-kafka, kafka-python and kcat through either port
    written = produce_with_each_client(host, 0, "a") | produce_with_each_client(host, 1, "a")
    consume_with_each_client(host, 0, written)
    consume_with_each_client(host, 1, written)

    # SIGKILL one broker process: the supervisor starts it again and it is back in every ISR
    killed = children[2]
    os.kill(killed, signal.SIGKILL)
    restarted = wait_until(lambda: host.children().get(2, killed) != killed and host.children()[2], 30,
                           "broker 2 started again")
    assert restarted != killed and host.children()[1] == children[1]
    assert "broker 2 died (killed by SIGKILL): starting it again" in host.log()
    wait_until(lambda: host.log().count("[broker 2] kbroker 2 serving on") == 2, 60, "broker 2 serving again")
    wait_until(lambda: host.registered() == [1, 2], 30, "broker 2 registered again")
    written |= produce_with_each_client(host, 0, "b")  # while broker 2 catches up
    wait_until(lambda: all(isr == [1, 2] for isr in host.isrs(TOPIC).values()) and
               all(isr == [1, 2] for isr in host.isrs("__consumer_offsets").values()), 60,
               "broker 2 back in every ISR")
    written |= produce_with_each_client(host, 1, "c")
    consume_with_each_client(host, 1, written)
    consume_with_each_client(host, 0, written)

    # SIGTERM: a controlled shutdown of each, the last first (its leaderships go to broker 1, still running), exit 0
    last = host.children()
    log_before = len(host.log_path.read_bytes())
    host.proc.send_signal(signal.SIGTERM)
    assert host.proc.wait(STOP_TIMEOUT) == 0
    tail = host.log_path.read_bytes()[log_before:].decode(errors="replace")
    for broker_id, pid in last.items():
        assert f"[broker {broker_id}] " in tail and "controlled shutdown" in "\n".join(
            line for line in tail.splitlines() if line.startswith(f"[broker {broker_id}] ")), tail
        assert not Path(f"/proc/{pid}").exists() or "State:\tZ" in Path(f"/proc/{pid}/status").read_text()
        assert f"broker {broker_id} exited (exit status 0)" in tail
    own_shutdown = next(i for i, line in enumerate(tail.splitlines())
                        if line.startswith("[broker 1] ") and "(kbroker.lifecycle.controlled_shutdown)" in line)
    assert tail.splitlines().index(next(line for line in tail.splitlines() if "broker 2 exited (" in line)) \
        < own_shutdown
