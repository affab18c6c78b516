"""Dynamic broker configs (KIP-226) on three brokers over a real ZooKeeper: a change made through the admin API is
written to /config/brokers/<id> or /config/brokers/<default> with a change notice, and each broker it concerns
applies it without a restart: log retention, connection limits, a listener's keystore, the log cleaner's
threads. Kafka's refusals and librdkafka's admin client's view are checked too.

Each broker has three listeners: PLAINTEXT (inter-broker, the admin tools), CLIENT (plain, for the connection
limit: the inter-broker listener is let in beyond max.connections, as Kafka's) and SSL (a PEM keystore per broker).
"""
from __future__ import annotations

import ipaddress
import json
import socket
import ssl
import struct
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from kazoo_bridge.local_server import ZooKeeperServer
from kbroker.protocol import decode_response, encode_request
from tests.cluster.conftest import Cluster, wait_until
from tests.cluster.helpers import wait_until_served
from tests.integration.conftest import REPO, free_port
from tests.security.pki import _cert, _key, _key_pem, _name, _pem

SAN = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]


class Keys:
    """A CA and PEM keystores it signs (key + certificate), as files."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.ca_key = _key()
        self.ca_name = _name(CN="dynamic configs test CA")
        self.ca = directory / "ca.pem"
        self.ca.write_bytes(_pem(_cert(self.ca_name, self.ca_key, self.ca_name, self.ca_key, ca=True)))

    def keystore(self, name: str, cn: str = "localhost") -> tuple[Path, bytes]:
        """A new key and certificate (subject CN=<cn>,O=kbroker; SANs localhost and 127.0.0.1): (file, DER)."""
        key = _key()
        cert = _cert(_name(CN=cn, O="kbroker"), key, self.ca_name, self.ca_key, san=SAN)
        path = self.dir / name
        path.write_bytes(_key_pem(key) + _pem(cert))
        return path, cert.public_bytes(Encoding.DER)


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> Keys:
    return Keys(tmp_path_factory.mktemp("keys"))


@pytest.fixture(scope="module")
def dyn_cluster(zookeeper_server: ZooKeeperServer, tmp_path_factory, keys: Keys) -> Iterator[Cluster]:
    c = Cluster(zookeeper_server, tmp_path_factory.mktemp("dyn"), overrides={"log.retention.check.interval.ms": "300"})
    c.client_ports, c.ssl_ports, c.status_ports, c.first_certs = {}, {}, {}, {}
    try:
        for broker_id, broker in c.brokers.items():
            keystore, c.first_certs[broker_id] = keys.keystore(f"broker-{broker_id}.pem")
            for attempt in range(3):  # ports picked just before the start; another process may take one first
                client, tls, status = free_port(), free_port(), free_port()
                c.client_ports[broker_id], c.ssl_ports[broker_id], c.status_ports[broker_id] = client, tls, status
                broker.overrides.update({
                    "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},CLIENT://127.0.0.1:{client},"
                                 f"SSL://127.0.0.1:{tls}",
                    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CLIENT:PLAINTEXT,SSL:SSL",
                    "inter.broker.listener.name": "PLAINTEXT",
                    "listener.name.ssl.ssl.keystore.type": "PEM",
                    "listener.name.ssl.ssl.keystore.location": str(keystore),
                    "status.listener": f"http://127.0.0.1:{status}",
                })
                try:
                    broker.start()
                    break
                except AssertionError as exc:
                    if "address already in use" not in str(exc) or attempt == 2:
                        raise
        c.wait_all_known()
        yield c
    finally:
        c.stop()


def configs(cluster: Cluster, *args: str) -> subprocess.CompletedProcess:
    """``kbroker configs --entity-type brokers ...`` through broker 1's PLAINTEXT listener."""
    return subprocess.run([sys.executable, "-m", "kbroker.cli", "configs", "--bootstrap-server",
                           cluster.brokers[1].bootstrap, "--entity-type", "brokers", *args],
                          capture_output=True, text=True, cwd=REPO, timeout=60)


