"""A client configured for a Kafka 2.8 broker (kafka-python 3 ``api_version=(2, 8)``) sends
AlterReplicaLogDirs (34) and DescribeLogDirs (35) at v2, the flexible version a 2.8 broker serves,
without asking ApiVersions first. The broker used to close the connection on AlterReplicaLogDirs
v2 and the admin call failed with "socket disconnected"."""
from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import BrokerProcess, _make_broker
from tests.integration.helpers import create_topic


@pytest.fixture
def jbod(tmp_path: Path) -> Iterator[BrokerProcess]:
    yield from _make_broker(tmp_path, {"log.dirs": f"{tmp_path / 'a'},{tmp_path / 'b'}", "num.partitions": "1"})


def _where(admin, topic: str) -> list[tuple[str, int, bool]]:
    dirs = admin.describe_log_dirs({topic: [0]})
    return [(d["log_dir"], p["partition_index"], p["is_future_key"])
            for b in dirs for d in b["log_dirs"] for t in d["topics"] for p in t["partitions"]]


def test_kafka_python_28_moves_and_describes_at_v2(jbod: BrokerProcess):
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient
    from kafka.errors import LogDirNotFoundError, NoError

    create_topic(jbod.bootstrap, "kp28")
    producer = KafkaProducer(bootstrap_servers=jbod.bootstrap, acks="all")
    for i in range(50):
        producer.send("kp28", b"v%d" % i)
    producer.flush(30)
    producer.close()
    admin = KafkaAdminClient(bootstrap_servers=jbod.bootstrap, api_version=(2, 8))
    try:
        before = _where(admin, "kp28")
        assert len(before) == 1 and before[0][1:] == (0, False)
        source = before[0][0]
        target = str(Path(jbod.overrides["log.dirs"].split(",")[0 if source.endswith("/b") else 1]).resolve())
        assert target != source
        answer = admin.alter_replica_log_dirs({("kp28", 0, 0): target, ("kp28", 1, 0): "/nowhere"})
        assert {tuple(r): e for r, e in answer.items()} == {("kp28", 0, 0): NoError,
                                                          ("kp28", 1, 0): LogDirNotFoundError}
        deadline = time.monotonic() + 60
        while _where(admin, "kp28") != [(target, 0, False)]:
            assert time.monotonic() < deadline, _where(admin, "kp28")
            time.sleep(0.1)
    finally:
        admin.close()
