"""SASL pieces without a broker: the SCRAM exchange against security.md's test vector, the stored
credential format, PLAIN, JAAS parsing, and the authenticator's state machine over a recording
stand-in connection (every branch of Kafka's SaslServerAuthenticator that the broker tests cannot
time or reach cheaply)."""
from __future__ import annotations

import base64
import logging

import pytest

from kbroker.config.broker import build_config
from kbroker.config.errors import ConfigError
from kbroker.protocol import decode_response, encode_request, encode_response
from kbroker.security.credentials import (
    ScramCredential,
    format_credential,
    make_credential,
    parse_credential,
)
from kbroker.security.principal import Session
from kbroker.security.sasl import authenticator_factory, java_hashset_order, listener_sasl
from kbroker.security.sasl.authenticator import COMPLETE, ListenerSasl, SaslServerAuthenticator
from kbroker.security.sasl.base import SaslAuthenticationError, SaslError
from kbroker.security.sasl.jaas import JaasError, parse_jaas_config
from kbroker.security.sasl.plain import PlainServer
from kbroker.security.sasl.scram import ScramClient, ScramServer

SALT = b"1jmvz3o4kq7q2bfq9z0j3d8wz"
VECTOR_CRED = ("salt=MWptdnozbzRrcTdxMmJmcTl6MGozZDh3eg==,stored_key=IQ3vCIEzR7FIOJ4Q5b+27TFh6Xmdc2QQga2ik/urNpQ=,"
               "server_key=KCgUh0DwiDRcqCm54eqGt4p2jdBYwN9ZFD6Kc5Wg1Yg=,iterations=8192")
C1 = b"n,,n=alice,r=abcdefghijklmnopqrstuvwxyz012345"
S1 = b"r=abcdefghijklmnopqrstuvwxyz0123452u1fbq6u1y0y3o8xv3hn2g7kk,s=MWptdnozbzRrcTdxMmJmcTl6MGozZDh3eg==,i=8192"
C2 = (b"c=biws,r=abcdefghijklmnopqrstuvwxyz0123452u1fbq6u1y0y3o8xv3hn2g7kk,"
      b"p=AE8xcLOwjfmgzbCnj8ffQGaiJMDSOg/a61z+0nbqC6Y=")
S2 = b"v=XOM7NOjepoBy/7xGqaC/oDLOtzZTgt5a//e1SnGAlh8="
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')


def vector_server() -> ScramServer:
    cred = parse_credential(VECTOR_CRED)
    return ScramServer("SCRAM-SHA-256", lambda m, u: cred if (m, u) == ("SCRAM-SHA-256", "alice") else None,
                       nonce=lambda: "2u1fbq6u1y0y3o8xv3hn2g7kk")


# -- SCRAM -------------------------------------------------------------------------------------

def test_credential_from_password_matches_the_vector():
    assert format_credential(make_credential("SCRAM-SHA-256", "alice-secret", 8192, SALT)) == VECTOR_CRED


def test_server_answers_the_vector_exchange_byte_for_byte():
    server = vector_server()
    assert server.evaluate(C1) == S1
    assert not server.complete
    assert server.evaluate(C2) == S2
    assert server.complete and server.authorization_id == "alice"


def test_client_produces_the_vector_messages():
    client = ScramClient("SCRAM-SHA-256", "alice", "alice-secret", nonce="abcdefghijklmnopqrstuvwxyz012345")
    assert client.first() == C1
    assert client.final(S1) == C2
    client.verify(S2)
    with pytest.raises(SaslError):
        client.verify(b"v=" + base64.b64encode(b"\0" * 32))


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_client_and_server_agree_and_a_wrong_password_fails(mechanism):
    cred = make_credential(mechanism, "pw-1", 4096)
    for password, ok in (("pw-1", True), ("pw-2", False)):
        server = ScramServer(mechanism, lambda m, u: cred)
        client = ScramClient(mechanism, "bob", password)
        final = client.final(server.evaluate(client.first()))
        if ok:
            client.verify(server.evaluate(final))
            assert server.complete
        else:
            with pytest.raises(SaslError) as info:
                server.evaluate(final)
            assert not isinstance(info.value, SaslAuthenticationError)  # the cause is hidden from the client
            assert "pw-2" not in str(info.value)


