"""The ACL authorizer over the embedded store: Kafka's znode bytes and change notices, the rules
(super users, allow-if-no-ACL, deny wins, literal / prefixed / wildcard, implied operations, hosts,
User:*), authorizeByResourceType, DescribeAcls/DeleteAcls filters, two authorizers on one store
following each other's changes, a corrupt znode skipped, and the class-name check."""
from __future__ import annotations

import json
import logging
import time

import pytest

from kbroker.config.broker import load_config
from kbroker.config.errors import ConfigError
from kbroker.protocol.messages.acls import AclOperation as Op, PatternType, PermissionType, ResourceType as Res
from kbroker.security.authorizer import AclFilter, Authorizer, build_authorizer, java_host
from kbroker.security.principal import KafkaPrincipal, Session
from zk_compat import acls as zk_acls
from zk_compat.acls import AclEntry, ResourcePattern
from zk_compat.embedded import EmbeddedServer

ACL_CLASS = "kafka.security.authorizer.AclAuthorizer"


@pytest.fixture
def store(tmp_path):
    server = EmbeddedServer(tmp_path / "store")
    s = server.connect()
    yield s
    s.close()
    server.close()


def make(store, **overrides: str) -> Authorizer:
    settings = {"authorizer.class.name": ACL_CLASS, **overrides}
    config = load_config(None, [f"{k}={v}" for k, v in settings.items()])
    authorizer = build_authorizer(config, store)
    assert authorizer is not None
    authorizer.start()
    return authorizer


def session(name: str = "alice", host: str = "10.0.0.1") -> Session:
    return Session(principal=KafkaPrincipal("User", name), client_address=host)


def topic(name: str, pattern: str = "LITERAL") -> ResourcePattern:
    return ResourcePattern("TOPIC", name, pattern)


def acl(principal: str, permission: str, operation: str, host: str = "*") -> AclEntry:
    return AclEntry(principal, permission, operation, host)


