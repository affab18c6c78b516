"""Client quotas in ZooKeeper mode: AlterClientQuotas through one broker writes Kafka's znode and
change notice in a real ZooKeeper, and the other broker, following /config/changes, describes and
enforces the quota within seconds (and stops when it is removed there)."""
from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from kbroker.tools.client import Connection
from tests.cluster.conftest import Cluster, wait_until

ALTER, DESCRIBE, METADATA = 49, 48, 3


@pytest.fixture(scope="module")
def pair(zookeeper_server, tmp_path_factory) -> Iterator[Cluster]:
    c = Cluster(zookeeper_server, tmp_path_factory.mktemp("quota-cluster"), size=2)
    try:
        c.start()
        yield c
    finally:
        c.stop()


def alter(broker, client_id: str, key: str, value: float, remove: bool = False) -> None:
    conn = Connection(broker.host, broker.port)
    try:
        entry = conn.send(ALTER, {"entries": [{"entity": [{"entity_type": "client-id", "entity_name": client_id}],
                                               "ops": [{"key": key, "value": value, "remove": remove}]}],
                                  "validate_only": False}).entries[0]
        assert (entry.error_code, entry.error_message) == (0, None)
    finally:
        conn.close()


def throttled_metadata(broker, client_id: str) -> int:
    """throttle_time_ms of one Metadata request on a new connection with this client id."""
    conn = Connection(broker.host, broker.port, client_id=client_id, timeout=20)
    try:
        return conn.send(METADATA, {"topics": [], "allow_auto_topic_creation": False}, min_version=3).throttle_time_ms
    finally:
        conn.close()


def test_quota_written_in_one_broker_is_enforced_by_the_other(pair):
    one, two = pair.brokers[1], pair.brokers[2]
    assert throttled_metadata(two, "zk-client") == 0
    alter(one, "zk-client", "request_percentage", 0.0001)  # any handler time is far over it
    data, _ = pair.store.get("/config/clients/zk-client")
    assert data == b'{"version":1,"config":{"request_percentage":"1.0E-4"}}'
    last = sorted(pair.store.get_children("/config/changes"))[-1]
    assert json.loads(pair.store.get(f"/config/changes/{last}")[0]) == {"version": 2,
                                                                        "entity_path": "clients/zk-client"}

    conn = Connection(two.host, two.port)
    described = conn.send(DESCRIBE, {"components": [{"entity_type": "client-id", "match_type": 0,
                                                     "match": "zk-client"}], "strict": True})
    conn.close()
    assert [(v.key, v.value) for e in described.entries for v in e.values] == [("request_percentage", 0.0001)]
    # broker 2 heard the notice: the second request of a client over its quota is throttled
    wait_until(lambda: throttled_metadata(two, "zk-client") > 0 or throttled_metadata(two, "zk-client") > 0,
               timeout=20, message="broker 2 to throttle zk-client")
    assert throttled_metadata(two, "other-client") == 0

    alter(two, "zk-client", "request_percentage", 0.0, remove=True)
    assert json.loads(pair.store.get("/config/clients/zk-client")[0]) == {"version": 1, "config": {}}
    wait_until(lambda: throttled_metadata(one, "zk-client") == 0 and throttled_metadata(one, "zk-client") == 0,
               timeout=20, message="broker 1 to stop throttling zk-client")