@pytest.mark.parametrize("first", [
    b"y,,n=alice,r=abc",                     # gs2 flag other than n
    b"p=tls-unique,,n=alice,r=abc",
    b"n,,n=alice",                           # no nonce
    b"n,,r=abc,n=alice",                     # wrong order
    b"n,,n=al=ice,r=abc",                    # '=' not escaped
    b"n,,n=alice,r=ab,c",                    # ',' in the nonce (becomes a bad extension)
    b"\xff\xfe",                             # not UTF-8
    b"",
])
def test_malformed_client_first_fails(first):
    with pytest.raises(SaslError):
        vector_server().evaluate(first)


def test_client_final_checks_nonce_and_format():
    server = vector_server()
    server.evaluate(C1)
    with pytest.raises(SaslError, match="Invalid client nonce"):
        server.evaluate(C2.replace(b"g7kk,", b"g7kX,"))
    server = vector_server()   # Kafka 2.8 accepts a nonce that ends with the server's (librdkafka 2.0's quirk)
    server.evaluate(C1)
    with pytest.raises(SaslError, match="Invalid client credentials"):   # the proof then covers that nonce
        server.evaluate(C2.replace(b"r=abc", b"r=abcdefghijklmnopqrstuvwxyz012345abc"))
    for bad in (b"c=biws,p=AE8x", b"r=abc,c=biws,p=AAAA", b"c=biws,r=x"):
        server = vector_server()
        server.evaluate(C1)
        with pytest.raises(SaslError):
            server.evaluate(bad)


def test_unknown_user_low_iterations_tokenauth_and_authzid():
    with pytest.raises(SaslError, match="Invalid user credentials"):
        vector_server().evaluate(b"n,,n=mallory,r=abc")
    low = make_credential("SCRAM-SHA-256", "x", 4095)
    with pytest.raises(SaslError, match="less than the minimum"):
        ScramServer("SCRAM-SHA-256", lambda m, u: low).evaluate(b"n,,n=alice,r=abc")
    with pytest.raises(SaslError):
        vector_server().evaluate(b"n,,n=alice,r=abc,tokenauth=true")
    with pytest.raises(SaslAuthenticationError, match="authorization id that is different"):
        vector_server().evaluate(b"n,a=bob,n=alice,r=abc")
    server = vector_server()   # an authzid equal to the user is fine, and other extensions are ignored
    assert server.evaluate(b"n,a=alice,n=alice,r=abc,foo=bar").startswith(b"r=abc")


def test_escaped_user_names():
    cred = make_credential("SCRAM-SHA-512", "pw", 4096)
    seen = []
    server = ScramServer("SCRAM-SHA-512", lambda m, u: seen.append(u) or cred)
    client = ScramClient("SCRAM-SHA-512", "a,b=c", "pw")
    client.verify(server.evaluate(client.final(server.evaluate(client.first()))))
    assert seen == ["a,b=c"] and server.authorization_id == "a,b=c"


def test_stored_credential_format_and_parser():
    cred = parse_credential(VECTOR_CRED)
    assert cred.iterations == 8192 and cred.salt == SALT
    assert format_credential(cred) == VECTOR_CRED
    assert "stored_key" not in repr(cred) and "IQ3v" not in repr(cred)
    for bad in ("salt=AA==,stored_key=AA==,server_key=AA==", VECTOR_CRED + ",extra=1",
                VECTOR_CRED.replace("iterations=8192", "iterations=x"), "salt=!!,stored_key=AA==,server_key=AA==,"
                "iterations=4096", "garbage"):
        with pytest.raises(ValueError) as info:
            parse_credential(bad)
        assert "IQ3v" not in str(info.value)
    assert isinstance(cred, ScramCredential)


# -- PLAIN and JAAS ------------------------------------------------------------------------------

def test_plain_accepts_both_client_shapes_and_refuses_the_rest():
    users = {"alice": "alice-secret"}
    for token in (b"\0alice\0alice-secret", b"alice\0alice\0alice-secret"):
        server = PlainServer(users)
        assert server.evaluate(token) == b""
        assert server.complete and server.authorization_id == "alice"
    with pytest.raises(SaslAuthenticationError, match="^Authentication failed: Invalid username or password$"):
        PlainServer(users).evaluate(b"\0alice\0wrong")
    with pytest.raises(SaslAuthenticationError, match="Invalid username or password"):
        PlainServer(users).evaluate(b"\0nobody\0alice-secret")
    with pytest.raises(SaslAuthenticationError, match="authorization id that is different"):
        PlainServer(users).evaluate(b"bob\0alice\0alice-secret")
    for bad in (b"alice\0alice-secret", b"a\0alice\0alice-secret\0x", b"\0\0pw", b"\0alice\0"):
        with pytest.raises(SaslError) as info:
            PlainServer(users).evaluate(bad)
        assert not isinstance(info.value, SaslAuthenticationError)


