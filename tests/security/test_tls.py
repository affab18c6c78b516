"""TLS listeners on real broker processes: confluent-kafka, kcat, kafka-python and aiokafka produce
and consume over SSL with the broker's certificate verified; ssl.client.auth=required turns away a
client without a certificate or with an untrusted one and names the others by their subject;
plaintext spoken to a TLS port, TLS spoken to a plaintext port and a stalled handshake each fail
alone while the broker keeps serving everyone else. Also the subject's RFC 2253 rendering and
ssl.principal.mapping.rules, as Kafka applies them."""
from __future__ import annotations

import os
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import warnings
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID, ObjectIdentifier

from kbroker.security.tls import PrincipalMapper, PrincipalMappingError, java_dn
from tests.integration.clients import AioKafkaDriver, ConfluentDriver, KafkaPythonDriver
from tests.integration.helpers import create_topic, make_messages

from .conftest import TlsBroker, client_ssl_context, run_broker
from .pki import Pki

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

# -- the principal: Java's X500Principal.getName() and Kafka's SslPrincipalMapper ----------------


def _name(*rdns: list[tuple[ObjectIdentifier, str]]) -> x509.Name:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return x509.Name([x509.RelativeDistinguishedName([x509.NameAttribute(o, v, _validate=False) for o, v in rdn])
                          for rdn in rdns])


def test_dn_is_rendered_most_specific_first_without_spaces():
    name = _name([(NameOID.COUNTRY_NAME, "Unknown")], [(NameOID.STATE_OR_PROVINCE_NAME, "Unknown")],
                 [(NameOID.LOCALITY_NAME, "Unknown")], [(NameOID.ORGANIZATION_NAME, "Unknown")],
                 [(NameOID.ORGANIZATIONAL_UNIT_NAME, "Unknown")], [(NameOID.COMMON_NAME, "writeuser")])
    assert java_dn(name) == "CN=writeuser,OU=Unknown,O=Unknown,L=Unknown,ST=Unknown,C=Unknown"


def test_dn_escapes_and_multi_valued_rdns_and_unknown_attributes():
    name = _name([(NameOID.DOMAIN_COMPONENT, "com")], [(NameOID.DOMAIN_COMPONENT, "example")],
                 [(NameOID.ORGANIZATION_NAME, 'Acme, Inc. "+<>;')],
                 [(NameOID.COMMON_NAME, "#lead"), (NameOID.USER_ID, "u1")],
                 [(NameOID.EMAIL_ADDRESS, "a@b.c")])
    # emailAddress is no RFC 2253 keyword: Java writes its OID and the DER of the value (IA5String, tag 0x16)
    assert java_dn(name) == ("1.2.840.113549.1.9.1=#1605614062" + "2e63"
                             + ",CN=\\#lead+UID=u1,O=Acme\\, Inc. \\\"\\+\\<\\>\\;,DC=example,DC=com")


def test_mapping_rules_first_full_match_wins_with_case_and_default():
    dn = "CN=writeuser,OU=ServiceUsers,O=Unknown,L=Unknown,ST=Unknown,C=Unknown"
    assert PrincipalMapper("DEFAULT").name(dn) == dn
    rules = PrincipalMapper("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/U, RULE:^CN=(.*?),OU=(.*?),.*$/$1@$2/L, DEFAULT")
    assert rules.name(dn) == "WRITEUSER"
    assert rules.name("CN=Bob,OU=Ops,O=x") == "bob@ops"
    assert rules.name("O=nocn") == "O=nocn"  # only DEFAULT matches
    # a rule matches the whole DN or not at all: no DEFAULT -> no principal
    strict = PrincipalMapper("RULE:^CN=([a-z]+)$/$1/")
    assert strict.name("CN=alice") == "alice"
    with pytest.raises(PrincipalMappingError):
        strict.name("CN=alice,O=x")
    # a comma inside a rule's pattern belongs to it, and an escaped slash is a slash
    assert PrincipalMapper(r"RULE:^CN=(.*),O=a\/b$/$1-x/").name("CN=z,O=a/b") == "z-x"