def configs_ok(cluster: Cluster, *args: str) -> str:
    result = configs(cluster, *args)
    assert result.returncode == 0, (result.stdout, result.stderr)
    return result.stdout


def znode(cluster: Cluster, path: str) -> dict:
    data, _ = cluster.store.get(path)
    return json.loads(data)


def api_versions_frame() -> bytes:
    return encode_request(18, 0, 11, "dyn-test", {})


def answered(sock: socket.socket | ssl.SSLSocket, timeout: float) -> bool:
    """Send ApiVersions and wait ``timeout`` for its answer (False: none came)."""
    sock.settimeout(timeout)
    sock.sendall(api_versions_frame())
    try:
        head = sock.recv(4)
    except TimeoutError:
        return False
    if len(head) < 4:
        return False
    size = struct.unpack(">i", head)[0]
    body = b""
    while len(body) < size:
        body += sock.recv(size - len(body))
    correlation, response = decode_response(18, 0, body)
    return correlation == 11 and response.error_code == 0


def metric(cluster: Cluster, broker_id: int, name: str) -> float | None:
    url = f"http://127.0.0.1:{cluster.status_ports[broker_id]}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return None


def log_files(cluster: Cluster, broker_id: int, topic: str) -> list[int]:
    """Base offsets of the partition's segments on a broker's disk (deleted ones are renamed *.deleted)."""
    directory = cluster.brokers[broker_id].dirs / f"{topic}-0"
    return sorted(int(p.name.split(".")[0]) for p in directory.glob("*.log"))


