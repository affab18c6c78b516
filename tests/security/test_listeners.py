"""Listeners as Kafka configures them: the config checks (kbroker refuses to start with Kafka's
reasons), several listeners on one broker answering Metadata and FindCoordinator with each
listener's own endpoints, and the ``/brokers/ids/<id>`` registration written as Kafka writes it."""
from __future__ import annotations

import json
import socket
import ssl
import subprocess
import sys
import time

import pytest

from kbroker.config.broker import build_config
from kbroker.config.errors import ConfigError
from kbroker.metadata.zk_view import LiveBroker
from kbroker.protocol import decode_response, encode_request
from kbroker.security.listeners import parse_listeners
from tests.integration.conftest import REPO, BrokerProcess, free_port

from .conftest import run_broker, tls_settings
from .pki import Pki

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _config(**values: str):
    return build_config({k.replace("_", "."): (v, "test") for k, v in values.items()})


def _cfg(settings: dict[str, str]):
    return build_config({k: (v, "test") for k, v in settings.items()})


# -- config checks ---------------------------------------------------------------------------


@pytest.mark.parametrize("settings, message", [
    ({"listeners": "PLAINTEXT://:9092,INTERNAL://:9093"}, "listener INTERNAL has no security protocol"),
    ({"listeners": "PLAINTEXT://:9092", "listener.security.protocol.map": "PLAINTEXT:TLS"},
     "unknown security protocol 'TLS'"),
    ({"listeners": "PLAINTEXT://:9092,PLAINTEXT://:9093"}, "different name"),
    ({"listeners": "PLAINTEXT://:9092,SSL://:9092"}, "different port"),
    ({"listeners": "PLAINTEXT://:9092", "advertised.listeners": "EXTERNAL://h:1",
      "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,EXTERNAL:PLAINTEXT"}, "not in listeners"),
    ({"listeners": "PLAINTEXT://:9092", "inter.broker.listener.name": "PLAINTEXT",
      "security.inter.broker.protocol": "PLAINTEXT"}, "only one of inter.broker.listener.name"),
    ({"listeners": "SSL://:9093", "ssl.keystore.type": "PEM", "ssl.keystore.location": "/x",
      "zookeeper.connect": "127.0.0.1:2181"}, "the inter-broker listener PLAINTEXT must be one of"),
    ({"listeners": "SSL://:9093"}, "only PEM keystores are supported (JKS/PKCS12 need Java); convert with openssl"),
    ({"listeners": "SSL://:9093", "ssl.keystore.type": "PEM"}, "a TLS listener needs a keystore"),
    ({"listeners": "SSL://:9093", "ssl.keystore.type": "PEM", "ssl.keystore.location": "/x",
      "ssl.truststore.location": "/t"}, "only PEM truststores"),
])
def test_listener_configs_kafka_refuses_are_refused(settings, message):
    with pytest.raises(ConfigError) as found:
        parse_listeners(_cfg(settings))
    assert message in str(found.value)


def test_per_listener_keys_win_and_names_are_normalised():
    parsed = parse_listeners(_cfg({
        "listeners": "plaintext://127.0.0.1:9092,external://:9094",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,EXTERNAL:SSL",
        "advertised.listeners": "PLAINTEXT://10.0.0.1:9092,EXTERNAL://broker.example:9094",
        "inter.broker.listener.name": "PLAINTEXT", "zookeeper.connect": "127.0.0.1:2181",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": "/generic.pem",
        "listener.name.external.ssl.keystore.location": "/external.pem",
        "listener.name.external.ssl.client.auth": "required"}))
    assert [(s.name, s.protocol, s.advertised.host, s.advertised.port) for s in parsed.specs] == [
        ("PLAINTEXT", "PLAINTEXT", "10.0.0.1", 9092), ("EXTERNAL", "SSL", "broker.example", 9094)]
    assert parsed.inter_broker == "PLAINTEXT"
    external = parsed.settings["EXTERNAL"]
    assert external.get("ssl.keystore.location") == "/external.pem"
    assert parsed.settings["PLAINTEXT"].get("ssl.keystore.location") == "/generic.pem"
    assert external.get("ssl.client.auth") == "required"
    assert parsed.settings["PLAINTEXT"].get("ssl.client.auth") == "none"  # the declared default
    # security.inter.broker.protocol=SSL names the listener called SSL
    parsed = parse_listeners(_cfg({"listeners": "PLAINTEXT://:9092,SSL://:9093", "ssl.keystore.type": "PEM",
                                   "ssl.keystore.location": "/k", "security.inter.broker.protocol": "SSL",
                                   "zookeeper.connect": "127.0.0.1:2181"}))
    assert (parsed.inter_broker, parsed.inter_broker_protocol) == ("SSL", "SSL")