def test_bad_mapping_rules_are_refused():
    for text in ("RULE:^CN=(.*)$", "NOTARULE", "RULE:^CN=(.*$/$1/"):
        with pytest.raises(ValueError):
            PrincipalMapper(text)


# -- four clients over SSL -------------------------------------------------------------------


def _ssl_config(driver_name: str, pki: Pki) -> dict:
    if driver_name == "confluent":
        return {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca),
                "ssl.endpoint.identification.algorithm": "https"}
    if driver_name == "kafka-python":
        return {"security_protocol": "SSL", "ssl_cafile": str(pki.ca), "ssl_check_hostname": True}
    return {"security_protocol": "SSL", "ssl_context": client_ssl_context(pki)}


@pytest.mark.parametrize("driver", [ConfluentDriver(), KafkaPythonDriver(), AioKafkaDriver()], ids=lambda d: d.name)
def test_client_produces_and_consumes_over_ssl(tls_broker: TlsBroker, pki: Pki, driver):
    topic = f"tls-{driver.name}"
    create_topic(tls_broker.bootstrap, topic, 2)
    conf = _ssl_config(driver.name, pki)
    msgs = make_messages(300, seed=7, partitions=2)
    producer = driver.producer(tls_broker.ssl_bootstrap, **conf)
    producer.send(topic, msgs)
    acks = producer.flush()
    producer.close()
    assert len(acks) == len(msgs)
    got = driver.read(tls_broker.ssl_bootstrap, topic, [0, 1], len(msgs), **conf)
    assert sorted(repr((r.key, r.value, r.headers)) for r in got) == sorted(repr((m.key, m.value, m.headers))
                                                                             for m in msgs)


def _kcat(*args: str, data: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["kcat", *args], input=data, capture_output=True, timeout=60)


def test_kcat_over_ssl_with_the_broker_verified(tls_broker: TlsBroker, pki: Pki):
    topic = "tls-kcat"
    create_topic(tls_broker.bootstrap, topic, 1)
    ssl_args = ["-b", tls_broker.ssl_bootstrap, "-X", "security.protocol=SSL", "-X", f"ssl.ca.location={pki.ca}",
                "-X", "ssl.endpoint.identification.algorithm=https"]
    lines = [f"line-{i}" for i in range(200)]
    produced = _kcat(*ssl_args, "-P", "-t", topic, data="\n".join(lines).encode())
    assert produced.returncode == 0, produced.stderr
    consumed = _kcat(*ssl_args, "-C", "-t", topic, "-o", "beginning", "-c", str(len(lines)), "-e")
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.decode().split() == lines
    # Metadata asked on the SSL listener names the SSL endpoint
    listed = _kcat(*ssl_args, "-L", "-J")
    assert f'"name":"{tls_broker.ssl_bootstrap}"' in listed.stdout.decode().replace(" ", ""), listed.stdout
    # ... and a client that does not trust the broker's CA fails the handshake
    untrusted = _kcat("-b", tls_broker.ssl_bootstrap, "-X", "security.protocol=SSL", "-X",
                      f"ssl.ca.location={pki.rogue_cert}", "-L", "-m", "3")
    assert untrusted.returncode != 0


