"""SCRAM credentials in a real ZooKeeper, as Kafka 2.8 keeps them, on a 2-broker cluster:
AlterUserScramCredentials (confluent-kafka's admin client and raw requests) writes
``/config/users/<sanitized user>`` in Kafka's format (checked field by field and recomputed from the
password), merged with the user's quota keys, plus the ``/config/changes`` notice both brokers follow;
Kafka's validation and error codes (91, 92, 93, 33, 41 off the controller); Describe on any broker;
deleting a credential stops its logins; a corrupt credential znode is logged by user name (never the
value) and leaves the broker serving everyone else; GSSAPI on a SASL listener stops startup clearly."""
from __future__ import annotations

import base64
import json
import time
import uuid

import pytest

from kazoo_bridge.store import connect
from kbroker.security.credentials import make_credential, parse_credential
from kbroker.security.sasl.scram import ScramClient
from tests.integration.conftest import LOG_TAIL, BrokerProcess, broker_errors
from tests.security.sasl_helpers import PLAIN_USERS, Raw, sasl_broker
from zk_compat.layout import create_config_change_notification

CORRUPT_USER = "mallory"


@pytest.fixture(scope="module")
def cluster(zookeeper_server, tmp_path_factory):
    chroot = f"/kbscram-{uuid.uuid4().hex[:10]}"
    zk_connect = f"{zookeeper_server.hosts}{chroot}"
    base = tmp_path_factory.mktemp("scram-cluster")
    brokers = [sasl_broker(base / f"b{i}", {"broker.id": str(i), "zookeeper.connect": zk_connect,
                                            "offsets.topic.replication.factor": "1"}) for i in (1, 2)]
    store = connect(zk_connect, 6000, 5000)
    started = []
    try:
        for bp in brokers:
            bp.start()
            started.append(bp)
        yield brokers, store
    finally:
        store.close()
        for bp in brokers:
            alive = bp.running
            bp.stop() if alive else bp.kill()
            assert alive, f"broker died\n{bp.log()[-LOG_TAIL:]}"
            found = [e for e in broker_errors(bp.log())   # the errors a test provokes on purpose
                     if f"credential of user '{CORRUPT_USER}'" not in e and f"configs of users/{CORRUPT_USER}" not in e]
            assert not found, f"the broker logged errors: {found[:5]}"


def controller_and_other(cluster) -> tuple[BrokerProcess, BrokerProcess]:
    brokers, store = cluster
    for _ in range(100):
        try:
            data, _ = store.get("/controller")
            cid = json.loads(data)["brokerid"]
            break
        except Exception:  # noqa: BLE001 - not elected yet
            time.sleep(0.1)
    ctrl = next(b for b in brokers if b.overrides["broker.id"] == str(cid))
    return ctrl, next(b for b in brokers if b is not ctrl)


def znode(store, path: str) -> dict:
    data, _ = store.get(path)
    return json.loads(data)


def alter(bp: BrokerProcess, deletions=(), upsertions=()):
    return Raw(bp.port).request(51, 0, {"deletions": list(deletions), "upsertions": list(upsertions)})


def upsert(name: str, password: str, mechanism: int = 2, iterations: int = 4096, salt: bytes = b"somesalt") -> dict:
    mech = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}[mechanism]
    from kbroker.security.credentials import salted_password
    return {"name": name, "mechanism": mechanism, "iterations": iterations, "salt": salt,
            "salted_password": salted_password(mech, password, salt, iterations)}


def scram_login(bp: BrokerProcess, mechanism: str, user: str, password: str, port: int | None = None) -> int:
    r = Raw(port or bp.sasl_port)  # type: ignore[attr-defined]
    assert r.request(17, 1, {"mechanism": mechanism}).error_code == 0
    client = ScramClient(mechanism, user, password)
    first = r.request(36, 1, {"auth_bytes": client.first()})
    if first.error_code:
        return first.error_code
    final = r.request(36, 1, {"auth_bytes": client.final(first.auth_bytes)})
    if final.error_code == 0:
        client.verify(final.auth_bytes)
    r.close()
    return final.error_code


def wait_for(fn, timeout=10.0):
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