def test_jaas_parsing():
    entry = parse_jaas_config(JAAS)
    assert entry.login_module == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert entry.flag == "required"
    assert entry.options == {"username": "admin", "password": "admin-secret", "user_admin": "admin-secret",
                             "user_alice": "alice-secret"}
    assert "secret" not in repr(entry)
    escaped = parse_jaas_config('M required user_x="a\\"b\\\\c;d" bare=word;')
    assert escaped.options == {"user_x": 'a"b\\c;d', "bare": "word"}
    for bad in ("", "M required user_x=\"a\"", "M maybe a=\"b\";", 'M required a="b"; N required c="d";',
                'M required a="unterminated;', "M required a=;"):
        with pytest.raises(JaasError) as info:
            parse_jaas_config(bad)
        assert "unterminated" not in str(info.value)


# -- listener settings ---------------------------------------------------------------------------

def config(**keys: str):
    raw = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0"} | {k.replace("_", "."): v for k, v in keys.items()}
    return build_config({k: (v, "test") for k, v in raw.items()})


def test_listener_settings_and_startup_errors():
    cfg = build_config({k: (v, "test") for k, v in {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "connections.max.reauth.ms": "5000",
        "listener.name.sasl_plaintext.scram-sha-512.connections.max.reauth.ms": "7000",
        "connection.failed.authentication.delay.ms": "250",
    }.items()})
    s = listener_sasl(cfg, "SASL_PLAINTEXT", None)
    assert s.mechanisms == ["PLAIN", "SCRAM-SHA-512", "SCRAM-SHA-256"]   # Java HashSet order, as Kafka lists them
    assert s.plain_users == {"admin": "admin-secret", "alice": "alice-secret"}
    assert s.reauth_ms == {"PLAIN": 5000, "SCRAM-SHA-256": 5000, "SCRAM-SHA-512": 7000}
    assert s.failed_delay_s == 0.25 and s.max_receive_size == 524288
    assert "secret" not in repr(s)
    assert authenticator_factory(cfg, "PLAINTEXT", "PLAINTEXT", None)(object()) is None
    with pytest.raises(ConfigError, match="GSSAPI is not supported"):
        authenticator_factory(config(), "SASL_PLAINTEXT", "SASL_PLAINTEXT", None)   # Kafka's default mechanism
    with pytest.raises(ConfigError, match="OAUTHBEARER is not supported"):
        listener_sasl(config(sasl_enabled_mechanisms="OAUTHBEARER"), "SASL_PLAINTEXT", None)
    with pytest.raises(ConfigError, match="unknown SASL mechanism"):
        listener_sasl(config(sasl_enabled_mechanisms="DIGEST-MD5"), "SASL_PLAINTEXT", None)
    with pytest.raises(ConfigError, match="PLAIN is enabled but no JAAS"):
        listener_sasl(config(sasl_enabled_mechanisms="PLAIN"), "SASL_PLAINTEXT", None)
    assert java_hashset_order(["SCRAM-SHA-256", "PLAIN"]) == ["PLAIN", "SCRAM-SHA-256"]


# -- the state machine over a recording connection ----------------------------------------------

class FakeConn:
    def __init__(self) -> None:
        self.peer = ("127.0.0.1", 5555)
        self.session = Session(client_address="127.0.0.1", listener="SASL_PLAINTEXT",
                               security_protocol="SASL_PLAINTEXT")
        self.max_frame = 104857600
        self.events: list[tuple] = []
        self.closed = False

    def handle_request(self, frame):
        self.events.append(("handled", bytes(frame[:2])))

    def reply(self, api_key, version, correlation_id, body):
        chunks = encode_response(api_key, version, correlation_id, body)
        _, decoded = decode_response(api_key, version, b"".join(chunks)[4:])
        self.events.append(("reply", api_key, decoded))

    def send_token(self, token):
        self.events.append(("token", token))

    def close(self, why=""):
        self.closed = True
        self.events.append(("close", why))

    def close_after(self, seconds, why, api_key=None, version=0, correlation_id=0, body=None):
        decoded = None
        if api_key is not None:
            chunks = encode_response(api_key, version, correlation_id, body)
            _, decoded = decode_response(api_key, version, b"".join(chunks)[4:])
        self.closed = True
        self.events.append(("close_after", seconds, api_key, decoded))