def test_a_large_fetch_over_tls_arrives_whole_while_plaintext_clients_are_served(tls_broker: TlsBroker, pki: Pki):
    """12 MB of 64 KiB records read over TLS (segment ranges encrypted a chunk at a time), a plaintext
    consumer reading meanwhile; every byte compared."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    topic = "tls-large"
    create_topic(tls_broker.bootstrap, topic, 1)
    p = Producer({"bootstrap.servers": tls_broker.bootstrap, "linger.ms": 20, "message.max.bytes": 2_000_000})
    values = [os.urandom(64 * 1024) for _ in range(192)]
    for v in values:
        p.produce(topic, v)
    assert p.flush(60) == 0

    def read(bootstrap: str, extra: dict, out: list) -> None:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "g-" + os.urandom(4).hex(),
                      "enable.auto.commit": False, "fetch.max.bytes": 50_000_000,
                      "max.partition.fetch.bytes": 20_000_000, **extra})
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 60
        while len(out) < len(values) and time.monotonic() < deadline:
            for m in c.consume(500, 0.2):
                assert not m.error(), m.error()
                out.append(m.value())
        c.close()

    tls_out: list = []
    plain_out: list = []
    t = threading.Thread(target=read, args=(tls_broker.ssl_bootstrap, {"security.protocol": "SSL",
                                                                       "ssl.ca.location": str(pki.ca)}, tls_out))
    t.start()
    read(tls_broker.bootstrap, {}, plain_out)
    t.join(90)
    assert tls_out == values
    assert plain_out == values


# -- ssl.client.auth=required --------------------------------------------------------------------


@pytest.fixture(scope="module")
def mtls_broker(pki: Pki, tmp_path_factory: pytest.TempPathFactory):
    yield from run_broker(TlsBroker(tmp_path_factory.mktemp("mtls"), pki, {
        "ssl.client.auth": "required",
        "ssl.principal.mapping.rules": "RULE:^CN=(.*?),OU=Ops,.*$/$1-ops/L,DEFAULT"}))


def _metadata_over_tls(port: int, ctx: ssl.SSLContext) -> bytes:
    """ApiVersions v0 over a TLS connection; returns the response frame."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            s.sendall(bytes.fromhex("0000000e" "0012" "0000" "00000007" "0004") + b"test")
            size = int.from_bytes(_recv_exact(s, 4), "big")
            return _recv_exact(s, size)


