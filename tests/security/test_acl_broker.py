"""ACLs on real broker processes with real clients.

``open_broker`` is librdkafka's test harness setup (trivup): ``allow.everyone.if.no.acl.found=true``,
``super.users=User:admin``, clients on PLAINTEXT as User:ANONYMOUS. ``strict_broker`` refuses
whatever no ACL allows; its PLAINTEXT listener is the administrator (``super.users=User:ANONYMOUS``)
and alice signs in with SASL PLAIN on its SASL_PLAINTEXT listener."""
from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from kbroker.protocol import API_KEYS
from kbroker.tools.client import Connection
from tests.integration.conftest import BrokerProcess, run_broker

from .sasl_helpers import sasl_bootstrap, sasl_broker

ACL_CLASS = "kafka.security.authorizer.AclAuthorizer"
ALICE = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "alice",
         "sasl.password": "alice-secret"}
TOPIC_AUTH, GROUP_AUTH = KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED
# kafka-python 2.x/3.x loads its schemas with a deprecated importlib.resources call
pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning:kafka.protocol.schemas.load_json"),
              pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning")]


def _run(bp: BrokerProcess) -> Iterator[BrokerProcess]:
    yield from run_broker(bp)
    own = "\n".join(line for line in bp.log().splitlines() if not line.startswith("===== start"))  # not argv
    assert "alice-secret" not in own and "trust-secret" not in own


@pytest.fixture(scope="module")
def open_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    bp = BrokerProcess(tmp_path_factory.mktemp("acl-open"), {
        "authorizer.class.name": "kafka.security.auth.SimpleAclAuthorizer", "super.users": "User:admin",
        "allow.everyone.if.no.acl.found": "true", "ssl.truststore.password": "trust-secret"})
    yield from _run(bp)


@pytest.fixture(scope="module")
def strict_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    bp = sasl_broker(tmp_path_factory.mktemp("acl-strict"), {
        "authorizer.class.name": ACL_CLASS, "super.users": "User:ANONYMOUS"})
    yield from _run(bp)


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    a = admin(bootstrap)
    for f in a.create_topics([NewTopic(name, partitions, 1)]).values():
        f.result(15)


def add_acls(bootstrap: str, *bindings: AclBinding) -> None:
    a = admin(bootstrap)
    for f in a.create_acls(list(bindings)).values():
        assert f.result(15) is None


def binding(rtype, name: str, principal: str, op, permission=AclPermissionType.ALLOW,
            pattern=ResourcePatternType.LITERAL) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, "*", op, permission)


def produce(bootstrap: str, topic: str, n: int = 3, **extra) -> list:
    p = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 6000, **extra})
    results: list = []
    for i in range(n):
        try:
            p.produce(topic, f"m{i}".encode(), on_delivery=lambda err, msg: results.append(err))
        except Exception as exc:  # librdkafka refuses at once once it knows the topic is unauthorized
            results.append(exc)
    p.flush(15)
    return results


def consume(bootstrap: str, topic: str, group: str, seconds: float, want: int = 0, **extra) -> tuple[list, list]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, **extra})
    c.subscribe([topic])
    messages, errors = [], []
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline and not (want and len(messages) >= want) and not (errors and not want):
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                errors.append(m.error())
            else:
                messages.append(m.value())
    finally:
        c.close()
    return messages, errors


# -- librdkafka's scenarios on the open broker ----------------------------------------------------

def test_deny_all_fails_delivery(open_broker):
    """librdkafka 0115-producer_auth: DENY All for User:* on the topic."""
    create_topic(open_broker.bootstrap, "acl-denied")
    add_acls(open_broker.bootstrap, binding(ResourceType.TOPIC, "acl-denied", "User:*", AclOperation.ALL,
                                            AclPermissionType.DENY))
    results = produce(open_broker.bootstrap, "acl-denied")
    assert len(results) == 3 and all(r is not None and r.code() == TOPIC_AUTH for r in results), results
    assert produce(open_broker.bootstrap, "acl-free") == [None, None, None]  # no ACL: allow.everyone
    # librdkafka 0109-auto_create_topics: subscribing to it reports TOPIC_AUTHORIZATION_FAILED
    messages, errors = consume(open_broker.bootstrap, "acl-denied", "g-denied", 10)
    assert messages == [] and [e.code() for e in errors] == [TOPIC_AUTH]


