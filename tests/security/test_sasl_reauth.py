"""KIP-368 re-authentication (``connections.max.reauth.ms``) on a real broker: the lifetime in
SaslAuthenticate v1+, a re-authentication on the same connection (same mechanism and principal, else
Kafka's 58 texts), a connection that does not re-authenticate closed on its first request after the
expiry, librdkafka (>= 2.2) and kafka-python 3 re-authenticating while they produce, and aiokafka (which
does not) reconnecting and still delivering everything."""
from __future__ import annotations

import asyncio
import logging
import time
import uuid

import pytest

from kbroker.security.sasl.scram import ScramClient
from tests.security.sasl_helpers import (
    PLAIN_USERS,
    SCRAM_USERS,
    Raw,
    create_scram_users,
    run_broker,
    sasl_bootstrap,
    sasl_broker,
)

LIFETIME_MS = 2000


@pytest.fixture(scope="module")
def bp(tmp_path_factory):
    proc = sasl_broker(tmp_path_factory.mktemp("sasl-reauth"), {"connections.max.reauth.ms": str(LIFETIME_MS)})
    for started in run_broker(proc):
        create_scram_users(started)
        yield started


def scram(r: Raw, mechanism: str, user: str, password: str):
    assert r.request(17, 1, {"mechanism": mechanism}).error_code == 0
    client = ScramClient(mechanism, user, password)
    first = r.request(36, 2, {"auth_bytes": client.first()})
    final = r.request(36, 2, {"auth_bytes": client.final(first.auth_bytes)})
    if final.error_code == 0:
        client.verify(final.auth_bytes)
    return final


def test_lifetime_sent_and_expired_connection_closed(bp):
    r = Raw(bp.sasl_port)
    resp = r.plain("alice", PLAIN_USERS["alice"], version=1)
    assert (resp.error_code, resp.session_lifetime_ms) == (0, LIFETIME_MS)
    assert r.request(3, 1, {"topics": None}).brokers
    time.sleep(LIFETIME_MS / 1000 + 0.3)
    r.send(3, 1, {"topics": None})
    assert r.closed_within(3) is not None
    assert "SASL session expired" in bp.log() or "did not re-authenticate" in bp.log()
    r0 = Raw(bp.sasl_port)   # a v0 SaslAuthenticate carries no lifetime, the session still expires
    assert r0.plain("alice", PLAIN_USERS["alice"], version=0).error_code == 0
    time.sleep(LIFETIME_MS / 1000 + 0.3)
    r0.send(3, 1, {"topics": None})
    assert r0.closed_within(3) is not None


def test_reauthentication_on_the_same_connection(bp):
    user, password = SCRAM_USERS["SCRAM-SHA-512"]
    r = Raw(bp.sasl_port)
    assert scram(r, "SCRAM-SHA-512", user, password).session_lifetime_ms == LIFETIME_MS
    time.sleep(1.2)
    again = scram(r, "SCRAM-SHA-512", user, password)   # KIP-368: handshake + authenticate again
    assert (again.error_code, again.session_lifetime_ms) == (0, LIFETIME_MS)
    time.sleep(1.2)                                      # past the first expiry, inside the second
    assert r.request(3, 1, {"topics": None}).brokers
    r.close()