def _recv_exact(s, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def test_client_auth_required_refuses_no_certificate_and_untrusted_ones(mtls_broker: TlsBroker, pki: Pki):
    good = client_ssl_context(pki, pki.client_cert, pki.client_key)
    assert _metadata_over_tls(mtls_broker.ssl_port, good)[:4] == (7).to_bytes(4, "big")  # correlation id
    for ctx in (client_ssl_context(pki), client_ssl_context(pki, pki.rogue_cert, pki.rogue_key)):
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
            _metadata_over_tls(mtls_broker.ssl_port, ctx)
    # the broker still serves: TLS with a certificate and plaintext
    assert _metadata_over_tls(mtls_broker.ssl_port, good)[:4] == (7).to_bytes(4, "big")
    log = mtls_broker.log()
    assert "TLS handshake with /127.0.0.1:" in log and "failed" in log


def test_client_certificate_names_the_principal(mtls_broker: TlsBroker, pki: Pki):
    from confluent_kafka import Producer
    for cert, key in ((pki.client_cert, pki.client_key), (pki.other_cert, pki.other_key)):
        p = Producer({"bootstrap.servers": mtls_broker.ssl_bootstrap, "security.protocol": "SSL",
                      "ssl.ca.location": str(pki.ca), "ssl.certificate.location": str(cert),
                      "ssl.key.location": str(key)})
        p.produce("mtls-principal", b"x")
        assert p.flush(30) == 0
    log = mtls_broker.log()
    # DEFAULT: the whole RFC 2253 subject; the rule: CN=reader,OU=Ops,... -> reader-ops
    assert "is User:CN=writeuser,OU=Unknown,O=Unknown,L=Unknown,ST=Unknown,C=Unknown" in log
    assert "is User:reader-ops" in log


def test_kcat_with_a_client_certificate(mtls_broker: TlsBroker, pki: Pki):
    base = ["-b", mtls_broker.ssl_bootstrap, "-X", "security.protocol=SSL", "-X", f"ssl.ca.location={pki.ca}"]
    ok = _kcat(*base, "-X", f"ssl.certificate.location={pki.client_cert}", "-X",
               f"ssl.key.location={pki.client_key}", "-L", "-m", "10")
    assert ok.returncode == 0, ok.stderr
    refused = _kcat(*base, "-L", "-m", "3")
    assert refused.returncode != 0


# -- bad input fails alone -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def edgy_broker(pki: Pki, tmp_path_factory: pytest.TempPathFactory):
    """connections.max.idle.ms=1500: a stalled handshake is closed within 1.5 s."""
    yield from run_broker(TlsBroker(tmp_path_factory.mktemp("edgy"), pki, {"connections.max.idle.ms": "1500"}))


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    sock.settimeout(seconds)
    try:
        while True:
            if not sock.recv(4096):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def test_plaintext_to_a_tls_port_fails_alone(edgy_broker: TlsBroker, pki: Pki):
    with socket.create_connection(("127.0.0.1", edgy_broker.ssl_port)) as s:
        s.sendall(bytes.fromhex("0000000e" "0012" "0000" "00000007" "0004") + b"test")  # ApiVersions, no TLS
        assert _closed_within(s, 5)
    assert _metadata_over_tls(edgy_broker.ssl_port, client_ssl_context(pki))[:4] == (7).to_bytes(4, "big")
    assert "TLS handshake with /127.0.0.1:" in edgy_broker.log()


def test_tls_to_a_plaintext_port_fails_alone(edgy_broker: TlsBroker, pki: Pki):
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        _metadata_over_tls(edgy_broker.port, client_ssl_context(pki))
    assert "a TLS handshake from /127.0.0.1:" in edgy_broker.log()
    assert "reached the PLAINTEXT listener PLAINTEXT" in edgy_broker.log()
    with socket.create_connection(("127.0.0.1", edgy_broker.port)) as s:  # plaintext still answered
        s.sendall(bytes.fromhex("0000000e" "0012" "0000" "00000007" "0004") + b"test")
        assert _recv_exact(s, 8)[4:8] == (7).to_bytes(4, "big")


def test_a_stalled_handshake_is_closed_and_others_are_served(edgy_broker: TlsBroker, pki: Pki):
    stalled = [socket.create_connection(("127.0.0.1", edgy_broker.ssl_port)) for _ in range(3)]
    half = stalled[0]
    half.sendall(bytes.fromhex("160301"))  # the start of a record header, and then nothing
    started = time.monotonic()
    # meanwhile a real client is served at once
    assert _metadata_over_tls(edgy_broker.ssl_port, client_ssl_context(pki))[:4] == (7).to_bytes(4, "big")
    for s in stalled:
        assert _closed_within(s, 6), "a stalled handshake was left open"
        s.close()
    assert time.monotonic() - started < 6
    assert "did not finish in time" in edgy_broker.log()


# -- key material and contexts -------------------------------------------------------------------


def _listener(settings: dict[str, str], name: str = "SSL"):
    from kbroker.config.broker import build_config
    from kbroker.security.listeners import ListenerConfig
    return ListenerConfig(build_config({k: (v, "test") for k, v in settings.items()}), name)


def _handshake(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext) -> ssl.SSLObject:
    """Drive both ends in memory; returns the server's SSLObject after the handshake."""
    s_in, s_out, c_in, c_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    server = server_ctx.wrap_bio(s_in, s_out, server_side=True)
    client = client_ctx.wrap_bio(c_in, c_out, server_hostname="localhost")
    done = [False, False]
    for _ in range(20):
        for i, end in enumerate((client, server)):
            if not done[i]:
                try:
                    end.do_handshake()
                    done[i] = True
                except ssl.SSLWantReadError:
                    pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if all(done):
            return server
    raise AssertionError("no handshake")


def test_inline_pem_keystore_and_truststore_and_an_encrypted_key(pki: Pki):
    from kbroker.security.tls import server_context
    inline = _listener({"ssl.keystore.type": "PEM", "ssl.keystore.key": pki.broker_key.read_text(),
                        "ssl.keystore.certificate.chain": pki.broker_cert.read_text(),
                        "ssl.truststore.type": "PEM", "ssl.truststore.certificates": pki.ca.read_text(),
                        "ssl.client.auth": "required"})
    server = _handshake(server_context(inline), client_ssl_context(pki, pki.client_cert, pki.client_key))
    assert server.getpeercert(binary_form=True)  # the client's certificate was asked for and checked
    encrypted = _listener({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.broker_encrypted),
                           "ssl.key.password": "key-secret"})
    _handshake(server_context(encrypted), client_ssl_context(pki))
    from kbroker.security.tls import TlsConfigError
    wrong = _listener({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.broker_encrypted),
                       "ssl.key.password": "not-the-secret"})
    with pytest.raises(TlsConfigError) as found:
        server_context(wrong)
    assert "not-the-secret" not in str(found.value) and "PRIVATE KEY" not in str(found.value)
    assert not list(Path(tempfile.gettempdir()).glob("kbroker-keystore-*"))  # the inline key's file is gone