def test_describe_without_read_fails_each_partition_once(open_broker):
    """librdkafka 0119-consumer_auth: ALLOW Describe + DENY Read for User:* on a 3-partition topic."""
    create_topic(open_broker.bootstrap, "acl-noread", 3)
    assert produce(open_broker.bootstrap, "acl-noread", 6) == [None] * 6
    add_acls(open_broker.bootstrap,
             binding(ResourceType.TOPIC, "acl-noread", "User:*", AclOperation.DESCRIBE),
             binding(ResourceType.TOPIC, "acl-noread", "User:*", AclOperation.READ, AclPermissionType.DENY))
    c = Consumer({"bootstrap.servers": open_broker.bootstrap, "group.id": "g-noread",
                  "auto.offset.reset": "earliest"})
    c.assign([TopicPartition("acl-noread", p, 0) for p in range(3)])
    per_partition: dict[int, int] = {}
    messages = 0
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is None:
            continue
        if m.error():
            assert m.error().code() == TOPIC_AUTH, m.error()
            per_partition[m.partition()] = per_partition.get(m.partition(), 0) + 1
        else:
            messages += 1
    c.close()
    assert messages == 0
    assert per_partition == {0: 1, 1: 1, 2: 1}
    # kafka-acls.sh --remove --force cleans up; reading works again
    r = subprocess.run([sys.executable, "-m", "kbroker.cli", "acls", "--bootstrap-server", open_broker.bootstrap,
                        "--remove", "--force", "--topic", "acl-noread"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    got, errors = consume(open_broker.bootstrap, "acl-noread", "g-noread2", 15, want=6)
    assert len(got) == 6 and not errors


def test_confluent_admin_acl_calls(open_broker):
    a = admin(open_broker.bootstrap)
    b1 = binding(ResourceType.GROUP, "grp-", "User:bob", AclOperation.READ, pattern=ResourcePatternType.PREFIXED)
    b2 = binding(ResourceType.TOPIC, "admin-t", "User:bob", AclOperation.WRITE, AclPermissionType.DENY)
    for f in a.create_acls([b1, b2]).values():
        assert f.result(15) is None
    any_filter = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:bob", None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    assert sorted(map(str, a.describe_acls(any_filter).result(15))) == sorted(map(str, [b1, b2]))
    match = AclBindingFilter(ResourceType.GROUP, "grp-one", ResourcePatternType.MATCH, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)
    assert a.describe_acls(match).result(15) == [b1]
    (deleted,) = a.delete_acls([any_filter]).values()
    assert sorted(map(str, deleted.result(15))) == sorted(map(str, [b1, b2]))
    assert a.describe_acls(any_filter).result(15) == []
    # an invalid binding: Kafka's INVALID_REQUEST
    bad = AclBinding(ResourceType.BROKER, "not-the-cluster", ResourcePatternType.LITERAL, "User:bob", "*",
                     AclOperation.ALTER, AclPermissionType.ALLOW)
    with pytest.raises(Exception, match="kafka-cluster"):
        for f in a.create_acls([bad]).values():
            f.result(15)


def test_kafka_python_admin_acl_calls(open_broker):
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePattern,
        ResourcePatternFilter,
        ResourceType as KResourceType,
    )
    client = KafkaAdminClient(bootstrap_servers=open_broker.bootstrap)
    try:
        acl = ACL(principal="User:carol", host="*", operation=ACLOperation.READ,
                  permission_type=ACLPermissionType.ALLOW,
                  resource_pattern=ResourcePattern(KResourceType.TOPIC, "kp-topic", ACLResourcePatternType.LITERAL))
        result = client.create_acls([acl])
        assert not result["failed"] and len(result["succeeded"]) == 1
        flt = ACLFilter(principal="User:carol", host="*", operation=ACLOperation.ANY,
                        permission_type=ACLPermissionType.ANY,
                        resource_pattern=ResourcePatternFilter(KResourceType.TOPIC, "kp-topic",
                                                               ACLResourcePatternType.LITERAL))
        found, error = client.describe_acls(flt)
        assert error.errno == 0 and [(a.principal, a.operation) for a in found] == [("User:carol", ACLOperation.READ)]
        deleted = client.delete_acls([flt])
        (_, matches, err), = deleted
        assert err.errno == 0 and len(matches) == 1
        found, _ = client.describe_acls(flt)
        assert found == []
    finally:
        client.close()


def test_sensitive_broker_configs_are_hidden(open_broker):
    res = ConfigResource(ConfigResource.Type.BROKER, "0")
    a = admin(open_broker.bootstrap)
    configs = a.describe_configs([res])[res].result(15)
    entry = configs["ssl.truststore.password"]
    assert entry.value is None and entry.is_sensitive
    assert configs["super.users"].value == "User:admin" and not configs["super.users"].is_sensitive


def test_without_authorizer_security_disabled(tmp_path):
    gen = _run(BrokerProcess(tmp_path))
    bp = next(gen)
    try:
        conn = Connection(bp.host, bp.port)
        try:
            response = conn.send(API_KEYS["DescribeAcls"], {
                "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1})
            assert response.error_code == 54 and response.resources == []
            response = conn.send(API_KEYS["CreateAcls"], {"creations": [
                {"resource_type": 2, "resource_name": "t", "resource_pattern_type": 3, "principal": "User:x",
                 "host": "*", "operation": 3, "permission_type": 3}]})
            assert [r.error_code for r in response.results] == [54]
        finally:
            conn.close()
        r = subprocess.run([sys.executable, "-m", "kbroker.cli", "acls", "--bootstrap-server", bp.bootstrap,
                            "--list"], capture_output=True, text=True, timeout=30)
        assert r.returncode == 1 and "SECURITY_DISABLED" in r.stderr
    finally:
        for _ in gen:
            pass


def test_unknown_authorizer_class_refuses_to_start(tmp_path):
    bp = BrokerProcess(tmp_path, {"authorizer.class.name": "com.example.MyAuthorizer"})
    with pytest.raises(AssertionError, match="exited with"):
        bp.start()
    assert "authorizer.class.name" in bp.log() and "com.example.MyAuthorizer" in bp.log()


# -- a strict broker: alice over SASL PLAIN --------------------------------------------------------

def kbroker_acls(bp: BrokerProcess, *args: str) -> str:
    r = subprocess.run([sys.executable, "-m", "kbroker.cli", "acls", "--bootstrap-server", bp.bootstrap, *args],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_write_but_not_read(strict_broker):
    create_topic(strict_broker.bootstrap, "wr", 2)
    kbroker_acls(strict_broker, "--add", "--allow-principal", "User:alice", "--operation", "Write", "--topic", "wr")
    kbroker_acls(strict_broker, "--add", "--allow-principal", "User:alice", "--operation", "Read",
                 "--group", "g-alice")
    alice = sasl_bootstrap(strict_broker)
    assert produce(alice, "wr", 4, **ALICE) == [None] * 4
    messages, errors = consume(alice, "wr", "g-alice", 6, **ALICE)
    assert messages == [] and errors and {e.code() for e in errors} == {TOPIC_AUTH}
    # the administrator (a super user) reads what alice wrote
    got, errors = consume(strict_broker.bootstrap, "wr", "g-admin", 15, want=4)
    assert sorted(got) == [b"m0", b"m1", b"m2", b"m3"] and not errors


def test_group_acl_gates_joining(strict_broker):
    create_topic(strict_broker.bootstrap, "gt")
    assert produce(strict_broker.bootstrap, "gt", 2) == [None, None]
    kbroker_acls(strict_broker, "--add", "--allow-principal", "User:alice", "--consumer", "--topic", "gt",
                 "--group", "g-ok")
    alice = sasl_bootstrap(strict_broker)
    messages, errors = consume(alice, "gt", "g-other", 5, **ALICE)
    assert messages == [] and errors and {e.code() for e in errors} == {GROUP_AUTH}
    messages, errors = consume(alice, "gt", "g-ok", 15, want=2, **ALICE)
    assert sorted(messages) == [b"m0", b"m1"] and not errors


def test_prefixed_acl_covers_new_topics(strict_broker):
    out = kbroker_acls(strict_broker, "--add", "--allow-principal", "User:alice", "--producer", "--topic",
                       "alice-", "--resource-pattern-type", "prefixed", "--idempotent")
    assert "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=alice-, patternType=PREFIXED)`" in out
    alice = sasl_bootstrap(strict_broker)
    # auto-created (CREATE through the prefix), idempotent (IDEMPOTENT_WRITE on the cluster)
    assert produce(alice, "alice-new-1", 2, **ALICE, **{"enable.idempotence": True}) == [None, None]
    assert produce(alice, "alice-new-2", 1, **ALICE) == [None]
    refused = produce(alice, "bob-new", 1, **ALICE)
    assert len(refused) == 1 and refused[0] is not None and refused[0].code() == TOPIC_AUTH
    # a super user is never refused, whatever the ACLs
    kbroker_acls(strict_broker, "--add", "--deny-principal", "User:*", "--operation", "All", "--topic", "alice-new-2")
    assert produce(strict_broker.bootstrap, "alice-new-2", 1) == [None]
    assert produce(alice, "alice-new-2", 1, **ALICE)[0].code() == TOPIC_AUTH


def test_metadata_hides_what_may_not_be_described(strict_broker):
    create_topic(strict_broker.bootstrap, "hidden-topic")
    kbroker_acls(strict_broker, "--add", "--allow-principal", "User:alice", "--operation", "Describe",
                 "--topic", "seen-topic")
    create_topic(strict_broker.bootstrap, "seen-topic")
    md = admin(strict_broker.bootstrap).list_topics(timeout=10)
    assert "hidden-topic" in md.topics  # the administrator sees all
    alice_admin = AdminClient({"bootstrap.servers": sasl_bootstrap(strict_broker), **ALICE})
    names = set(alice_admin.list_topics(timeout=10).topics)
    assert "seen-topic" in names and "hidden-topic" not in names
    named = alice_admin.list_topics("hidden-topic", timeout=10).topics["hidden-topic"]
    assert named.error is not None and named.error.code() == TOPIC_AUTH and not named.partitions


def test_cli_round_trip(strict_broker):
    out = kbroker_acls(strict_broker, "--add", "--allow-principal", "User:dave", "--allow-host", "10.0.0.7",
                       "--operation", "Read", "--operation", "Describe", "--topic", "cli-t")
    resource = "ResourcePattern(resourceType=TOPIC, name=cli-t, patternType=LITERAL)"
    lines = ["\t(principal=User:dave, host=10.0.0.7, operation=READ, permissionType=ALLOW)",
             "\t(principal=User:dave, host=10.0.0.7, operation=DESCRIBE, permissionType=ALLOW)"]
    assert out.startswith(f"Adding ACLs for resource `{resource}`: \n {lines[0]}\n{lines[1]} \n\n")
    assert f"Current ACLs for resource `{resource}`: \n " in out
    listed = kbroker_acls(strict_broker, "--list", "--topic", "cli-t")
    assert listed.startswith(f"Current ACLs for resource `{resource}`: \n ")
    assert sorted(listed.strip().splitlines()[1:]) == sorted(line.strip(" ") for line in lines) or \
        all(line.strip() in listed for line in lines)
    by_principal = kbroker_acls(strict_broker, "--list", "--principal", "User:dave")
    assert by_principal.startswith(f"ACLs for principal `User:dave`\nCurrent ACLs for resource `{resource}`: \n ")
    assert "User:alice" not in by_principal
    kbroker_acls(strict_broker, "--remove", "--force", "--allow-principal", "User:dave", "--allow-host",
                 "10.0.0.7", "--operation", "Read", "--topic", "cli-t")
    listed = kbroker_acls(strict_broker, "--list", "--topic", "cli-t")
    assert "operation=DESCRIBE" in listed and "operation=READ" not in listed
    kbroker_acls(strict_broker, "--remove", "--force", "--topic", "cli-t")
    assert kbroker_acls(strict_broker, "--list", "--topic", "cli-t") == ""
    # bad arguments: exit 2 with kafka-acls.sh's complaint
    r = subprocess.run([sys.executable, "-m", "kbroker.cli", "acls", "--bootstrap-server", strict_broker.bootstrap,
                        "--add", "--allow-principal", "User:dave", "--operation", "Write", "--group", "g"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "ResourceType Group only supports operations" in r.stderr


def test_alice_is_refused_cluster_apis(strict_broker):
    """ACL and inter-broker APIs need the cluster permission: 31."""
    alice_admin = AdminClient({"bootstrap.servers": sasl_bootstrap(strict_broker), **ALICE})
    flt = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                           AclPermissionType.ANY)
    with pytest.raises(Exception, match="CLUSTER_AUTHORIZATION_FAILED|[Cc]luster authorization"):
        for f in alice_admin.create_acls([binding(ResourceType.TOPIC, "x", "User:alice", AclOperation.ALL)]).values():
            f.result(15)
    with pytest.raises(Exception, match="CLUSTER_AUTHORIZATION_FAILED|[Cc]luster authorization"):
        for f in alice_admin.delete_acls([flt]).values():
            f.result(15)
    with pytest.raises(Exception, match="TOPIC_AUTHORIZATION_FAILED|[Aa]uthorization failed"):
        for f in alice_admin.create_topics([NewTopic("not-alices", 1, 1)]).values():
            f.result(15)


def test_transactional_id_acl(strict_broker):
    """InitProducerId needs WRITE on the transactional id (53); with kafka-acls.sh --producer
    --transactional-id a transaction commits and a read_committed consumer sees it."""
    alice = sasl_bootstrap(strict_broker)
    create_topic(strict_broker.bootstrap, "txn-acl")
    kbroker_acls(strict_broker, "--add", "--allow-principal", "User:alice", "--producer", "--topic", "txn-acl")
    p = Producer({"bootstrap.servers": alice, "transactional.id": "tx-alice", **ALICE})
    with pytest.raises(KafkaException) as info:
        p.init_transactions(15)
    assert info.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    kbroker_acls(strict_broker, "--add", "--allow-principal", "User:alice", "--producer", "--topic", "txn-acl",
                 "--transactional-id", "tx-alice")
    p = Producer({"bootstrap.servers": alice, "transactional.id": "tx-alice", **ALICE})
    p.init_transactions(15)
    p.begin_transaction()
    p.produce("txn-acl", b"committed")
    p.commit_transaction(15)
    got, errors = consume(strict_broker.bootstrap, "txn-acl", "g-txn", 15, want=1,
                          **{"isolation.level": "read_committed"})
    assert got == [b"committed"] and not errors


def test_authorized_operations(strict_broker):
    """describe_topics / describe_cluster / describe_consumer_groups with include_authorized_operations:
    the bit fields Kafka answers (Metadata v8+, DescribeCluster, DescribeGroups v3+)."""
    from confluent_kafka import TopicCollection
    create_topic(strict_broker.bootstrap, "ops-topic")
    kbroker_acls(strict_broker, "--add", "--allow-principal", "User:alice", "--operation", "Read",
                 "--operation", "AlterConfigs", "--topic", "ops-topic")
    kbroker_acls(strict_broker, "--add", "--allow-principal", "User:alice", "--operation", "Describe",
                 "--group", "ops-group")
    alice_admin = AdminClient({"bootstrap.servers": sasl_bootstrap(strict_broker), **ALICE})
    desc = alice_admin.describe_topics(TopicCollection(["ops-topic"]), include_authorized_operations=True)
    ops = set(desc["ops-topic"].result(15).authorized_operations)
    # Read implies Describe, AlterConfigs implies DescribeConfigs
    assert ops == {AclOperation.READ, AclOperation.DESCRIBE, AclOperation.ALTER_CONFIGS,
                   AclOperation.DESCRIBE_CONFIGS}
    cluster = alice_admin.describe_cluster(include_authorized_operations=True).result(15)
    # alice may at most write idempotently (test_prefixed_acl_covers_new_topics grants that), never administer
    assert set(cluster.authorized_operations or []) <= {AclOperation.IDEMPOTENT_WRITE}
    (group,) = alice_admin.describe_consumer_groups(["ops-group"], include_authorized_operations=True).values()
    assert set(group.result(15).authorized_operations) == {AclOperation.DESCRIBE}
    # the administrator (a super user) may do everything
    root = admin(strict_broker.bootstrap)
    full = set(root.describe_cluster(include_authorized_operations=True).result(15).authorized_operations)
    assert {AclOperation.ALTER, AclOperation.CLUSTER_ACTION, AclOperation.IDEMPOTENT_WRITE} <= full
