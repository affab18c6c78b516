"""ACLs in a 2-broker cluster on a real ZooKeeper: an ACL created through one broker is enforced by
the other (both follow the change notices: a ZooKeeper watch, not a poll; the time it took is
printed), the znodes are Kafka's bytes field by field, a corrupt ACL znode is skipped while the
brokers keep serving, and replication between the brokers (inter-broker requests under the
authorizer) keeps working."""
from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from kazoo_bridge.local_server import ZooKeeperServer
from kbroker.protocol import API_KEYS
from kbroker.tools.client import Connection
from tests.cluster.conftest import Cluster, wait_until
from tests.integration.conftest import broker_errors

OVERRIDES = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
             "allow.everyone.if.no.acl.found": "true"}


@pytest.fixture(scope="module")
def acl_cluster(zookeeper_server: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(zookeeper_server, tmp_path_factory.mktemp("acl-cluster"), size=2, overrides=OVERRIDES)
    try:
        c.start()
        yield c
        for broker in c.brokers.values():  # the corrupt-znode test's ERROR is the only one allowed
            found = [line for line in broker_errors(broker.log()) if "/kafka-acl/Topic/broken" not in line]
            assert not found, f"broker errors: {found[:5]}"
    finally:
        c.stop()


def metadata_error(conn: Connection, topic: str) -> int:
    response = conn.send(API_KEYS["Metadata"], {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
    (t,) = response.topics
    return t.error_code


# ACL requests are sent over raw connections, each to the broker the test names: librdkafka's admin
# client sends CreateAcls and DeleteAcls to the controller (rd_kafka_admin_request_op_new in
# confluentinc/librdkafka src/rdkafka_admin.c: "Default to controller"), so AdminClient bootstrapped
# on broker 2 still deletes through broker 1 when broker 1 is the controller
DENY_DESCRIBE = {"resource_type": 2, "resource_name": "acl-shared", "resource_pattern_type": 3,  # TOPIC, LITERAL
                 "principal": "User:*", "host": "*", "operation": 8, "permission_type": 2}  # DESCRIBE, DENY
ANY_ON_SHARED = {"resource_type_filter": 2, "resource_name_filter": "acl-shared", "pattern_type_filter": 3,
                 "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}  # ANY, ANY


def test_acl_through_one_broker_holds_on_the_other(acl_cluster):
    one, two = acl_cluster.brokers[1], acl_cluster.brokers[2]
    admin_one = AdminClient({"bootstrap.servers": one.bootstrap})
    for f in admin_one.create_topics([NewTopic("acl-shared", 2, 2)]).values():
        f.result(20)
    conn_one = Connection(one.host, one.port)
    conn_two = Connection(two.host, two.port)
    try:
        wait_until(lambda: metadata_error(conn_two, "acl-shared") == 0, message="topic on broker 2")
        created = conn_one.send(API_KEYS["CreateAcls"], {"creations": [DENY_DESCRIBE]})
        assert [r.error_code for r in created.results] == [0]
        started = time.monotonic()
        # how soon is this machine's speed, not a promise: printed, and only a hang fails
        wait_until(lambda: metadata_error(conn_two, "acl-shared") == 29, timeout=15.0, interval=0.01,
                   message="broker 2 enforcing the ACL created through broker 1")
        elapsed = time.monotonic() - started
        print(f"broker 2 enforced the ACL {elapsed * 1000:.0f} ms after broker 1 answered CreateAcls")
        # and back: deleted through broker 2, broker 1 lets it through again
        deleted = conn_two.send(API_KEYS["DeleteAcls"], {"filters": [ANY_ON_SHARED]})
        ((code, matching),) = [(r.error_code, r.matching_acls) for r in deleted.filter_results]
        assert code == 0 and len(matching) == 1
        # the writing broker's cache holds the change before it answers (AclAuthorizer.updateResourceAcls
        # in apache/kafka core/src/main/scala/kafka/security/authorizer/AclAuthorizer.scala updates it
        # right after the ZooKeeper write); the other follows the change notice a moment later
        assert metadata_error(conn_two, "acl-shared") == 0
        wait_until(lambda: metadata_error(conn_one, "acl-shared") == 0, timeout=15.0, interval=0.01,
                   message="broker 1 dropping the ACL deleted through broker 2")
    finally:
        conn_one.close()
        conn_two.close()
    # both brokers answer without the ACL now: a producer answered TOPIC_AUTHORIZATION_FAILED by either
    # fails its queued records at once (a permanent topic error: rd_kafka_topic_assign_uas in
    # confluentinc/librdkafka src/rdkafka_topic.c). Replication under the authorizer: acks=all through both
    p = Producer({"bootstrap.servers": acl_cluster.bootstrap, "acks": "all", "message.timeout.ms": 15000})
    results: list = []
    for i in range(10):
        p.produce("acl-shared", f"v{i}".encode(), on_delivery=lambda err, msg: results.append(err))
    p.flush(20)
    assert results == [None] * 10


def test_znodes_field_by_field(acl_cluster):
    store = acl_cluster.store
    admin = AdminClient({"bootstrap.servers": acl_cluster.brokers[2].bootstrap})
    bindings = [
        AclBinding(ResourceType.GROUP, "team-a", ResourcePatternType.LITERAL, "User:alice", "10.1.2.3",
                   AclOperation.READ, AclPermissionType.ALLOW),
        AclBinding(ResourceType.TOPIC, "logs-", ResourcePatternType.PREFIXED, "User:bob", "*",
                   AclOperation.WRITE, AclPermissionType.DENY),
        AclBinding(ResourceType.TRANSACTIONAL_ID, "tx", ResourcePatternType.LITERAL, "User:carol", "*",
                   AclOperation.DESCRIBE, AclPermissionType.ALLOW),
    ]
    before_literal = set(store.get_children("/kafka-acl-changes"))
    before_extended = set(store.get_children("/kafka-acl-extended-changes"))
    for f in admin.create_acls(bindings).values():
        f.result(15)
    data, _ = store.get("/kafka-acl/Group/team-a")
    assert data == (b'{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",'
                    b'"operation":"Read","host":"10.1.2.3"}]}')
    obj = json.loads(store.get("/kafka-acl-extended/prefixed/Topic/logs-")[0])
    assert list(obj) == ["version", "acls"] and obj["version"] == 1
    (entry,) = obj["acls"]
    assert list(entry) == ["principal", "permissionType", "operation", "host"]
    assert entry == {"principal": "User:bob", "permissionType": "Deny", "operation": "Write", "host": "*"}
    assert json.loads(store.get("/kafka-acl/TransactionalId/tx")[0])["acls"][0]["operation"] == "Describe"
    new_literal = sorted(set(store.get_children("/kafka-acl-changes")) - before_literal)
    new_extended = sorted(set(store.get_children("/kafka-acl-extended-changes")) - before_extended)
    assert all(n.startswith("acl_changes_") and len(n) == len("acl_changes_") + 10 for n in new_literal + new_extended)
    texts = {store.get(f"/kafka-acl-changes/{n}")[0] for n in new_literal}
    assert texts == {b"GROUP:team-a", b"TRANSACTIONAL_ID:tx"}
    (extended,) = new_extended
    assert store.get(f"/kafka-acl-extended-changes/{extended}")[0] == \
        b'{"version":1,"resourceType":"TOPIC","name":"logs-","patternType":"PREFIXED"}'
    # what ZooKeeper has is what every broker answers
    conn = Connection(acl_cluster.brokers[1].host, acl_cluster.brokers[1].port)
    try:
        response = conn.send(API_KEYS["DescribeAcls"], {
            "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
            "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1})
        found = {(r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host, a.operation, a.permission_type)
                 for r in response.resources for a in r.acls}
        assert {(3, "team-a", 3, "User:alice", "10.1.2.3", 3, 3), (2, "logs-", 4, "User:bob", "*", 4, 2),
                (5, "tx", 3, "User:carol", "*", 8, 3)} <= found
    finally:
        conn.close()


def test_corrupt_acl_znode_is_skipped(acl_cluster):
    """Written behind the brokers' backs, then announced: an ERROR line, and both keep serving."""
    store = acl_cluster.store
    store.create("/kafka-acl/Topic/broken", b'{"version":1,"acls":"nope"}')
    store.create("/kafka-acl-changes/acl_changes_", b"TOPIC:broken", sequence=True)
    for broker in acl_cluster.brokers.values():
        wait_until(lambda b=broker: "broken" in b.log() and "unreadable" in b.log(), timeout=5,
                   message="the corrupt znode reported")
    for broker in acl_cluster.brokers.values():
        conn = Connection(broker.host, broker.port)
        try:
            assert metadata_error(conn, "broken") in (0, 3)  # no ACL counted: allow.everyone.if.no.acl.found
        finally:
            conn.close()
    store.delete("/kafka-acl/Topic/broken")