def test_client_auth_is_ignored_on_sasl_ssl_unless_set_for_the_listener():
    from kbroker.security.tls import client_auth
    broker_wide = _listener({"ssl.client.auth": "required"}, "SASL_SSL")
    assert client_auth(broker_wide, "SASL_SSL") == "none"
    assert client_auth(broker_wide, "SSL") == "required"
    prefixed = _listener({"listener.name.sasl_ssl.ssl.client.auth": "requested"}, "SASL_SSL")
    assert client_auth(prefixed, "SASL_SSL") == "requested"


def test_inter_broker_client_context_checks_the_host_name_unless_told_not_to(pki: Pki):
    from kbroker.security.tls import client_context, server_context
    server = _listener({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.broker)})
    checking = client_context(_listener({"ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca)}))
    assert checking.check_hostname and checking.context.check_hostname
    _handshake(server_context(server), checking.context)  # SAN localhost
    relaxed = client_context(_listener({"ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca),
                                        "ssl.endpoint.identification.algorithm": ""}))
    assert not relaxed.check_hostname and relaxed.context.verify_mode == ssl.CERT_REQUIRED


def test_client_auth_requested_takes_a_certificate_when_given(pki: Pki):
    from kbroker.security.tls import server_context
    requested = _listener({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.broker),
                           "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca),
                           "ssl.client.auth": "requested"})
    ctx = server_context(requested)
    assert _handshake(ctx, client_ssl_context(pki)).getpeercert(binary_form=True) is None  # ANONYMOUS
    with_cert = _handshake(ctx, client_ssl_context(pki, pki.client_cert, pki.client_key))
    der = with_cert.getpeercert(binary_form=True)
    assert der is not None
    assert str(PrincipalMapper("DEFAULT").principal(der)) == \
        "User:CN=writeuser,OU=Unknown,O=Unknown,L=Unknown,ST=Unknown,C=Unknown"
    assert str(PrincipalMapper("DEFAULT").principal(None)) == "User:ANONYMOUS"


def test_enabled_protocols_and_cipher_suites_are_applied(pki: Pki):
    from kbroker.security.tls import TlsConfigError, server_context
    base = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.broker)}
    tls12 = server_context(_listener({**base, "ssl.enabled.protocols": "TLSv1.2",
                                      "ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"}))
    server = _handshake(tls12, client_ssl_context(pki))
    assert server.version() == "TLSv1.2"
    assert server.cipher()[0] == "ECDHE-ECDSA-AES128-GCM-SHA256"
    assert _handshake(server_context(_listener(base)), client_ssl_context(pki)).version() == "TLSv1.3"
    with pytest.raises(TlsConfigError):
        server_context(_listener({**base, "ssl.enabled.protocols": "SSLv3"}))