def test_admin_client_writes_kafkas_znode_and_every_broker_follows(cluster):
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )
    brokers, store = cluster
    user = "eve@example.com"   # sanitized in the path: @ -> %40
    # quotas already in the user's znode must survive
    store.create("/config/users/eve%40example.com",
                 b'{"version":1,"config":{"producer_byte_rate":"1048576"}}', makepath=True)
    changes_before = set(store.get_children("/config/changes"))
    admin = AdminClient({"bootstrap.servers": ",".join(b.bootstrap for b in brokers)})
    futures = admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), b"eve-secret"),
        UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"eve-secret-2")])
    for f in futures.values():
        f.result(15)
    obj = znode(store, "/config/users/eve%40example.com")
    assert obj["version"] == 1 and set(obj) == {"version", "config"}
    config = obj["config"]
    assert set(config) == {"producer_byte_rate", "SCRAM-SHA-256", "SCRAM-SHA-512"}
    assert config["producer_byte_rate"] == "1048576"
    for mechanism, password, iterations in (("SCRAM-SHA-256", "eve-secret", 8192),
                                            ("SCRAM-SHA-512", "eve-secret-2", 4096)):
        text = config[mechanism]
        fields = [part.split("=", 1) for part in text.split(",")]
        assert [k for k, _ in fields] == ["salt", "stored_key", "server_key", "iterations"]
        values = dict(fields)
        assert values["iterations"] == str(iterations)
        for key in ("salt", "stored_key", "server_key"):
            assert base64.b64encode(base64.b64decode(values[key])).decode() == values[key]  # standard, padded
        digest_len = 32 if mechanism == "SCRAM-SHA-256" else 64
        assert len(base64.b64decode(values["stored_key"])) == digest_len
        # the keys are what the password gives with that salt: never the password itself
        expected = make_credential(mechanism, password, iterations, base64.b64decode(values["salt"]))
        assert parse_credential(text) == expected
        assert password not in text
    new = sorted(set(store.get_children("/config/changes")) - changes_before)
    assert new and all(n.startswith("config_change_") and len(n) == len("config_change_") + 10 for n in new)
    notices = [znode(store, f"/config/changes/{n}") for n in new]
    assert {"version": 2, "entity_path": "users/eve%40example.com"} in notices
    for bp in brokers:   # both brokers follow the notice: eve logs in everywhere
        assert wait_for(lambda bp=bp: scram_login(bp, "SCRAM-SHA-256", user, "eve-secret") == 0)
        assert scram_login(bp, "SCRAM-SHA-512", user, "eve-secret-2") == 0
        assert scram_login(bp, "SCRAM-SHA-512", user, "wrong") == 58
    described = admin.describe_user_scram_credentials([user])[user].result(15)
    infos = sorted((i.mechanism, i.iterations) for i in described.scram_credential_infos)
    assert infos == [(ScramMechanism.SCRAM_SHA_256, 8192), (ScramMechanism.SCRAM_SHA_512, 4096)]


def test_alter_validation_and_error_codes(cluster):
    ctrl, other = controller_and_other(cluster)
    brokers, store = cluster
    resp = alter(ctrl, deletions=[{"name": "", "mechanism": 1}, {"name": "nobody", "mechanism": 1},
                                  {"name": "u-bad-mech", "mechanism": 7}],
                 upsertions=[upsert("u-few", "p", iterations=4095), upsert("u-many", "p", iterations=16385),
                             upsert("u-dup", "p"), upsert("u-dup", "q"), upsert("u-ok", "p")])
    got = {r.user: (r.error_code, r.error_message) for r in resp.results}
    assert got == {
        "": (93, "Username must not be empty"),
        "nobody": (91, "Attempt to delete a user credential that does not exist"),
        "u-bad-mech": (33, "Unknown SCRAM mechanism"),
        "u-few": (93, "Too few iterations"),
        "u-many": (93, "Too many iterations"),
        "u-dup": (92, "A user credential cannot be altered twice in the same request"),
        "u-ok": (0, None),
    }
    assert not store.exists("/config/users/u-few") and not store.exists("/config/users/u-dup")
    off = alter(other, upsertions=[upsert("u-off", "p")])   # not the controller: NOT_CONTROLLER, nothing written
    assert [(r.user, r.error_code) for r in off.results] == [("u-off", 41)]
    assert not store.exists("/config/users/u-off")


def test_describe_on_any_broker(cluster):
    ctrl, other = controller_and_other(cluster)
    assert alter(ctrl, upsertions=[upsert("d-one", "p", 1, 4096), upsert("d-one", "p", 2, 8192),
                                   upsert("d-two", "p", 2, 5000)]).results[0].error_code == 0
    for bp in (ctrl, other):
        r = Raw(bp.port)
        every = r.request(50, 0, {"users": None})
        assert every.error_code == 0
        names = [x.user for x in every.results]
        assert names == sorted(names) and {"d-one", "d-two"} <= set(names)
        one = next(x for x in every.results if x.user == "d-one")
        assert [(c.mechanism, c.iterations) for c in one.credential_infos] == [(1, 4096), (2, 8192)]
        some = r.request(50, 0, {"users": [{"name": "d-two"}, {"name": "ghost"}, {"name": "d-one"},
                                           {"name": "d-one"}, {"name": ""}]})
        got = {x.user: (x.error_code, x.error_message) for x in some.results}
        assert got["d-two"] == (0, None)
        assert got["ghost"] == (91, "Attempt to describe a user credential that does not exist: ghost")
        assert got["d-one"][0] == 92
        assert got[""] == (91, "Username must not be empty")


