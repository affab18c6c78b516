"""Real clients over SASL on a real broker: confluent-kafka (librdkafka, SaslAuthenticate framing), kcat,
kafka-python and aiokafka each produce and consume with PLAIN and SCRAM-SHA-512 over SASL_PLAINTEXT
and SASL_SSL (the broker's certificate verified), SCRAM-SHA-256 for librdkafka and kafka-python, and
kafka-python configured as a 0.10.2 client speaks the legacy v0 token framing; each client fails with
SASL_AUTHENTICATION_FAILED (or its own equivalent) on a wrong password. SCRAM users are created with
AlterUserScramCredentials through confluent-kafka's admin client."""
from __future__ import annotations

import asyncio
import logging
import ssl
import subprocess
import uuid

import pytest

from tests.integration.conftest import free_port
from tests.security.pki import Pki
from tests.security.sasl_helpers import create_scram_users, credentials_for, run_broker, sasl_broker

N = 20


@pytest.fixture(scope="module")
def bp(pki: Pki, tmp_path_factory):
    proc = sasl_broker(tmp_path_factory.mktemp("sasl-clients"))
    proc.ssl_port = free_port()  # type: ignore[attr-defined]
    proc.overrides.update({
        "listeners": proc.overrides["listeners"] + f",SASL_SSL://127.0.0.1:{proc.ssl_port}",  # type: ignore[attr-defined]
        "listener.name.sasl_ssl.plain.sasl.jaas.config": proc.overrides[
            "listener.name.sasl_plaintext.plain.sasl.jaas.config"],
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.broker),
    })
    for started in run_broker(proc):
        create_scram_users(started)
        yield started


def endpoint(bp, protocol: str) -> str:
    return f"127.0.0.1:{bp.sasl_port if protocol == 'SASL_PLAINTEXT' else bp.ssl_port}"


def new_topic(bp) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic
    topic = f"sasl-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bp.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
    return topic


def values(topic: str) -> list[bytes]:
    return [f"{topic}-{i}".encode() for i in range(N)]


# -- the four clients ----------------------------------------------------------------------------

def rdkafka_roundtrip(bp, pki, protocol, mechanism, user, password, topic):
    from confluent_kafka import Consumer, Producer
    conf = {"bootstrap.servers": endpoint(bp, protocol), "security.protocol": protocol, "sasl.mechanisms": mechanism,
            "sasl.username": user, "sasl.password": password}
    if protocol == "SASL_SSL":
        conf["ssl.ca.location"] = str(pki.ca)
    producer = Producer(conf)
    for v in values(topic):
        producer.produce(topic, v)
    assert producer.flush(20) == 0
    consumer = Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got = []
    for _ in range(200):
        msg = consumer.poll(0.5)
        if msg is not None:
            assert msg.error() is None, msg.error()
            got.append(msg.value())
        if len(got) == N:
            break
    consumer.close()
    return got


def kcat_args(bp, pki, protocol, mechanism, user, password) -> list[str]:
    args = ["-b", endpoint(bp, protocol), "-X", f"security.protocol={protocol}", "-X", f"sasl.mechanisms={mechanism}",
            "-X", f"sasl.username={user}", "-X", f"sasl.password={password}"]
    return args + (["-X", f"ssl.ca.location={pki.ca}"] if protocol == "SASL_SSL" else [])


def kcat_roundtrip(bp, pki, protocol, mechanism, user, password, topic):
    args = kcat_args(bp, pki, protocol, mechanism, user, password)
    produced = subprocess.run(["kcat", *args, "-P", "-t", topic], input=b"\n".join(values(topic)) + b"\n",
                              capture_output=True, timeout=60)
    assert produced.returncode == 0, produced.stderr
    consumed = subprocess.run(["kcat", *args, "-C", "-t", topic, "-o", "beginning", "-c", str(N), "-e"],
                              capture_output=True, timeout=60)
    assert consumed.returncode == 0, consumed.stderr
    return consumed.stdout.splitlines()


def kafka_python_conf(bp, pki, protocol, mechanism, user, password) -> dict:
    conf = {"bootstrap_servers": endpoint(bp, protocol), "security_protocol": protocol, "sasl_mechanism": mechanism,
            "sasl_plain_username": user, "sasl_plain_password": password}
    if protocol == "SASL_SSL":
        conf["ssl_cafile"] = str(pki.ca)
    return conf


def kafka_python_roundtrip(bp, pki, protocol, mechanism, user, password, topic, **more):
    from kafka import KafkaConsumer, KafkaProducer
    conf = kafka_python_conf(bp, pki, protocol, mechanism, user, password) | more
    producer = KafkaProducer(**conf)
    for v in values(topic):
        producer.send(topic, v)
    producer.flush(20)
    producer.close()
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=10000,
                             group_id=None if more else f"g-{topic}", **conf)
    got = []
    for msg in consumer:
        got.append(msg.value)
        if len(got) == N:
            break
    consumer.close()
    return got


def aiokafka_conf(bp, pki, protocol, mechanism, user, password) -> dict:
    conf = {"bootstrap_servers": endpoint(bp, protocol), "security_protocol": protocol, "sasl_mechanism": mechanism,
            "sasl_plain_username": user, "sasl_plain_password": password}
    if protocol == "SASL_SSL":
        conf["ssl_context"] = ssl.create_default_context(cafile=str(pki.ca))
    return conf


