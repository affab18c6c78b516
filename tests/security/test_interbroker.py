"""Three brokers on a real ZooKeeper replicating over a SASL_SSL inter-broker listener (TLS with
the broker certificate verified, SCRAM-SHA-512 as the ``admin`` user whose credential is in
ZooKeeper), clients on a PLAINTEXT listener: acks=all writes survive the leader's SIGKILL."""
from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.security.credentials import set_scram_password
from tests.cluster.conftest import SESSION_TIMEOUT_MS, Cluster, wait_until
from tests.cluster.helpers import consume_all, partition_state
from tests.cluster.test_replication import _SteadyProducer
from tests.integration.conftest import free_port
from zk_compat import layout

from .conftest import tls_settings
from .pki import Pki

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" '
        'password="admin-secret";')


@pytest.fixture(scope="module")
def secure_cluster(zookeeper_server, pki: Pki, tmp_path_factory) -> Iterator[Cluster]:
    c = Cluster(zookeeper_server, tmp_path_factory.mktemp("sasl-ssl-cluster"), overrides={
        "listener.security.protocol.map": "CLIENT:PLAINTEXT,BROKER:SASL_SSL",
        "inter.broker.listener.name": "BROKER",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.broker.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.broker.scram-sha-512.sasl.jaas.config": JAAS,
        "ssl.endpoint.identification.algorithm": "https",
        "replica.lag.time.max.ms": "2000", "replica.fetch.backoff.ms": "200",
        **tls_settings(pki)})
    for bp in c.brokers.values():
        bp.broker_port = free_port()  # type: ignore[attr-defined]
        bp.overrides["listeners"] = f"CLIENT://127.0.0.1:{bp.port},BROKER://127.0.0.1:{bp.broker_port}"  # type: ignore[attr-defined]
    # the inter-broker user exists before the brokers start, as with kafka-configs.sh --zookeeper
    layout.ensure_persistent_paths(c.store)
    set_scram_password(c.store, "admin", "SCRAM-SHA-512", "admin-secret", 4096)
    try:
        c.start()
        yield c
    finally:
        c.stop()


def test_brokers_register_both_listeners(secure_cluster: Cluster):
    for broker_id, bp in secure_cluster.brokers.items():
        reg = json.loads(secure_cluster.store.get(f"/brokers/ids/{broker_id}")[0])
        assert reg["endpoints"] == [f"CLIENT://127.0.0.1:{bp.port}",
                                    f"BROKER://127.0.0.1:{bp.broker_port}"]  # type: ignore[attr-defined]
        assert reg["listener_security_protocol_map"] == {"CLIENT": "PLAINTEXT", "BROKER": "SASL_SSL"}
        assert (reg["host"], reg["port"]) == ("127.0.0.1", bp.port)


def test_replication_over_sasl_ssl_survives_a_leader_kill(secure_cluster: Cluster):
    cluster = secure_cluster
    topic = "over-sasl-ssl"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=3,
                                  config={"min.insync.replicas": "2"})])[topic].result(15)
    # acks=all with min.insync.replicas=2 is acknowledged only once a follower fetched over the BROKER
    # listener (SASL_SSL); with a wrong inter-broker password nothing is ever acknowledged (checked by hand)
    wait_until(lambda: all((s := layout.get_partition_state(cluster.store, topic, p)) and len(s[0].isr) == 3
                           for p in range(2)), timeout=30, message="every partition with an ISR of 3")
    producer = _SteadyProducer(cluster.bootstrap, topic, 2)
    producer.start()
    try:
        wait_until(lambda: sum(map(len, producer.acked.values())) > 300, timeout=30, message="acknowledged writes")
        before = partition_state(cluster, topic, 0)
        victim = cluster.brokers[before.leader]
        acked_before = sum(map(len, producer.acked.values()))
        victim.kill()  # SIGKILL
        wait_until(lambda: partition_state(cluster, topic, 0).leader not in (-1, before.leader), interval=0.05,
                   timeout=SESSION_TIMEOUT_MS / 1000 + 10, message="a new leader for partition 0")
        wait_until(lambda: sum(map(len, producer.acked.values())) > acked_before + 300, timeout=40,
                   message="writes acknowledged by the new leader")
        victim.start()
        victim_id = before.leader
        wait_until(lambda: all(victim_id in partition_state(cluster, topic, p).isr for p in range(2)), timeout=40,
                   message=f"broker {victim_id} back in the ISR (fetching over SASL_SSL)")
    finally:
        producer.finish()
    assert producer.failed == []
    acked = {p: sorted(v) for p, v in producer.acked.items()}
    got = consume_all(cluster.bootstrap, topic, 2, sum(map(len, acked.values())), timeout=60)
    for p in range(2):
        values = [int(v) for _, v in got[p]]
        assert len(values) == len(set(values)), f"partition {p}: a message appears twice"
        assert set(acked[p]) <= set(values), f"partition {p}: {len(set(acked[p]) - set(values))} acknowledged lost"
    logs = cluster.logs()
    assert "Failed authentication" not in logs
    assert "TLS handshake with" not in logs  # no inter-broker handshake failed


def test_transaction_markers_cross_the_sasl_ssl_listener(secure_cluster: Cluster):
    """The coordinator writes markers to leaders on other brokers (WriteTxnMarkers over SASL_SSL)."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    cluster = secure_cluster
    topic = "txn-over-sasl-ssl"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=3)])[topic].result(30)
    wait_until(lambda: all((s := layout.get_partition_state(cluster.store, topic, p)) and s[0].leader >= 0
                           for p in range(3)), timeout=20, message="leaders for every partition")
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "sasl-ssl-tx"})
    producer.init_transactions(60)
    producer.begin_transaction()
    for p in range(3):
        producer.produce(topic, value=b"kept-%d" % p, partition=p)
    producer.commit_transaction(60)
    producer.begin_transaction()
    for p in range(3):
        producer.produce(topic, value=b"dropped-%d" % p, partition=p)
    producer.flush(30)
    producer.abort_transaction(60)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "sasl-ssl-tx-reader",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    got: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
        wait_until(lambda: got.extend(m.value() for m in consumer.consume(10, timeout=0.3) if not m.error())
                   or len(got) >= 3, timeout=30, message="the committed messages")
        got += [m.value() for m in consumer.consume(10, timeout=1) if not m.error()]
    finally:
        consumer.close()
    assert sorted(got) == [b"kept-0", b"kept-1", b"kept-2"]


def test_controlled_shutdown_over_sasl_ssl(secure_cluster: Cluster):
    """SIGTERM: the broker asks the controller (over SASL_SSL) to move its leaderships first."""
    cluster = secure_cluster
    controller = json.loads(cluster.store.get("/controller")[0])["brokerid"]
    victim_id = next(i for i in cluster.brokers if i != controller and cluster.brokers[i].running)
    victim = cluster.brokers[victim_id]
    victim.stop_cleanly()
    assert "controlled shutdown complete" in victim.log()
    victim.start()
    wait_until(lambda: cluster.store.exists(f"/brokers/ids/{victim_id}") is not None, timeout=20,
               message="the broker registered again")
