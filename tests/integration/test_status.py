"""The HTTP status endpoint of a real broker: brokers, partitions with offsets, group lag, health,
and refusals of what it does not serve."""
from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request

from confluent_kafka import Consumer, Producer, TopicPartition

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
        s.sendall(b"\x00\x01garbage\r\n\r\n")
        assert s.recv(100).startswith(b"HTTP/1.1 400 ")
    time.sleep(0.2)
    assert _get(port, "/health")[0] == 200  # still serving


def test_a_bad_status_listener_is_refused_at_start(tmp_path):
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-m", "kbroker.cli", "serve", "--override", "status.listener=ftp://x:1",
                          "--override", f"log.dirs={tmp_path}"], capture_output=True, text=True, timeout=30)
    assert out.returncode != 0 and "status.listener" in out.stderr