def test_a_bad_listener_config_stops_kbroker_serve_with_the_reason(tmp_path):
    run = subprocess.run([sys.executable, "-m", "kbroker.cli", "serve", "--override", "listeners=SSL://127.0.0.1:0",
                          "--override", f"log.dirs={tmp_path}"], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert run.returncode == 2
    assert "only PEM keystores are supported" in run.stderr


def test_unreadable_key_material_is_a_config_error_without_secrets(tmp_path, pki: Pki):
    run = subprocess.run([sys.executable, "-m", "kbroker.cli", "serve", "--override", "listeners=SSL://127.0.0.1:0",
                          "--override", f"log.dirs={tmp_path}", "--override", "ssl.keystore.type=PEM",
                          "--override", f"ssl.keystore.location={pki.broker_encrypted}",
                          "--override", "ssl.key.password=wrong-password-123"],
                         capture_output=True, text=True, cwd=REPO, timeout=60)
    assert run.returncode == 2, run.stderr
    assert "keystore could not be loaded" in run.stderr
    assert "wrong-password-123" not in run.stderr + run.stdout


def test_live_broker_answers_per_listener():
    b = LiveBroker(1, "10.0.0.1", 9092, None, 5, (("INTERNAL", "10.0.0.1", 9092, "PLAINTEXT"),
                                                  ("EXTERNAL", "ext.example", 9094, "SSL")))
    assert b.on("INTERNAL") is b
    ext = b.on("EXTERNAL")
    assert ext is not None and (ext.id, ext.host, ext.port, ext.epoch) == (1, "ext.example", 9094, 5)
    assert b.on("OTHER") is None


# -- several listeners on one broker -------------------------------------------------------------


def _metadata_brokers(bootstrap: str, extra: dict) -> list[tuple[int, str, int]]:
    from confluent_kafka.admin import AdminClient
    md = AdminClient({"bootstrap.servers": bootstrap, **extra}).list_topics(timeout=20)
    return sorted((b.id, b.host, b.port) for b in md.brokers.values())


def _coordinator(port: int, ctx: ssl.SSLContext | None = None) -> tuple[str, int]:
    """FindCoordinator v1 for a group on the listener at ``port`` (TLS with ``ctx``): (host, port)."""
    deadline = time.monotonic() + 30
    while True:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            sock = ctx.wrap_socket(raw, server_hostname="localhost") if ctx is not None else raw
            sock.sendall(bytes(encode_request(10, 1, 3, "t", {"key": "g-listeners", "key_type": 0})))
            size = int.from_bytes(_recv(sock, 4), "big")
            _, body = decode_response(10, 1, _recv(sock, size))
        if body.error_code == 0:
            return body.host, body.port
        assert time.monotonic() < deadline, f"FindCoordinator kept answering {body.error_code}"
        time.sleep(0.2)


def _recv(sock, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, "closed"
        data += chunk
    return data


def test_each_listener_answers_its_own_endpoints(pki: Pki, tmp_path):
    proc = BrokerProcess(tmp_path)
    ssl_port, internal_port = free_port(), free_port()
    proc.overrides = {
        "listeners": f"PLAINTEXT://127.0.0.1:{proc.port},SSL://127.0.0.1:{ssl_port},"
                     f"INTERNAL://127.0.0.1:{internal_port}",
        # the INTERNAL listener is advertised as "localhost": clients of it are told that name
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{proc.port},SSL://127.0.0.1:{ssl_port},"
                                f"INTERNAL://localhost:{internal_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,INTERNAL:PLAINTEXT",
        **tls_settings(pki)}
    for running in run_broker(proc):
        ssl_conf = {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca)}
        assert _metadata_brokers(f"127.0.0.1:{proc.port}", {}) == [(0, "127.0.0.1", proc.port)]
        assert _metadata_brokers(f"127.0.0.1:{ssl_port}", ssl_conf) == [(0, "127.0.0.1", ssl_port)]
        assert _metadata_brokers(f"127.0.0.1:{internal_port}", {}) == [(0, "localhost", internal_port)]
        assert _coordinator(internal_port) == ("localhost", internal_port)
        assert _coordinator(ssl_port, ssl.create_default_context(cafile=str(pki.ca))) == ("127.0.0.1", ssl_port)
        assert _coordinator(proc.port) == ("127.0.0.1", proc.port)
        assert running.running


# -- the registration ----------------------------------------------------------------------------


def test_registration_lists_every_endpoint_as_kafka_writes_it(zookeeper_server, pki: Pki, tmp_path):
    from tests.cluster.conftest import Cluster
    cluster = Cluster(zookeeper_server, tmp_path, size=1)
    proc = cluster.brokers[1]
    ssl_port, external_port = free_port(), free_port()
    proc.overrides.update({
        "listeners": f"INTERNAL://127.0.0.1:{proc.port},SSL://127.0.0.1:{ssl_port},"
                     f"EXTERNAL://127.0.0.1:{external_port}",
        "advertised.listeners": f"INTERNAL://127.0.0.1:{proc.port},SSL://localhost:{ssl_port},"
                                f"EXTERNAL://127.0.0.1:{external_port}",
        "listener.security.protocol.map": "INTERNAL:PLAINTEXT,SSL:SSL,EXTERNAL:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL", "broker.rack": "r1",
        **tls_settings(pki)})
    try:
        cluster.start()
        data, _ = cluster.store.get("/brokers/ids/1")
        reg = json.loads(data)
        assert reg["version"] == 5
        # host/port: the first PLAINTEXT endpoint (old clients read these)
        assert (reg["host"], reg["port"]) == ("127.0.0.1", proc.port)
        assert reg["endpoints"] == [f"INTERNAL://127.0.0.1:{proc.port}", f"SSL://localhost:{ssl_port}",
                                    f"EXTERNAL://127.0.0.1:{external_port}"]
        assert reg["listener_security_protocol_map"] == {"INTERNAL": "PLAINTEXT", "SSL": "SSL",
                                                         "EXTERNAL": "PLAINTEXT"}
        assert reg["jmx_port"] == -1 and reg["rack"] == "r1" and reg["features"] == {}
        assert isinstance(reg["timestamp"], str) and reg["timestamp"].isdigit()
        assert set(reg) == {"version", "host", "port", "endpoints", "listener_security_protocol_map", "jmx_port",
                            "timestamp", "features", "rack"}
        # Metadata over ZooKeeper mode answers per listener too
        ssl_conf = {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca)}
        assert _metadata_brokers(f"127.0.0.1:{ssl_port}", ssl_conf) == [(1, "localhost", ssl_port)]
        assert _metadata_brokers(f"127.0.0.1:{external_port}", {}) == [(1, "127.0.0.1", external_port)]
    finally:
        cluster.stop()


def test_without_a_plaintext_endpoint_host_is_null_and_port_minus_one(zookeeper_server, pki: Pki, tmp_path):
    from tests.cluster.conftest import Cluster
    cluster = Cluster(zookeeper_server, tmp_path, size=1)
    proc = cluster.brokers[1]
    proc.overrides.update({"listeners": f"SSL://127.0.0.1:{proc.port}", "security.inter.broker.protocol": "SSL",
                           "ssl.endpoint.identification.algorithm": "https", **tls_settings(pki)})
    try:
        cluster.start()
        reg = json.loads(cluster.store.get("/brokers/ids/1")[0])
        assert (reg["host"], reg["port"]) == (None, -1)
        assert reg["endpoints"] == [f"SSL://127.0.0.1:{proc.port}"]
        assert reg["listener_security_protocol_map"] == {"SSL": "SSL"}
    finally:
        cluster.stop()