def aiokafka_roundtrip(bp, pki, protocol, mechanism, user, password, topic):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    conf = aiokafka_conf(bp, pki, protocol, mechanism, user, password)

    async def run():
        producer = AIOKafkaProducer(**conf)
        await producer.start()
        try:
            for v in values(topic):
                await producer.send_and_wait(topic, v)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, group_id=f"g-{topic}", auto_offset_reset="earliest", **conf)
        await consumer.start()
        got = []
        try:
            async with asyncio.timeout(20):
                async for msg in consumer:
                    got.append(msg.value)
                    if len(got) == N:
                        break
        finally:
            await consumer.stop()
        return got
    return asyncio.run(run())


CLIENTS = {"confluent-kafka": rdkafka_roundtrip, "kcat": kcat_roundtrip, "kafka-python": kafka_python_roundtrip,
           "aiokafka": aiokafka_roundtrip}
CASES = ([(c, "SASL_PLAINTEXT", m) for c in CLIENTS for m in ("PLAIN", "SCRAM-SHA-512")]
         + [(c, "SASL_PLAINTEXT", "SCRAM-SHA-256") for c in ("confluent-kafka", "kafka-python")]
         + [(c, "SASL_SSL", m) for c in CLIENTS for m in ("SCRAM-SHA-512", "PLAIN")])


@pytest.mark.parametrize("client,protocol,mechanism", CASES)
def test_produce_and_consume(bp, pki, client, protocol, mechanism):
    user, password = credentials_for(mechanism)
    topic = new_topic(bp)
    got = CLIENTS[client](bp, pki, protocol, mechanism, user, password, topic)
    assert got == values(topic)


def test_kafka_python_as_a_0_10_2_client_uses_the_legacy_token_framing(bp, pki, monkeypatch):
    """SaslHandshake v0, then raw tokens (kafka-python's SaslBytesRequest) instead of SaslAuthenticate."""
    import kafka.net.connection as kconn
    sent = []
    original = kconn.SaslBytesRequest

    class Spy(original):  # type: ignore[misc, valid-type]
        def __init__(self, *args, **kwargs):
            sent.append(1)
            super().__init__(*args, **kwargs)
    monkeypatch.setattr(kconn, "SaslBytesRequest", Spy)
    for mechanism in ("PLAIN", "SCRAM-SHA-512"):
        user, password = credentials_for(mechanism)
        topic = new_topic(bp)
        before = len(sent)
        got = kafka_python_roundtrip(bp, pki, "SASL_PLAINTEXT", mechanism, user, password, topic,
                                     api_version=(0, 10, 2))
        assert got == values(topic)
        assert len(sent) > before, "kafka-python did not use the raw token framing"


# -- wrong passwords -----------------------------------------------------------------------------

@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_wrong_password_confluent_kafka(bp, mechanism):
    from confluent_kafka import KafkaError, Producer
    user, _ = credentials_for(mechanism)
    errors = []
    producer = Producer({"bootstrap.servers": endpoint(bp, "SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanisms": mechanism, "sasl.username": user, "sasl.password": "not-it",
                         "error_cb": errors.append})
    for _ in range(50):
        producer.poll(0.1)
        if errors:
            break
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION
    expected = ("Authentication failed: Invalid username or password" if mechanism == "PLAIN" else
                "Authentication failed during authentication due to invalid credentials with SASL mechanism "
                "SCRAM-SHA-512")
    assert expected in errors[0].str()


def test_wrong_password_kcat(bp, pki):
    args = kcat_args(bp, pki, "SASL_PLAINTEXT", "PLAIN", "alice", "not-it")
    listed = subprocess.run(["kcat", *args, "-L", "-m", "5"], capture_output=True, timeout=30)
    assert listed.returncode != 0
    assert b"SASL authentication error: Authentication failed: Invalid username or password" in listed.stderr


def test_wrong_password_kafka_python(bp, pki, caplog):
    from kafka import KafkaProducer
    from kafka.errors import KafkaTimeoutError
    caplog.set_level(logging.ERROR, logger="kafka")
    with pytest.raises(KafkaTimeoutError):   # kafka-python gives up bootstrapping; the cause is logged
        KafkaProducer(**kafka_python_conf(bp, pki, "SASL_PLAINTEXT", "PLAIN", "alice", "not-it"),
                      bootstrap_timeout_ms=3000, max_block_ms=4000, request_timeout_ms=3000)
    assert "SaslAuthenticationFailedError" in caplog.text
    assert "Authentication failed: Invalid username or password" in caplog.text


def test_wrong_password_aiokafka(bp, pki, caplog):
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaConnectionError
    caplog.set_level(logging.ERROR, logger="aiokafka")

    async def run():
        producer = AIOKafkaProducer(**aiokafka_conf(bp, pki, "SASL_PLAINTEXT", "SCRAM-SHA-512", "bob", "not-it"))
        try:
            await producer.start()
        finally:
            await producer.stop()
    with pytest.raises(KafkaConnectionError):   # aiokafka gives up bootstrapping; the cause is logged
        asyncio.run(run())
    assert ("[Error 58] SaslAuthenticationFailed: Authentication failed during authentication due to invalid "
            "credentials with SASL mechanism SCRAM-SHA-512") in caplog.text