def test_default_log_retention_deletes_old_segments_on_every_broker(dyn_cluster):
    cluster, topic = dyn_cluster, "dyn-retention"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    # small segments through a topic override; retention stays the broker default (7 days)
    admin.create_topics([NewTopic(topic, 1, 3, config={"segment.bytes": "2048"})])[topic].result(30)
    wait_until_served(cluster, topic, 1, 3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(60):
        producer.produce(topic, value=b"x" * 200, key=str(i).encode())
        producer.flush(10)
    for broker_id in cluster.brokers:
        wait_until(lambda: len(log_files(cluster, broker_id, topic)) >= 4, 30, f"segments on broker {broker_id}")
    time.sleep(1.5)  # retention rounds run every 300 ms: the week-long default deletes nothing
    assert all(log_files(cluster, b, topic)[0] == 0 for b in cluster.brokers)

    assert configs_ok(cluster, "--entity-default", "--alter", "--add-config", "log.retention.ms=1000") == \
        "Completed updating default config for brokers in the cluster.\n"
    assert znode(cluster, "/config/brokers/<default>") == {"version": 1, "config": {"log.retention.ms": "1000"}}
    notices = cluster.store.get_children("/config/changes")
    latest = max(notices, key=lambda n: int(n.rsplit("_", 1)[1]))
    assert znode(cluster, f"/config/changes/{latest}") == {"version": 2, "entity_path": "brokers/<default>"}
    try:
        for broker_id in cluster.brokers:  # every broker, each holding a replica: the old segments go
            wait_until(lambda: log_files(cluster, broker_id, topic)[0] > 0, 30,
                       f"old segments deleted on broker {broker_id}")
    finally:
        configs_ok(cluster, "--entity-default", "--alter", "--delete-config", "log.retention.ms")


def test_max_connections_on_one_broker(dyn_cluster):
    cluster = dyn_cluster
    assert configs_ok(cluster, "--entity-name", "2", "--alter", "--add-config", "max.connections=1") == \
        "Completed updating config for broker 2.\n"
    assert znode(cluster, "/config/brokers/2") == {"version": 1, "config": {"max.connections": "1"}}
    waiting: socket.socket | None = None
    held: list[socket.socket] = []  # client connections broker 2 accepted, kept open
    try:
        # once the limit applies, broker 2 holds at most one connection (inter-broker ones count too): the
        # client connections beyond it wait unaccepted
        deadline = time.monotonic() + 20
        while waiting is None:
            sock = socket.create_connection(("127.0.0.1", cluster.client_ports[2]), 5)
            if not answered(sock, 1.5):
                waiting = sock
            else:
                held.append(sock)
                assert time.monotonic() < deadline, f"broker 2 accepted {len(held)} client connections"
        # the others are not limited
        for broker_id in (1, 3):
            with socket.create_connection(("127.0.0.1", cluster.client_ports[broker_id]), 5) as sock:
                assert answered(sock, 10), f"broker {broker_id} did not answer"
        # the limit lifted: the waiting connection is let in and answered
        configs_ok(cluster, "--entity-name", "2", "--alter", "--delete-config", "max.connections")
        waiting.settimeout(20)
        head = waiting.recv(4)
        assert len(head) == 4 and struct.unpack(">i", head)[0] > 0
    finally:
        for sock in held + ([waiting] if waiting is not None else []):
            sock.close()


def _tls_connect(cluster: Cluster, keys: Keys, broker_id: int) -> ssl.SSLSocket:
    context = ssl.create_default_context(cafile=str(keys.ca))
    sock = socket.create_connection(("127.0.0.1", cluster.ssl_ports[broker_id]), 10)
    return context.wrap_socket(sock, server_hostname="localhost")


def test_listener_keystore_rotated_for_new_connections(dyn_cluster, keys):
    cluster = dyn_cluster
    old = _tls_connect(cluster, keys, 3)
    try:
        assert old.getpeercert(binary_form=True) == cluster.first_certs[3]
        rotated, der = keys.keystore("broker-3-rotated.pem")
        assert configs_ok(cluster, "--entity-name", "3", "--alter", "--add-config",
                          f"listener.name.ssl.ssl.keystore.location={rotated}") == \
            "Completed updating config for broker 3.\n"

        def new_cert() -> bool:
            with _tls_connect(cluster, keys, 3) as sock:
                return sock.getpeercert(binary_form=True) == der
        wait_until(new_cert, 20, "a new connection to broker 3 getting the new certificate")
        assert answered(old, 10), "the connection made before the rotation stopped working"
        with _tls_connect(cluster, keys, 1) as sock:  # the other brokers keep theirs
            assert sock.getpeercert(binary_form=True) == cluster.first_certs[1]

        # a keystore for another name is refused as Kafka's SslFactory refuses it, and nothing changes
        other, _ = keys.keystore("broker-3-other.pem", cn="somebody-else")
        result = configs(cluster, "--entity-name", "3", "--alter", "--add-config",
                         f"listener.name.ssl.ssl.keystore.location={other}")
        assert result.returncode == 1
        assert "Invalid config value for resource ConfigResource(type=BROKER, name='3'): Validation of dynamic " \
               "config update of SSLFactory failed: Keystore DistinguishedName does not match" in result.stderr
        assert "INVALID_REQUEST" in result.stderr
        assert znode(cluster, "/config/brokers/3")["config"] == {"listener.name.ssl.ssl.keystore.location":
                                                                 str(rotated)}
        with _tls_connect(cluster, keys, 3) as sock:
            assert sock.getpeercert(binary_form=True) == der

        # the file replaced in place and named again: read again, as Kafka's reloadUpdatedFilesWithoutConfigChange
        _, newest = keys.keystore("broker-3-rotated.pem")
        configs_ok(cluster, "--entity-name", "3", "--alter", "--add-config",
                   f"listener.name.ssl.ssl.keystore.location={rotated}")
        with _tls_connect(cluster, keys, 3) as sock:
            assert sock.getpeercert(binary_form=True) == newest
    finally:
        old.close()


def test_log_cleaner_threads(dyn_cluster):
    cluster = dyn_cluster
    assert all(metric(cluster, b, "kbroker_log_cleaner_threads") == 1 for b in cluster.brokers)
    configs_ok(cluster, "--entity-default", "--alter", "--add-config", "log.cleaner.threads=2")
    for broker_id in cluster.brokers:
        wait_until(lambda: metric(cluster, broker_id, "kbroker_log_cleaner_threads") == 2, 20,
                   f"two cleaner threads on broker {broker_id}")
    # LogCleaner.validateReconfiguration: at most double the current count
    result = configs(cluster, "--entity-default", "--alter", "--add-config", "log.cleaner.threads=5")
    assert result.returncode == 1
    assert "Log cleaner threads cannot be increased to more than double the current value 2" in result.stderr


def test_librdkafka_admin_client(dyn_cluster):
    """confluent-kafka's admin client (librdkafka) sends a per-broker IncrementalAlterConfigs to that broker: a key
    Kafka accepts and this broker does not use answers NO_ERROR and is stored; a non-dynamic key is refused with
    Kafka's code and message."""
    cluster = dyn_cluster
    admin = AdminClient({"bootstrap.servers": cluster.brokers[1].bootstrap})

    def alter(name: str, value: str) -> None:
        resource = ConfigResource("BROKER", "1", incremental_configs=[
            ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([resource])[resource].result(30)

    alter("sasl.kerberos.min.time.before.relogin", "58000")
    assert znode(cluster, "/config/brokers/1") == {
        "version": 1, "config": {"sasl.kerberos.min.time.before.relogin": "58000"}}
    with pytest.raises(KafkaException) as refused:
        alter("log.dirs", "/elsewhere")
    error = refused.value.args[0]
    assert error.name() == "INVALID_REQUEST"
    assert error.str() == ("Invalid config value for resource ConfigResource(type=BROKER, name='1'): Cannot update "
                           "these configs dynamically: Set(log.dirs)")
    assert znode(cluster, "/config/brokers/1")["config"] == {"sasl.kerberos.min.time.before.relogin": "58000"}


def _leader(cluster: Cluster, topic: str) -> int:
    md = AdminClient({"bootstrap.servers": cluster.brokers[1].bootstrap}).list_topics(topic, timeout=10)
    return md.topics[topic].partitions[0].leader


def test_default_unclean_leader_election_turned_on_elects_at_once(dyn_cluster):
    """Last here: it stops brokers 2 and 3. A partition whose only in-sync replica died stays offline while its
    live replica is out of sync; turning unclean.leader.election.enable on at the cluster default elects that
    replica at once, as Kafka's enableDefaultUncleanLeaderElection."""
    cluster, topic = dyn_cluster, "dyn-unclean"
    admin = AdminClient({"bootstrap.servers": cluster.brokers[1].bootstrap})
    admin.create_topics([NewTopic(topic, 1, -1, replica_assignment=[[2, 3]])])[topic].result(30)
    wait_until_served(cluster, topic, 1, 2)
    try:
        cluster.brokers[3].stop_cleanly()  # controlled shutdown: out of the ISR
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "1"})
        producer.produce(topic, b"only on broker 2")
        assert producer.flush(15) == 0
        cluster.brokers[2].kill()  # the ISR's last member
        cluster.brokers[3].start()
        wait_until(lambda: _leader(cluster, topic) == -1, 30, "the partition offline")
        time.sleep(2)
        assert _leader(cluster, topic) == -1  # broker 3 is alive but out of sync: no clean election
        configs_ok(cluster, "--entity-default", "--alter", "--add-config", "unclean.leader.election.enable=true")
        wait_until(lambda: _leader(cluster, topic) == 3, 30, "broker 3 elected uncleanly")
    finally:
        configs(cluster, "--entity-default", "--alter", "--delete-config", "unclean.leader.election.enable")
        for broker in cluster.brokers.values():
            if not broker.running:
                broker.start()
