"""DescribeClientQuotas (48) and AlterClientQuotas (49) on a real broker process, over the wire
(neither confluent-kafka nor kafka-python has a client-quota admin call: kbroker's own client
speaks the raw protocol): round trips with every match type, Kafka's errors for bad input, the
entity znodes' bytes and change notices (read from the broker's store after it stopped), SCRAM
credentials kept beside the quotas, and the cluster authorization both APIs need."""
from __future__ import annotations

import contextlib
import json

import pytest

from kbroker.tools.client import Connection
from tests.integration.conftest import BrokerProcess, _make_broker, broker_errors
from zk_compat.embedded import EmbeddedServer

DESCRIBE, ALTER = 48, 49
MB = 1048576.0
SCRAM = ("salt=MWptdnozbzRrcTdxMmJmcTl6MGozZDh3eg==,stored_key=IQ3vCIEzR7FIOJ4Q5b+27TFh6Xmdc2QQga2ik/urNpQ=,"
         "server_key=KCgUh0DwiDRcqCm54eqGt4p2jdBYwN9ZFD6Kc5Wg1Yg=,iterations=8192")


def entity(user=..., client=...) -> list[dict]:
    out = []
    if user is not ...:
        out.append({"entity_type": "user", "entity_name": user})
    if client is not ...:
        out.append({"entity_type": "client-id", "entity_name": client})
    return out


def op(key: str, value: float = 0.0, remove: bool = False) -> dict:
    return {"key": key, "value": value, "remove": remove}


def alter(conn: Connection, *entries: tuple[list, list], validate_only: bool = False) -> list:
    response = conn.send(ALTER, {"entries": [{"entity": e, "ops": ops} for e, ops in entries],
                                 "validate_only": validate_only})
    assert response.throttle_time_ms == 0
    return response.entries


def describe(conn: Connection, *components: tuple[str, int, str | None], strict: bool = False):
    return conn.send(DESCRIBE, {"components": [{"entity_type": t, "match_type": m, "match": n}
                                               for t, m, n in components], "strict": strict})


def found(response) -> dict:
    """entity as ((type, name), ...) -> {key: value}"""
    assert response.error_code == 0, (response.error_code, response.error_message)
    return {tuple((e.entity_type, e.entity_name) for e in entry.entity): {v.key: v.value for v in entry.values}
            for entry in response.entries}


@pytest.fixture
def make_broker(tmp_path):
    """make_broker({"key": "value"}) -> a running broker, stopped cleanly (and checked) at teardown."""
    made = []

    def make(overrides: dict[str, str] | None = None) -> BrokerProcess:
        base = tmp_path / f"b{len(made)}"
        base.mkdir()
        gen = _make_broker(base, overrides)
        made.append(gen)
        return next(gen)
    yield make
    for gen in made:
        with contextlib.suppress(StopIteration):
            next(gen)


@pytest.fixture
def seeded_broker(tmp_path):
    """A broker whose store already holds alice's SCRAM credential (as H2's AlterUserScramCredentials
    or kafka-configs.sh --zookeeper would leave it)."""
    proc = BrokerProcess(tmp_path)
    proc.dirs.mkdir(parents=True)
    with EmbeddedServer.in_log_dir(proc.dirs) as server:
        store = server.connect()
        from zk_compat import layout
        layout.ensure_persistent_paths(store)
        layout.set_entity_config(store, "users", "alice", {"SCRAM-SHA-256": SCRAM})
        store.close()
    proc.start()
    yield proc
    proc.stop_cleanly()
    assert not broker_errors(proc.log()), proc.log()[-5000:]