def test_reauthentication_must_keep_mechanism_and_principal(bp):
    r = Raw(bp.sasl_port)
    assert r.plain("alice", PLAIN_USERS["alice"]).error_code == 0
    time.sleep(1.1)
    resp = r.plain("admin", PLAIN_USERS["admin"])
    assert (resp.error_code, resp.error_message) == (
        58, "Cannot change principals during re-authentication from User.alice: User.admin")
    assert r.closed_within(3) is not None
    r = Raw(bp.sasl_port)
    user, password = SCRAM_USERS["SCRAM-SHA-256"]
    assert scram(r, "SCRAM-SHA-256", user, password).error_code == 0
    time.sleep(1.1)
    assert r.request(17, 1, {"mechanism": "PLAIN"}).error_code == 0   # answered, then the connection fails
    assert r.closed_within(3) is not None
    assert ("SASL mechanism 'PLAIN' requested by client is not supported for re-authentication of mechanism "
            "'SCRAM-SHA-256'") in bp.log()
    r = Raw(bp.sasl_port)   # a handshake within a second of the last (re-)authentication start: handled as a
    assert r.plain("alice", PLAIN_USERS["alice"]).error_code == 0    # request, answered ILLEGAL_SASL_STATE
    assert r.request(17, 1, {"mechanism": "PLAIN"}).error_code == 0  # (the first one counts from -inf)
    assert r.request(36, 2, {"auth_bytes": b"\0alice\0" + PLAIN_USERS["alice"].encode()}).error_code == 0
    assert r.request(17, 1, {"mechanism": "PLAIN"}).error_code == 34
    r.close()


def test_librdkafka_reauthenticates_while_producing(bp):
    import confluent_kafka
    from confluent_kafka import Producer
    assert confluent_kafka.libversion()[1] >= 0x020200ff, "KIP-368 needs librdkafka >= 2.2"
    user, password = SCRAM_USERS["SCRAM-SHA-512"]
    lines: list[str] = []

    class Capture(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())
    logger = logging.getLogger(f"rdkafka-{uuid.uuid4().hex}")
    logger.addHandler(Capture())
    logger.setLevel(logging.DEBUG)
    errors, delivered = [], []
    before = bp.log().count("SASL session expired")
    producer = Producer({"bootstrap.servers": sasl_bootstrap(bp), "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": user, "sasl.password": password,
                         "debug": "security", "logger": logger, "error_cb": errors.append})
    topic = f"reauth-{uuid.uuid4().hex[:8]}"
    deadline = time.monotonic() + 3 * LIFETIME_MS / 1000
    n = 0
    while time.monotonic() < deadline:
        producer.produce(topic, f"m{n}".encode(), on_delivery=lambda err, msg: delivered.append(err))
        n += 1
        producer.poll(0.1)
    assert producer.flush(15) == 0
    assert len(delivered) == n and all(err is None for err in delivered)
    assert not errors, errors
    reauths = [line for line in lines if "reauth" in line.lower()]
    assert len(reauths) >= 2, lines[-20:]
    assert bp.log().count("SASL session expired") == before   # never cut off: it re-authenticated in time


def test_kafka_python_reauthenticates_and_aiokafka_reconnects(bp):
    from aiokafka import AIOKafkaProducer
    from kafka import KafkaProducer
    user, password = SCRAM_USERS["SCRAM-SHA-256"]
    conf = {"bootstrap_servers": sasl_bootstrap(bp), "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "SCRAM-SHA-256", "sasl_plain_username": user, "sasl_plain_password": password}
    topic = f"reauth-{uuid.uuid4().hex[:8]}"
    before = bp.log().count("SASL session expired")
    producer = KafkaProducer(**conf)
    futures = []
    deadline = time.monotonic() + 2.5 * LIFETIME_MS / 1000
    while time.monotonic() < deadline:
        futures.append(producer.send(topic, b"kp"))
        time.sleep(0.1)
    producer.flush(15)
    assert all(f.get(5) is not None for f in futures)
    producer.close()
    assert bp.log().count("SASL session expired") == before   # kafka-python 3 re-authenticated in time

    async def aio():
        p = AIOKafkaProducer(**conf)
        await p.start()
        sent = 0
        try:
            end = time.monotonic() + 2.5 * LIFETIME_MS / 1000
            while time.monotonic() < end:
                await p.send_and_wait(topic, b"aio")
                sent += 1
                await asyncio.sleep(0.1)
        finally:
            await p.stop()
        return sent
    sent = asyncio.run(aio())
    assert sent > 10
    assert bp.log().count("SASL session expired") > before   # cut off after the expiry, reconnected, delivered