def req(api_key: int, version: int, body: dict, corr: int = 1) -> bytearray:
    return bytearray(encode_request(api_key, version, corr, "t", body)[4:])


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def machine(reauth_ms: int = 0, clock: Clock | None = None) -> tuple[SaslServerAuthenticator, FakeConn]:
    cred = make_credential("SCRAM-SHA-512", "bob-secret", 4096)

    class Creds:
        def lookup(self, mechanism, user):
            return cred if (mechanism, user) == ("SCRAM-SHA-512", "bob") else None
    settings = ListenerSasl("SASL_PLAINTEXT", ["PLAIN", "SCRAM-SHA-512"], {"alice": "alice-secret"},
                            Creds(), 0.1, 1024, {"PLAIN": reauth_ms, "SCRAM-SHA-512": reauth_ms},
                            clock or Clock())  # type: ignore[arg-type]
    conn = FakeConn()
    auth = SaslServerAuthenticator(settings, conn)
    return auth, conn


def test_pre_auth_frames_are_capped_and_the_cap_lifted_after_authentication():
    auth, conn = machine()
    assert conn.max_frame == 1024
    assert auth.intercept(conn, req(18, 3, {"client_software_name": "x", "client_software_version": "1"}))
    assert conn.events[-1][0] == "handled"
    auth.intercept(conn, req(17, 1, {"mechanism": "PLAIN"}))
    assert conn.events[-1][2].error_code == 0 and conn.events[-1][2].mechanisms == ["PLAIN", "SCRAM-SHA-512"]
    auth.intercept(conn, req(36, 2, {"auth_bytes": b"\0alice\0alice-secret"}))
    resp = conn.events[-1][2]
    assert (resp.error_code, resp.auth_bytes, resp.session_lifetime_ms) == (0, b"", 0)
    assert auth.state == COMPLETE and conn.max_frame == 104857600
    assert str(conn.session.principal) == "User:alice" and conn.session.mechanism == "PLAIN"
    assert auth.intercept(conn, req(3, 1, {"topics": []})) is False   # normal requests go their way


def test_unsupported_api_versions_version_keeps_the_state_and_a_second_one_closes():
    auth, conn = machine()
    frame = req(18, 0, {})
    frame[2:4] = (99).to_bytes(2, "big")
    auth.intercept(conn, frame)
    assert auth.state == "HANDSHAKE_OR_VERSIONS_REQUEST"
    auth.intercept(conn, req(18, 0, {}))
    assert auth.state == "HANDSHAKE_REQUEST"
    auth.intercept(conn, req(18, 0, {}))
    assert conn.events[-1][0] == "close" and not any(e[0] == "close_after" for e in conn.events)


def test_legacy_v0_plain_and_scram():
    auth, conn = machine()
    auth.intercept(conn, req(17, 0, {"mechanism": "PLAIN"}))
    auth.intercept(conn, bytearray(b"alice\0alice\0alice-secret"))
    assert conn.events[-1] == ("token", b"")   # PLAIN: one empty frame
    assert auth.state == COMPLETE
    auth, conn = machine()
    auth.intercept(conn, req(17, 0, {"mechanism": "SCRAM-SHA-512"}))
    client = ScramClient("SCRAM-SHA-512", "bob", "bob-secret")
    auth.intercept(conn, bytearray(client.first()))
    auth.intercept(conn, bytearray(client.final(conn.events[-1][1])))
    client.verify(conn.events[-1][1])
    assert str(conn.session.principal) == "User:bob"
    # legacy failures: PLAIN delayed close without a frame, SCRAM closed at once
    auth, conn = machine()
    auth.intercept(conn, req(17, 0, {"mechanism": "PLAIN"}))
    auth.intercept(conn, bytearray(b"\0alice\0nope"))
    assert conn.events[-1] == ("close_after", 0.1, None, None)
    auth, conn = machine()
    auth.intercept(conn, req(17, 0, {"mechanism": "SCRAM-SHA-512"}))
    auth.intercept(conn, bytearray(b"garbage"))
    assert conn.events[-1][0] == "close"


