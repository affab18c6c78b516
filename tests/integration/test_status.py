"""The HTTP status endpoint of a real broker: brokers, partitions with offsets, group lag, health,
refusals of what it does not serve, and the HTTP its server (aiohttp) speaks: keep-alive, 405 with Allow, 400 for
a request it cannot parse, slow clients that hold up neither the broker nor its shutdown."""
from __future__ import annotations

import http.client
import json
import re
import socket
import time
import urllib.error
import urllib.request

from confluent_kafka import Consumer, Producer, TopicPartition

from kbroker.metrics import CONTENT_TYPE

from .conftest import free_port
from .helpers import create_topic


def _get(port: int, path: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_status_endpoint(broker_factory):
    port = free_port()
    broker = broker_factory({"status.listener": f"http://127.0.0.1:{port}"})
    create_topic(broker.bootstrap, "watched", 2)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(10):
        producer.produce("watched", value=b"%d" % i, partition=i % 2)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "watchers", "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition("watched", 0, 2), TopicPartition("watched", 1, 5)], asynchronous=False)
    consumer.close()

    code, status = _get(port, "/status")
    assert code == 200 and status["broker_id"] == 0 and status["controller_id"] == 0
    assert status["brokers"] == [{"id": 0, "host": "127.0.0.1", "port": broker.port, "rack": None}]
    parts = {(p["topic"], p["partition"]): p for p in status["partitions"]}
    assert parts[("watched", 0)]["log_end_offset"] == 5 == parts[("watched", 0)]["high_watermark"]
    assert parts[("watched", 1)]["role"] == "leader" and parts[("watched", 1)]["isr"] == [0]
    group = next(g for g in status["groups"] if g["group"] == "watchers")
    lags = {(o["topic"], o["partition"]): (o["offset"], o["lag"]) for o in group["offsets"]}
    assert lags == {("watched", 0): (2, 3), ("watched", 1): (5, 0)}
    assert _get(port, "/health") == (200, {"under_replicated": 0})
    assert _get(port, "/topics")[1]["partitions"] == status["partitions"]
    assert _get(port, "/nothing")[0] == 404

    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:  # not GET, then garbage
        s.sendall(b"POST /status HTTP/1.1\r\nHost: x\r\n\r\n")
        assert s.recv(100).startswith(b"HTTP/1.1 405 ")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"\x00\x01garbage\r\n\r\n")  # no version to answer in: aiohttp says HTTP/1.0
        assert re.match(rb"HTTP/1\.[01] 400 ", s.recv(100))
    time.sleep(0.2)
    assert _get(port, "/health")[0] == 200  # still serving


def test_a_bad_status_listener_is_refused_at_start(tmp_path):
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-m", "kbroker.cli", "serve", "--override", "status.listener=ftp://x:1",
                          "--override", f"log.dirs={tmp_path}"], capture_output=True, text=True, timeout=30)
    assert out.returncode != 0 and "status.listener" in out.stderr


def test_keep_alive_refused_methods_and_a_malformed_request(broker_factory):
    broker = broker_factory({"status.listener": "http://127.0.0.1:0"})  # port 0: the log names the one bound
    port = int(re.search(r"status endpoint on http://127\.0\.0\.1:(\d+)/status", broker.log()).group(1))
    assert port != 0
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/health")
    first = conn.getresponse()
    assert (first.status, json.loads(first.read())) == (200, {"under_replicated": 0})
    sock = conn.sock
    conn.request("GET", "/metrics")
    second = conn.getresponse()
    assert second.status == 200 and second.getheader("Content-Type") == CONTENT_TYPE
    assert b"\nkafka_server_replicamanager_underreplicatedpartitions 0" in second.read()
    assert conn.sock is sock and sock is not None  # the second answer came on the first connection

    for method in ("HEAD", "POST"):  # GET only, on that same connection
        conn.request(method, "/status")
        refused = conn.getresponse()
        body = refused.read()
        assert (refused.status, refused.getheader("Allow")) == (405, "GET")
        assert refused.getheader("Content-Type") == "application/json"
        if method == "POST":
            assert json.loads(body) == {"error": "POST is not served; use GET"}
    assert conn.sock is sock
    conn.close()

    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:  # a header line without its colon
        s.sendall(b"GET /status HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n")
        answer = b""
        while chunk := s.recv(4096):  # the server closes the connection after a 400
            answer += chunk
    assert re.match(rb"HTTP/1\.[01] 400 Bad Request\r\n", answer) and b"Invalid header token" in answer
    assert _get(port, "/health")[0] == 200  # still serving; the harness checks the log holds no ERROR for it
    assert "GET /health" not in broker.log()  # no access log line per request


def test_slow_clients_hold_up_neither_the_broker_nor_its_shutdown(broker_factory, monkeypatch):
    # development mode: asyncio reports unclosed transports and never-retrieved tasks, Python unclosed sockets
    monkeypatch.setenv("PYTHONDEVMODE", "1")
    port = free_port()
    broker = broker_factory({"status.listener": f"http://127.0.0.1:{port}"})
    with socket.create_connection(("127.0.0.1", port), timeout=60) as half, \
            socket.create_connection(("127.0.0.1", port), timeout=60) as silent:
        half.sendall(b"GET /status HTTP/1.1\r\nHost: x\r\n")  # the blank line never comes
        assert _get(port, "/health") == (200, {"under_replicated": 0})  # others are served meanwhile
        assert half.recv(100) == b""  # closed unanswered once idle for IDLE_TIMEOUT_S
        broker.restart()  # SIGTERM with the silent connection open: a clean exit (exit 0) ...
        assert silent.recv(100) == b""
    first_run = broker.log().split("===== start #2")[0]
    assert "stopped cleanly" in first_run
    for sign in ("ResourceWarning", "nclosed", "was destroyed but it is pending", "never retrieved"):
        assert sign not in first_run  # ... with nothing left open or pending