def wait_for(condition, timeout: float = 2.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


# -- bytes ---------------------------------------------------------------------------------------

def test_znodes_are_kafkas_bytes(store):
    authorizer = make(store)
    for path in ("/kafka-acl/Topic", "/kafka-acl/Group", "/kafka-acl/Cluster", "/kafka-acl/TransactionalId",
                 "/kafka-acl/DelegationToken", "/kafka-acl-extended/prefixed/Topic", "/kafka-acl-changes",
                 "/kafka-acl-extended-changes"):
        assert store.exists(path) is not None, path
    authorizer.create([(topic("orders"), acl("User:alice", "ALLOW", "READ"))])
    data, _ = store.get("/kafka-acl/Topic/orders")
    assert data == (b'{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",'
                    b'"operation":"Read","host":"*"}]}')
    changes = store.get_children("/kafka-acl-changes")
    assert [c[:len("acl_changes_")] for c in changes] == ["acl_changes_"] and len(changes[0]) == 22
    assert store.get(f"/kafka-acl-changes/{changes[0]}")[0] == b"TOPIC:orders"

    authorizer.create([(ResourcePattern("TRANSACTIONAL_ID", "tx-", "PREFIXED"),
                        acl("User:bob", "DENY", "DESCRIBE", "10.1.1.1"))])
    data, _ = store.get("/kafka-acl-extended/prefixed/TransactionalId/tx-")
    assert json.loads(data) == {"version": 1, "acls": [
        {"principal": "User:bob", "permissionType": "Deny", "operation": "Describe", "host": "10.1.1.1"}]}
    (notice,) = store.get_children("/kafka-acl-extended-changes")
    assert store.get(f"/kafka-acl-extended-changes/{notice}")[0] == \
        b'{"version":1,"resourceType":"TRANSACTIONAL_ID","name":"tx-","patternType":"PREFIXED"}'

    # two-word names in PascalCase; the cluster and a wildcard are LITERAL nodes
    authorizer.create([(ResourcePattern("CLUSTER", "kafka-cluster", "LITERAL"),
                        acl("User:admin", "ALLOW", "CLUSTER_ACTION")),
                       (topic("*"), acl("User:*", "ALLOW", "DESCRIBE_CONFIGS"))])
    assert json.loads(store.get("/kafka-acl/Cluster/kafka-cluster")[0])["acls"][0]["operation"] == "ClusterAction"
    assert json.loads(store.get("/kafka-acl/Topic/*")[0])["acls"][0]["operation"] == "DescribeConfigs"

    # the last ACL removed deletes the znode
    removed = authorizer.delete([AclFilter(Res.TOPIC, "orders", PatternType.LITERAL, None, None, Op.ANY,
                                           PermissionType.ANY)])
    assert removed == [[(topic("orders"), acl("User:alice", "ALLOW", "READ"))]]
    assert store.exists("/kafka-acl/Topic/orders") is None
    authorizer.stop()


def test_reads_what_kafka_writes(store):
    """Znodes written by Kafka (any casing of names, unknown operations) are read; UNKNOWN matches nothing."""
    zk_acls.ensure_acl_paths(store)
    store.create("/kafka-acl/Topic/t", b'{"version":1,"acls":[{"principal":"User:alice","permissionType":"ALLOW",'
                 b'"operation":"Write","host":"*"},{"principal":"User:alice","permissionType":"Allow",'
                 b'"operation":"Teleport","host":"*"}]}')
    authorizer = make(store)
    assert authorizer.authorize(session(), Op.WRITE, Res.TOPIC, "t")
    assert not authorizer.authorize(session(), Op.READ, Res.TOPIC, "t")
    authorizer.stop()


# -- rules -----------------------------------------------------------------------------------------

def test_rules(store):
    a = make(store, **{"super.users": "User:root;User:admin"})
    alice, bob = session("alice"), session("bob")
    # no ACL at all: allow.everyone.if.no.acl.found=false refuses
    assert not a.authorize(alice, Op.READ, Res.TOPIC, "t")
    assert a.authorize(session("admin"), Op.ALTER, Res.CLUSTER, "kafka-cluster")  # super user
    a.create([(topic("t"), acl("User:alice", "ALLOW", "READ")),
              (topic("t"), acl("User:alice", "ALLOW", "ALTER_CONFIGS"))])
    assert a.authorize(alice, Op.READ, Res.TOPIC, "t")
    assert a.authorize(alice, Op.DESCRIBE, Res.TOPIC, "t")            # implied by Read
    assert a.authorize(alice, Op.DESCRIBE_CONFIGS, Res.TOPIC, "t")    # implied by AlterConfigs
    assert not a.authorize(alice, Op.WRITE, Res.TOPIC, "t")
    assert not a.authorize(bob, Op.READ, Res.TOPIC, "t")
    # deny wins, does not use implications, and covers every principal with User:*
    a.create([(topic("t"), acl("User:*", "DENY", "READ", "10.0.0.9"))])
    assert a.authorize(alice, Op.READ, Res.TOPIC, "t")
    assert not a.authorize(session("alice", "10.0.0.9"), Op.READ, Res.TOPIC, "t")
    assert a.authorize(session("alice", "10.0.0.9"), Op.DESCRIBE, Res.TOPIC, "t")
    a.create([(topic("t"), acl("User:alice", "DENY", "ALL"))])
    assert not a.authorize(alice, Op.DESCRIBE, Res.TOPIC, "t")
    assert a.authorize(session("root"), Op.READ, Res.TOPIC, "t")      # super users pass even a deny
    # prefixed and wildcard
    a.create([(topic("logs-", "PREFIXED"), acl("User:bob", "ALLOW", "WRITE")),
              (topic("*"), acl("User:carol", "ALLOW", "READ"))])
    assert a.authorize(bob, Op.WRITE, Res.TOPIC, "logs-new-one")
    assert not a.authorize(bob, Op.WRITE, Res.TOPIC, "log")
    assert a.authorize(session("carol"), Op.READ, Res.TOPIC, "anything")
    assert not a.authorize(session("carol"), Op.READ, Res.GROUP, "anything")
    # host match: an exact IP; IPv6 compared as Java prints it
    a.create([(ResourcePattern("GROUP", "g", "LITERAL"), acl("User:dan", "ALLOW", "READ", "0:0:0:0:0:0:0:1"))])
    assert a.authorize(session("dan", "::1"), Op.READ, Res.GROUP, "g")
    assert not a.authorize(session("dan", "10.0.0.1"), Op.READ, Res.GROUP, "g")
    assert java_host("::1") == "0:0:0:0:0:0:0:1" and java_host("127.0.0.1") == "127.0.0.1"
    assert java_host("::ffff:10.0.0.1") == "10.0.0.1" and java_host("fe80::1%eth0") == "fe80:0:0:0:0:0:0:1"
    a.stop()


def test_allow_everyone_if_no_acl_found(store):
    a = make(store, **{"allow.everyone.if.no.acl.found": "true"})
    assert a.authorize(session(), Op.WRITE, Res.TOPIC, "free")
    a.create([(topic("guarded"), acl("User:bob", "ALLOW", "WRITE"))])
    assert not a.authorize(session(), Op.WRITE, Res.TOPIC, "guarded")  # ACLs exist: the rule no longer applies
    assert a.authorize(session(), Op.WRITE, Res.TOPIC, "free")          # ACLs of other resources do not count
    a.stop()


def test_authorize_by_resource_type(store):
    a = make(store)
    alice = session()
    assert not a.authorize_by_resource_type(alice, Op.WRITE, Res.TOPIC)
    a.create([(topic("t1"), acl("User:alice", "ALLOW", "WRITE"))])
    assert a.authorize_by_resource_type(alice, Op.WRITE, Res.TOPIC)
    a.create([(topic("t", "PREFIXED"), acl("User:alice", "DENY", "WRITE"))])   # denies t1 by prefix
    assert not a.authorize_by_resource_type(alice, Op.WRITE, Res.TOPIC)
    a.create([(topic("u-", "PREFIXED"), acl("User:*", "ALLOW", "ALL"))])
    assert a.authorize_by_resource_type(alice, Op.WRITE, Res.TOPIC)
    a.create([(topic("*"), acl("User:alice", "DENY", "WRITE"))])
    assert not a.authorize_by_resource_type(alice, Op.WRITE, Res.TOPIC)
    a.stop()


def test_filters(store):
    a = make(store)
    a.create([(topic("orders"), acl("User:alice", "ALLOW", "READ")),
              (topic("*"), acl("User:bob", "ALLOW", "READ")),
              (topic("ord", "PREFIXED"), acl("User:carol", "DENY", "WRITE")),
              (topic("other"), acl("User:dan", "ALLOW", "READ"))])

    def names(pattern_type, name="orders", **kw):
        flt = AclFilter(kw.get("rtype", Res.TOPIC), name, pattern_type, kw.get("principal"), None,
                        kw.get("op", Op.ANY), PermissionType.ANY)
        return sorted(e.principal for _, e in a.describe(flt))

    assert names(PatternType.MATCH) == ["User:alice", "User:bob", "User:carol"]
    assert names(PatternType.LITERAL) == ["User:alice"]
    assert names(PatternType.ANY) == ["User:alice"]
    assert names(PatternType.PREFIXED, "ord") == ["User:carol"]
    assert names(PatternType.ANY, None) == ["User:alice", "User:bob", "User:carol", "User:dan"]
    assert names(PatternType.ANY, None, op=Op.WRITE) == ["User:carol"]
    assert names(PatternType.ANY, None, rtype=Res.GROUP) == []
    gone = a.delete([AclFilter(Res.ANY, None, PatternType.ANY, "User:bob", None, Op.ANY, PermissionType.ANY)])
    assert [e.principal for _, e in gone[0]] == ["User:bob"]
    assert store.exists("/kafka-acl/Topic/*") is None
    a.stop()


def test_two_authorizers_follow_each_other(store):
    """What two brokers do: one writes, the other hears the change notice and re-reads."""
    one, two = make(store), make(store)
    one.create([(topic("shared"), acl("User:alice", "ALLOW", "WRITE")),
                (topic("sh", "PREFIXED"), acl("User:bob", "ALLOW", "WRITE"))])
    wait_for(lambda: two.authorize(session("alice"), Op.WRITE, Res.TOPIC, "shared"))
    wait_for(lambda: two.authorize(session("bob"), Op.WRITE, Res.TOPIC, "shell"))
    one.delete([AclFilter(Res.TOPIC, "shared", PatternType.LITERAL, None, None, Op.ANY, PermissionType.ANY)])
    wait_for(lambda: not two.authorize(session("alice"), Op.WRITE, Res.TOPIC, "shared"))
    # a third started later reads everything at start
    three = make(store)
    assert three.authorize(session("bob"), Op.WRITE, Res.TOPIC, "shell")
    for a in (one, two, three):
        a.stop()


def test_corrupt_znode_is_skipped(store, caplog):
    zk_acls.ensure_acl_paths(store)
    store.create("/kafka-acl/Topic/bad", b"{not json")
    store.create("/kafka-acl/Topic/good", zk_acls.encode_acls([acl("User:alice", "ALLOW", "READ")]))
    with caplog.at_level(logging.ERROR):
        a = make(store)
    assert any("bad" in r.getMessage() and r.levelno == logging.ERROR for r in caplog.records)
    assert a.authorize(session(), Op.READ, Res.TOPIC, "good")
    assert not a.authorize(session(), Op.READ, Res.TOPIC, "bad")
    # a corrupt version, then a change notice for it: still skipped, the broker keeps going
    other = make(store)
    caplog.clear()
    with caplog.at_level(logging.ERROR):
        store.set("/kafka-acl/Topic/good", b'{"version":7,"acls":[]}')
        zk_acls.write_change_notice(store, topic("good"))
        wait_for(lambda: any("good" in r.getMessage() for r in caplog.records))
    assert other.authorize(session(), Op.READ, Res.TOPIC, "x") is False
    # writing through the authorizer replaces a corrupt znode
    a.create([(topic("bad"), acl("User:alice", "ALLOW", "WRITE"))])
    assert json.loads(store.get("/kafka-acl/Topic/bad")[0])["acls"][0]["operation"] == "Write"
    a.stop()
    other.stop()


def test_class_names(store):
    for name in (ACL_CLASS, "kafka.security.auth.SimpleAclAuthorizer"):
        config = load_config(None, [f"authorizer.class.name={name}"])
        assert isinstance(build_authorizer(config, store), Authorizer)
    assert build_authorizer(load_config(None, []), store) is None
    with pytest.raises(ConfigError, match="authorizer.class.name"):
        build_authorizer(load_config(None, ["authorizer.class.name=com.example.MyAuthorizer"]), store)


def test_change_notice_decoding():
    assert zk_acls.decode_change("/kafka-acl-changes", b"TOPIC:a:b") == topic("a:b")
    assert zk_acls.decode_change("/kafka-acl-changes", b"Topic:x") == topic("x")  # older Scala authorizers
    assert zk_acls.decode_change("/kafka-acl-changes", b"TRANSACTIONAL_ID:x").resource_type == "TRANSACTIONAL_ID"
    with pytest.raises(ValueError):
        zk_acls.decode_change("/kafka-acl-changes", b"nonsense")
    with pytest.raises(ValueError):
        zk_acls.decode_change("/kafka-acl-extended-changes", b'{"version":2}')


def test_old_change_notices_are_purged(store):
    zk_acls.ensure_acl_paths(store)
    for name in ("a", "b", "c"):
        zk_acls.write_change_notice(store, topic(name))
    children = store.get_children("/kafka-acl-changes")
    ctimes = sorted(store.exists(f"/kafka-acl-changes/{c}").ctime for c in children)
    # as if 15 minutes had passed since the first two only
    zk_acls.purge_old_notices(store, "/kafka-acl-changes", children, ctimes[0] + zk_acls.CHANGE_EXPIRATION_MS + 1)
    left = store.get_children("/kafka-acl-changes")
    assert len(left) == 3 - sum(1 for t in ctimes if t < ctimes[0] + 1)
    zk_acls.purge_old_notices(store, "/kafka-acl-changes", left, ctimes[-1] + zk_acls.CHANGE_EXPIRATION_MS + 1)
    assert store.get_children("/kafka-acl-changes") == []
