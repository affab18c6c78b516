"""SASL on the wire, over raw sockets against a real broker: both framings, and every bad input of
issue 13 with Kafka's answer (or close), the failure delay measured, a log line naming the peer, no
password in the log, and the broker serving other connections throughout."""
from __future__ import annotations

import time

import pytest

from kbroker.security.sasl.scram import ScramClient
from tests.security.sasl_helpers import (
    PLAIN_USERS,
    SCRAM_USERS,
    Raw,
    create_scram_users,
    run_broker,
    sasl_broker,
)

DELAY_MS = 400


@pytest.fixture(scope="module")
def bp(tmp_path_factory):
    proc = sasl_broker(tmp_path_factory.mktemp("sasl-raw"), {
        "connection.failed.authentication.delay.ms": str(DELAY_MS),
        "sasl.server.max.receive.size": "4096",
    })
    for started in run_broker(proc):
        create_scram_users(started)
        yield started


def broker_output(bp) -> str:
    """What the broker logged (without the harness's command lines, which hold the JAAS config)."""
    return "\n".join(line for line in bp.log().splitlines() if not line.startswith("====="))


def raw(bp) -> Raw:
    return Raw(bp.sasl_port)


def still_serving(bp) -> None:
    """A good client authenticates and gets metadata after whatever came before."""
    r = raw(bp)
    assert r.plain("alice", PLAIN_USERS["alice"]).error_code == 0
    meta = r.request(3, 1, {"topics": None})
    assert [b.port for b in meta.brokers] == [bp.sasl_port]   # the SASL listener's endpoint
    r.close()


def test_kafka_framing_plain_and_scram(bp):
    r = raw(bp)
    versions = r.request(18, 3, {"client_software_name": "raw", "client_software_version": "1"})
    keys = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
    assert keys[17] == (0, 1) and keys[36] == (0, 2) and keys[50] == (0, 0) and keys[51] == (0, 0)
    hs = r.request(17, 1, {"mechanism": "SCRAM-SHA-512"})
    assert hs.error_code == 0 and sorted(hs.mechanisms) == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
    user, password = SCRAM_USERS["SCRAM-SHA-512"]
    client = ScramClient("SCRAM-SHA-512", user, password)
    first = r.request(36, 2, {"auth_bytes": client.first()})
    assert first.error_code == 0 and first.session_lifetime_ms == 0
    final = r.request(36, 2, {"auth_bytes": client.final(first.auth_bytes)})
    assert final.error_code == 0
    client.verify(final.auth_bytes)
    # authenticated: SASL requests now go to the handlers, which answer ILLEGAL_SASL_STATE
    again = r.request(36, 1, {"auth_bytes": b"x"})
    assert (again.error_code, again.error_message) == (
        34, "SaslAuthenticate request received after successful authentication")
    assert r.request(17, 1, {"mechanism": "PLAIN"}).error_code == 34
    assert r.request(3, 1, {"topics": None}).brokers
    r.close()


def test_legacy_v0_framing_plain_and_scram(bp):
    r = raw(bp)   # handshake first, no ApiVersions: kafka-python 2.0 / aiokafka's order
    assert r.request(17, 0, {"mechanism": "PLAIN"}).error_code == 0
    r.send_token(b"alice\0alice\0" + PLAIN_USERS["alice"].encode())
    assert r.read_frame() == b""           # PLAIN's empty server token: 00 00 00 00
    assert r.request(3, 1, {"topics": None}).brokers
    r.close()
    r = raw(bp)
    assert r.request(17, 0, {"mechanism": "SCRAM-SHA-256"}).error_code == 0
    user, password = SCRAM_USERS["SCRAM-SHA-256"]
    client = ScramClient("SCRAM-SHA-256", user, password)
    r.send_token(client.first())
    r.send_token(client.final(r.read_frame()))
    client.verify(r.read_frame())
    assert r.request(3, 1, {"topics": None}).brokers
    r.close()
    r = raw(bp)   # a wrong PLAIN password in legacy framing: nothing sent, closed after the delay
    r.request(17, 0, {"mechanism": "PLAIN"})
    r.send_token(b"alice\0alice\0wrong-password-legacy")
    took = r.closed_within(5)
    assert took is not None and took >= DELAY_MS / 1000 * 0.8
    still_serving(bp)