def test_deleting_a_credential_stops_its_logins(cluster):
    ctrl, other = controller_and_other(cluster)
    brokers, store = cluster
    both = [upsert("gone", "gone-pw", 2), upsert("gone", "gone-pw", 1)]
    assert alter(ctrl, upsertions=both).results[0].error_code == 0
    assert wait_for(lambda: scram_login(other, "SCRAM-SHA-512", "gone", "gone-pw") == 0)
    assert alter(ctrl, deletions=[{"name": "gone", "mechanism": 2}]).results[0].error_code == 0
    assert set(znode(store, "/config/users/gone")["config"]) == {"SCRAM-SHA-256"}
    assert wait_for(lambda: scram_login(other, "SCRAM-SHA-512", "gone", "gone-pw") == 58)
    assert scram_login(other, "SCRAM-SHA-256", "gone", "gone-pw") == 0


def test_corrupt_credential_znode_leaves_the_broker_serving(cluster):
    ctrl, other = controller_and_other(cluster)
    brokers, store = cluster
    assert alter(ctrl, upsertions=[upsert(CORRUPT_USER, "m-pw", 2)]).results[0].error_code == 0
    assert wait_for(lambda: all(scram_login(b, "SCRAM-SHA-512", CORRUPT_USER, "m-pw") == 0 for b in brokers))
    secretish = "salt=c2FsdA==,stored_key=NOT-BASE64!!,server_key=AA==,iterations=4096"
    store.set(f"/config/users/{CORRUPT_USER}",
              json.dumps({"version": 1, "config": {"SCRAM-SHA-512": secretish}}).encode())
    create_config_change_notification(store, f"users/{CORRUPT_USER}")
    for bp in brokers:
        assert wait_for(lambda bp=bp: f"credential of user '{CORRUPT_USER}'" in bp.log())
        assert scram_login(bp, "SCRAM-SHA-512", CORRUPT_USER, "m-pw") == 58   # unusable, not fatal
        assert "NOT-BASE64" not in bp.log()
        r = Raw(bp.sasl_port)  # type: ignore[attr-defined]
        assert r.plain("alice", PLAIN_USERS["alice"]).error_code == 0
        assert r.request(3, 1, {"topics": None}).brokers
    # a znode that is not even JSON: the entity is skipped, the broker keeps going
    store.set(f"/config/users/{CORRUPT_USER}", b"{not json")
    create_config_change_notification(store, f"users/{CORRUPT_USER}")
    for bp in brokers:
        assert wait_for(lambda bp=bp: f"unreadable configs of users/{CORRUPT_USER}" in bp.log())
        assert "not json" not in bp.log()
    result = alter(ctrl, upsertions=[upsert(CORRUPT_USER, "m-pw-2", 2)]).results[0]   # Kafka fails too
    assert (result.error_code, result.error_message) == (-1, f"The configs of user {CORRUPT_USER} in ZooKeeper are "
                                                             "unreadable")
    store.delete(f"/config/users/{CORRUPT_USER}")   # the operator's repair: delete, then set again
    assert alter(ctrl, upsertions=[upsert(CORRUPT_USER, "m-pw-2", 2)]).results[0].error_code == 0
    for bp in brokers:
        assert wait_for(lambda bp=bp: scram_login(bp, "SCRAM-SHA-512", CORRUPT_USER, "m-pw-2") == 0)


def test_gssapi_on_a_sasl_listener_stops_startup_with_a_clear_error(tmp_path):
    bp = sasl_broker(tmp_path / "gssapi")
    del bp.overrides["sasl.enabled.mechanisms"]       # Kafka's default: GSSAPI
    with pytest.raises(AssertionError, match="exited"):
        bp.start()
    assert "SASL mechanism GSSAPI is not supported by kbroker" in bp.log()
    bp = sasl_broker(tmp_path / "oauth", {"sasl.enabled.mechanisms": "PLAIN,OAUTHBEARER"})
    with pytest.raises(AssertionError, match="exited"):
        bp.start()
    assert "SASL mechanism OAUTHBEARER is not supported by kbroker" in bp.log()
