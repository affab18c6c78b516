"""A stalled ZooKeeper stalls only the requests that need it (issue 30). A ZooKeeper-mode broker process over a
ZooKeeper of this module's own (kazoo_bridge's local runner), SIGSTOPped for 3 s while one client auto-creates
topics with Metadata requests, a consumer's FindCoordinator has ``__consumer_offsets`` created, and a broker asks
the controller (AlterIsr) for a compare-and-set of a partition's state: those wait for ZooKeeper, and another
client's Produce and Fetch on an existing topic are answered meanwhile, as Kafka's network threads never wait on
ZooKeeper. After SIGCONT the topics exist and the others get their answers."""
from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from kazoo_bridge.local_server import ZooKeeperServer
from kbroker.log.batches import build_batch
from tests.cluster.conftest import Cluster, wait_until
from tests.raw_client import metadata, request
from zk_compat import layout

PAUSE_S = 3.0
ANSWERED_WITHIN_S = 1.0
NEW_TOPICS = 3


@pytest.fixture(scope="module")
def own_zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """Not the session's ZooKeeper: pausing that one would stall every other module's cluster."""
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper-stall"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def broker(own_zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(own_zookeeper, tmp_path_factory.mktemp("stall"), size=1,
                overrides={"auto.create.topics.enable": "true", "num.partitions": "1"})
    try:
        c.start()
        yield c
    finally:
        c.stop()


def _led(bootstrap: str, name: str) -> bool:
    answer = metadata(bootstrap, [name], version=9, auto_create=False).topics[0]
    return answer.error_code == 0 and [p.leader_id for p in answer.partitions] == [1]


def _produce(bootstrap: str, topic: str, value: bytes) -> Any:
    batch = build_batch([(None, value, int(time.time() * 1000))])
    body = {"transactional_id": None, "acks": 1, "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}
    return request(bootstrap, 0, 8, body, timeout=30).responses[0].partition_responses[0]


def _fetch(bootstrap: str, topic: str, offset: int) -> Any:
    body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                        "fetch_offset": offset, "log_start_offset": -1,
                                                        "partition_max_bytes": 1 << 20}]}]}
    return request(bootstrap, 1, 11, body, timeout=30).responses[0].partitions[0]


def test_produce_and_fetch_are_answered_while_zookeeper_stalls_an_auto_creation(broker, own_zookeeper):
    bootstrap = broker.brokers[1].bootstrap
    steady = f"steady-{uuid.uuid4().hex[:8]}"
    metadata(bootstrap, [steady], version=9, auto_create=True)
    wait_until(lambda: _led(bootstrap, steady), 30, f"{steady} led")
    first = _produce(bootstrap, steady, b"before")
    assert first.error_code == 0, first

    names = [f"fresh-{uuid.uuid4().hex[:8]}" for _ in range(NEW_TOPICS)]
    answers: dict[str, Any] = {}

    def auto_create(name: str) -> None:
        answers[name] = metadata(bootstrap, [name], version=9, auto_create=True).topics[0]

    # a compare-and-set on a stale zkVersion: written to ZooKeeper, refused there, nothing changed
    state, stat = layout.get_partition_state(broker.store, steady, 0) or pytest.fail("no state znode")
    epoch = broker.store.get("/brokers/ids/1")[1].czxid
    alter = {"broker_id": 1, "broker_epoch": epoch, "topics": [{"name": steady, "partitions": [
        {"partition_index": 0, "leader_epoch": state.leader_epoch + 1, "new_isr": [1],
         "current_isr_version": stat.version + 100}]}]}

    def alter_isr() -> None:
        answers["AlterIsr"] = request(bootstrap, 56, 0, alter, timeout=30)

    def find_coordinator() -> None:
        answers["FindCoordinator"] = request(bootstrap, 10, 2, {"key": "stalled-group", "key_type": 0}, timeout=30)

    creators = [threading.Thread(target=auto_create, args=(n,), daemon=True) for n in names]
    creators += [threading.Thread(target=t, daemon=True) for t in (alter_isr, find_coordinator)]
    others = ["AlterIsr", "FindCoordinator"]
    with own_zookeeper.paused():
        stopped_at = time.monotonic()
        for t in creators:
            t.start()
        time.sleep(0.3)  # the Metadata requests reach the broker and wait on ZooKeeper

        started = time.monotonic()
        produced = _produce(bootstrap, steady, b"during")
        produce_s = time.monotonic() - started
        started = time.monotonic()
        fetched = _fetch(bootstrap, steady, first.base_offset)
        fetch_s = time.monotonic() - started
        answered_at = time.monotonic() - stopped_at
        waiting = sorted(n for n in [*names, *others] if n not in answers)  # while ZooKeeper is still stopped
        time.sleep(max(PAUSE_S - (time.monotonic() - stopped_at), 0))

    assert produced.error_code == 0, produced
    assert produced.base_offset == first.base_offset + 1
    assert fetched.error_code == 0 and fetched.high_watermark == first.base_offset + 2, fetched
    assert produce_s < ANSWERED_WITHIN_S and fetch_s < ANSWERED_WITHIN_S, (produce_s, fetch_s)
    assert answered_at < PAUSE_S
    assert waiting == sorted([*names, *others]), "answered without ZooKeeper"

    for t in creators:
        t.join(30)
    assert sorted(answers) == sorted([*names, *others])
    found = answers.pop("FindCoordinator")  # created, its leaders not yet known: Kafka's answer
    assert found.error_code == 15, found  # COORDINATOR_NOT_AVAILABLE
    assert layout.get_topic_assignment(broker.store, "__consumer_offsets") is not None
    altered = answers.pop("AlterIsr")
    assert altered.error_code == 0, altered
    assert [p.error_code for t in altered.topics for p in t.partitions] == [95]  # INVALID_UPDATE_VERSION
    assert layout.get_partition_state(broker.store, steady, 0)[0] == state  # type: ignore[index]
    for name, answer in answers.items():  # Kafka 2.8: created, its leaders come later
        assert (answer.error_code, answer.partitions) == (5, []), (name, answer)
    for name in names:
        wait_until(lambda n=name: _led(bootstrap, n), 30, f"auto-created {name} led")  # type: ignore[misc]