def test_failures_answer_kafka_codes_after_the_delay(caplog):
    caplog.set_level(logging.INFO)
    auth, conn = machine()
    auth.intercept(conn, req(17, 1, {"mechanism": "GSSAPI"}))
    kind, delay, api_key, body = conn.events[-1]
    assert (kind, delay, api_key, body.error_code, body.mechanisms) == (
        "close_after", 0.1, 17, 33, ["PLAIN", "SCRAM-SHA-512"])
    auth, conn = machine()
    auth.intercept(conn, req(17, 1, {"mechanism": "PLAIN"}))
    auth.intercept(conn, req(36, 1, {"auth_bytes": b"\0alice\0wrong-pw"}))
    _, _, _, body = conn.events[-1]
    assert (body.error_code, body.error_message) == (58, "Authentication failed: Invalid username or password")
    auth, conn = machine()
    auth.intercept(conn, req(17, 1, {"mechanism": "SCRAM-SHA-512"}))
    auth.intercept(conn, req(36, 1, {"auth_bytes": b"n,,n=bob,r=abc"}))
    auth.intercept(conn, req(36, 1, {"auth_bytes": b"c=biws,r=abcX,p=AAAA"}))
    _, _, _, body = conn.events[-1]
    assert (body.error_code, body.error_message) == (58, "Authentication failed during authentication due to "
                                                          "invalid credentials with SASL mechanism SCRAM-SHA-512")
    auth, conn = machine()   # a wrong request while authenticating: ILLEGAL_SASL_STATE of that request type
    auth.intercept(conn, req(17, 1, {"mechanism": "PLAIN"}))
    auth.intercept(conn, req(17, 1, {"mechanism": "PLAIN"}, corr=7))
    assert conn.events[-1][2] == 17 and conn.events[-1][3].error_code == 34
    auth, conn = machine()   # ... of a version we do not speak: no answer, still the delayed close
    auth.intercept(conn, req(17, 1, {"mechanism": "PLAIN"}))
    frame = req(18, 0, {})
    frame[2:4] = (77).to_bytes(2, "big")
    auth.intercept(conn, frame)
    assert conn.events[-1] == ("close_after", 0.1, None, None)
    auth, conn = machine()   # a request before the handshake: closed, no answer, no delay
    auth.intercept(conn, req(3, 1, {"topics": []}))
    assert conn.events == [("close", "api key 3 received before SASL authentication")]
    assert "wrong-pw" not in caplog.text and "127.0.0.1:5555" in caplog.text


def test_reauthentication_and_expiry():
    clock = Clock()
    auth, conn = machine(reauth_ms=10000, clock=clock)
    auth.intercept(conn, req(17, 1, {"mechanism": "PLAIN"}))
    auth.intercept(conn, req(36, 1, {"auth_bytes": b"\0alice\0alice-secret"}))
    assert conn.events[-1][2].session_lifetime_ms == 10000
    clock.now += 9
    assert auth.intercept(conn, req(3, 1, {"topics": []})) is False
    auth.intercept(conn, req(17, 1, {"mechanism": "PLAIN"}))                 # re-authentication starts
    auth.intercept(conn, req(36, 1, {"auth_bytes": b"\0alice\0alice-secret"}))
    assert conn.events[-1][2].session_lifetime_ms == 10000 and auth.state == COMPLETE
    clock.now += 9.5
    assert auth.intercept(conn, req(3, 1, {"topics": []})) is False           # still inside the new lifetime
    clock.now += 1
    assert auth.intercept(conn, req(3, 1, {"topics": []})) is True            # expired: closed
    assert conn.events[-1] == ("close", "SASL session expired")
    # a different principal on re-authentication fails with Kafka's text
    auth, conn = machine(reauth_ms=10000, clock=clock)
    auth.intercept(conn, req(17, 1, {"mechanism": "PLAIN"}))
    auth.intercept(conn, req(36, 1, {"auth_bytes": b"\0alice\0alice-secret"}))
    clock.now += 2
    auth.settings.plain_users["carol"] = "carol-secret"
    auth.intercept(conn, req(17, 1, {"mechanism": "PLAIN"}))
    auth.intercept(conn, req(36, 1, {"auth_bytes": b"\0carol\0carol-secret"}))
    assert conn.events[-1][3].error_message == "Cannot change principals during re-authentication from User.alice: " \
                                               "User.carol"
    # without connections.max.reauth.ms a handshake after authentication goes to the handler (34)
    auth, conn = machine()
    auth.intercept(conn, req(17, 1, {"mechanism": "PLAIN"}))
    auth.intercept(conn, req(36, 1, {"auth_bytes": b"\0alice\0alice-secret"}))
    assert auth.intercept(conn, req(17, 1, {"mechanism": "PLAIN"})) is False