def test_request_before_authentication_closes_without_answer(bp):
    r = raw(bp)
    r.send(3, 1, {"topics": None})
    took = r.closed_within(3)
    assert took is not None and took < DELAY_MS / 1000   # no failure delay: not an authentication failure
    r = raw(bp)
    r.sock.sendall(b"\x00\x00\x00\x04abcd")              # too short for a header (a raw 0.9 GSSAPI token)
    assert r.closed_within(3) is not None
    still_serving(bp)
    assert "before SASL authentication" in bp.log()


def test_unknown_mechanism_gets_33_with_the_mechanisms_after_the_delay(bp):
    r = raw(bp)
    start = time.monotonic()
    resp = r.request(17, 1, {"mechanism": "GSSAPI"})
    took = time.monotonic() - start
    assert resp.error_code == 33 and sorted(resp.mechanisms) == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
    assert DELAY_MS / 1000 * 0.9 <= took < DELAY_MS / 1000 + 1.0, took
    assert r.closed_within(3) is not None
    print(f"unknown mechanism answered after {took * 1000:.0f} ms (delay {DELAY_MS} ms)")
    still_serving(bp)


def test_wrong_password_gets_58_with_kafkas_messages(bp):
    r = raw(bp)
    start = time.monotonic()
    resp = r.plain("alice", "wrong-password-plain")
    took = time.monotonic() - start
    assert (resp.error_code, resp.error_message) == (58, "Authentication failed: Invalid username or password")
    assert took >= DELAY_MS / 1000 * 0.9
    assert r.closed_within(3) is not None
    for mechanism, (user, _) in SCRAM_USERS.items():
        r = raw(bp)
        assert r.request(17, 1, {"mechanism": mechanism}).error_code == 0
        client = ScramClient(mechanism, user, "wrong-password-scram")
        first = r.request(36, 1, {"auth_bytes": client.first()})
        final = r.request(36, 1, {"auth_bytes": client.final(first.auth_bytes)})
        assert (final.error_code, final.error_message) == (
            58, f"Authentication failed during authentication due to invalid credentials with SASL mechanism "
                f"{mechanism}")
        assert r.closed_within(3) is not None
    log = broker_output(bp)
    assert "wrong-password" not in log and "secret" not in log
    assert "Failed authentication with 127.0.0.1:" in log
    still_serving(bp)


@pytest.mark.parametrize("token", [b"y,,n=bob,r=abc", b"n,,n=bob", b"\xff\x00garbage", b""])
def test_malformed_scram_gets_58(bp, token):
    r = raw(bp)
    assert r.request(17, 1, {"mechanism": "SCRAM-SHA-512"}).error_code == 0
    resp = r.request(36, 1, {"auth_bytes": token})
    assert resp.error_code == 58 and resp.error_message.endswith("with SASL mechanism SCRAM-SHA-512")
    assert r.closed_within(3) is not None
    still_serving(bp)


def test_malformed_scram_client_final_gets_58(bp):
    r = raw(bp)
    r.request(17, 1, {"mechanism": "SCRAM-SHA-512"})
    user, password = SCRAM_USERS["SCRAM-SHA-512"]
    client = ScramClient("SCRAM-SHA-512", user, password)
    r.request(36, 1, {"auth_bytes": client.first()})
    resp = r.request(36, 1, {"auth_bytes": b"c=biws,r=not-the-nonce,p=AAAA"})
    assert resp.error_code == 58
    still_serving(bp)