def test_alter_describe_round_trip_and_znodes(seeded_broker):
    b = seeded_broker
    conn = Connection(b.host, b.port)
    v = conn.version(ALTER)
    assert v == 1 and conn.version(DESCRIBE) == 1  # both APIs advertised, v1 flexible
    results = alter(conn,
                    (entity(client="c1"), [op("producer_byte_rate", MB)]),
                    (entity(user="alice"), [op("consumer_byte_rate", 2 * MB), op("request_percentage", 50.5)]),
                    (entity(user="alice", client="c/1"), [op("producer_byte_rate", 3 * MB)]),
                    (entity(user=None), [op("producer_byte_rate", 4 * MB)]),
                    (entity(user=None, client=None), [op("controller_mutation_rate", 1e7)]),
                    (entity(client=None), [op("consumer_byte_rate", 5 * MB)]))
    assert [(r.error_code, r.error_message) for r in results] == [(0, None)] * 6
    assert [[(e.entity_type, e.entity_name) for e in r.entity] for r in results][2] == [("user", "alice"),
                                                                                        ("client-id", "c/1")]

    everything = found(describe(conn))
    assert everything == {
        (("client-id", "c1"),): {"producer_byte_rate": MB},
        (("user", "alice"),): {"consumer_byte_rate": 2 * MB, "request_percentage": 50.5},
        (("user", "alice"), ("client-id", "c/1")): {"producer_byte_rate": 3 * MB},
        (("user", None),): {"producer_byte_rate": 4 * MB},
        (("user", None), ("client-id", None)): {"controller_mutation_rate": 1e7},
        (("client-id", None),): {"consumer_byte_rate": 5 * MB},
    }
    # exact (0), default (1), any (2); strict leaves out entities with other parts
    assert set(found(describe(conn, ("user", 0, "alice")))) == {(("user", "alice"),),
                                                                (("user", "alice"), ("client-id", "c/1"))}
    assert set(found(describe(conn, ("user", 0, "alice"), strict=True))) == {(("user", "alice"),)}
    assert set(found(describe(conn, ("user", 1, None), strict=True))) == {(("user", None),)}
    assert set(found(describe(conn, ("user", 1, None)))) == {(("user", None),), (("user", None), ("client-id", None))}
    assert set(found(describe(conn, ("client-id", 2, None), strict=True))) == {(("client-id", "c1"),),
                                                                               (("client-id", None),)}
    assert set(found(describe(conn, ("user", 2, None), ("client-id", 2, None)))) == {
        (("user", "alice"), ("client-id", "c/1")), (("user", None), ("client-id", None))}
    assert found(describe(conn, ("user", 0, "nobody"))) == {}

    # validate_only writes nothing; remove takes one key out and keeps the others
    assert alter(conn, (entity(client="c1"), [op("producer_byte_rate", 7.0)]), validate_only=True)[0].error_code == 0
    assert alter(conn, (entity(user="alice"), [op("request_percentage", remove=True)]))[0].error_code == 0
    after = found(describe(conn))
    assert after[(("client-id", "c1"),)] == {"producer_byte_rate": MB}
    assert after[(("user", "alice"),)] == {"consumer_byte_rate": 2 * MB}
    conn.close()
    b.stop_cleanly()

    with EmbeddedServer.in_log_dir(b.dirs) as server:
        store = server.connect()
        assert store.get("/config/clients/c1")[0] == b'{"version":1,"config":{"producer_byte_rate":"1048576"}}'
        alice = json.loads(store.get("/config/users/alice")[0])
        assert alice == {"version": 1, "config": {"SCRAM-SHA-256": SCRAM, "consumer_byte_rate": "2097152"}}
        assert (store.get("/config/users/alice/clients/c%2F1")[0]
                == b'{"version":1,"config":{"producer_byte_rate":"3145728"}}')
        assert (store.get("/config/users/<default>/clients/<default>")[0]
                == b'{"version":1,"config":{"controller_mutation_rate":"1.0E7"}}')
        notices = [store.get(f"/config/changes/{n}")[0] for n in sorted(store.get_children("/config/changes"))]
        assert notices == [b'{"version":2,"entity_path":"%s"}' % p for p in (
            b"clients/c1", b"users/alice", b"users/alice/clients/c%2F1", b"users/<default>",
            b"users/<default>/clients/<default>", b"clients/<default>", b"users/alice")]
        store.close()
    b.start()  # the fixture stops it


def test_bad_input_gets_kafkas_errors(make_broker):
    b = make_broker()
    conn = Connection(b.host, b.port)
    results = alter(conn,
                    (entity(client="c1"), [op("producer_byte_rate", 1.5)]),
                    (entity(client="c1"), [op("consumer_byte_rate", 1024.0000001)]),  # within Kafka's epsilon
                    (entity(client="c1"), [op("no_such_quota", 1.0)]),
                    (entity(client="c1"), [op("SCRAM-SHA-256", 1.0)]),
                    ([{"entity_type": "bogus", "entity_name": "x"}], [op("producer_byte_rate", 1.0)]),
                    ([], [op("producer_byte_rate", 1.0)]),
                    (entity(user=""), [op("producer_byte_rate", 1.0)]),
                    (entity(client="c2"), [op("producer_byte_rate", 10.0), op("bad", 1.0)]))
    assert [(r.error_code, r.error_message) for r in results] == [
        (42, "Configuration producer_byte_rate must be a Long value"),
        (0, None),
        (42, "Invalid configuration key no_such_quota"),
        (42, "Invalid configuration key SCRAM-SHA-256"),
        (42, "Unhandled client quota entity type: bogus"),
        (42, "Invalid empty client quota entity"),
        (42, "Empty user not supported"),
        (42, "Invalid configuration key bad"),
    ]
    # nothing of a refused entry was written (c2's valid op included)
    assert found(describe(conn)) == {(("client-id", "c1"),): {"consumer_byte_rate": 1024.0}}

    bad = describe(conn, ("bogus", 0, "x"))
    assert (bad.error_code, bad.error_message, bad.entries) == (35, "Custom entity type 'bogus' not supported", None)
    bad = describe(conn, ("user", 2, None), ("user", 0, "a"))
    assert (bad.error_code, bad.error_message) == (42, "Duplicate user filter component entity type")
    bad = describe(conn, ("", 2, None))
    assert (bad.error_code, bad.error_message) == (42, "Unexpected empty filter component entity type")
    bad = describe(conn, ("user", 7, None))
    assert bad.error_code == 42
    # the broker keeps serving, this connection included
    assert found(describe(conn, ("client-id", 0, "c1"))) == {(("client-id", "c1"),): {"consumer_byte_rate": 1024.0}}
    conn.close()


def test_cluster_authorization(make_broker):
    b = make_broker({"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"})
    conn = Connection(b.host, b.port)  # User:ANONYMOUS, no ACLs, allow.everyone.if.no.acl.found=false
    denied = describe(conn)
    assert (denied.error_code, denied.error_message, denied.entries) == (31, "Cluster authorization failed.", None)
    results = alter(conn, (entity(client="c1"), [op("producer_byte_rate", MB)]),
                    (entity(user="u"), [op("producer_byte_rate", MB)]))
    assert [(r.error_code, r.error_message) for r in results] == [(31, "Cluster authorization failed.")] * 2
    conn.close()
    su = make_broker({"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                         "super.users": "User:ANONYMOUS"})
    conn = Connection(su.host, su.port)
    assert alter(conn, (entity(client="c1"), [op("producer_byte_rate", MB)]))[0].error_code == 0
    assert found(describe(conn)) == {(("client-id", "c1"),): {"producer_byte_rate": MB}}
    conn.close()