def test_oversized_pre_auth_frame_closes(bp):
    r = raw(bp)
    r.request(17, 1, {"mechanism": "PLAIN"})
    r.send(36, 1, {"auth_bytes": b"\0alice\0" + b"x" * 5000})   # over sasl.server.max.receive.size=4096
    assert r.closed_within(3) is not None
    r = raw(bp)   # before the handshake too, on the 4-byte size alone
    r.sock.sendall((10_000_000).to_bytes(4, "big"))
    assert r.closed_within(3) is not None
    # after authentication the normal limit applies again: a 6 KB metadata request is fine
    r = raw(bp)
    assert r.plain("alice", PLAIN_USERS["alice"]).error_code == 0
    meta = r.request(3, 4, {"topics": [{"name": f"t{i:05d}-" + "x" * 50} for i in range(100)],
                            "allow_auto_topic_creation": False})
    assert len(meta.topics) == 100 and {t.error_code for t in meta.topics} == {3}
    r.close()
    still_serving(bp)


def test_wrong_api_while_authenticating_gets_34_then_close(bp):
    r = raw(bp)
    assert r.request(17, 1, {"mechanism": "PLAIN"}).error_code == 0
    start = time.monotonic()
    resp = r.request(18, 0, {})                     # ApiVersions in the AUTHENTICATE state
    assert resp.error_code == 34
    assert time.monotonic() - start >= DELAY_MS / 1000 * 0.9
    assert r.closed_within(3) is not None
    r = raw(bp)
    r.request(17, 1, {"mechanism": "PLAIN"})
    assert r.request(17, 1, {"mechanism": "PLAIN"}).error_code == 34   # a second handshake
    still_serving(bp)


def test_api_versions_once_then_handshake_and_unsupported_version_retry(bp):
    r = raw(bp)
    frame = bytearray(__import__("kbroker.protocol", fromlist=["encode_request"]).encode_request(
        18, 0, 1, "raw", {}))
    frame[6:8] = (99).to_bytes(2, "big")           # ApiVersions v99: answered with v0 and the state kept
    r.sock.sendall(bytes(frame))
    from kbroker.protocol import decode_response
    _, resp = decode_response(18, 0, r.read_frame())
    assert resp.error_code == 35
    assert r.request(18, 0, {}).error_code == 0
    assert r.plain("alice", PLAIN_USERS["alice"]).error_code == 0
    r.close()
    r = raw(bp)
    r.request(18, 0, {})
    r.send(18, 0, {})                              # a second ApiVersions before the handshake: closed
    assert r.closed_within(3) is not None
    still_serving(bp)


def test_random_bytes_before_and_during_authentication(bp):
    """Bounded garbage in every pre-authentication state, both framings: each connection is answered or
    closed, the broker logs no error (checked at teardown) and serves a good client after."""
    import random
    rng = random.Random(1368)
    for i in range(50):
        r = raw(bp)
        stage = i % 5
        if stage in (1, 4):
            r.request(17, 1, {"mechanism": rng.choice(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])})
        elif stage == 2:
            r.request(17, 0, {"mechanism": rng.choice(["PLAIN", "SCRAM-SHA-512"])})
        body = bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 300)))
        if stage == 3:     # a header that looks right around a random body
            body = rng.choice([b"\x00\x11", b"\x00\x24", b"\x00\x12"]) + bytes([0, rng.randrange(0, 4)]) + body
        if stage == 4:     # any api at any version while authenticating
            body = rng.randrange(0, 70).to_bytes(2, "big") + rng.randrange(0, 20).to_bytes(2, "big") + body
        try:
            r.sock.sendall(len(body).to_bytes(4, "big") + body)
            if stage == 1:   # and a SaslAuthenticate carrying random bytes
                r.send(36, rng.randrange(0, 3), {"auth_bytes": body})
            r.closed_within(1.0)   # answered and still open is fine too
        except (ConnectionError, OSError):
            pass
        r.close()
    still_serving(bp)
