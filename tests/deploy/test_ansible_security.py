"""The Ansible deployment of a SASL_SSL cluster (issue 13 item 5), applied for real on this machine.

One ZooKeeper and three brokers on 127.0.0.1 (as tests/deploy/test_ansible.py deploys them), each with a
single SASL_SSL listener that clients and the brokers share; the brokers log in to each other as the
inter-broker user (PLAIN, its password only in the listener's JAAS line), a CA and per-broker
certificates are made on the controller by the role (kbroker_ssl_example_ca), ACLs are on
(AclAuthorizer, allow.everyone.if.no.acl.found=false), and two SCRAM-SHA-512 users and alice's ACLs are
applied through the kbroker CLI once the brokers are up.

Checked: the files' modes and the certificate's subjectAltNames; a second site.yml run changes nothing
(SCRAM users and ACLs described first); confluent-kafka as alice (SASL_SSL, SCRAM-SHA-512, the CA as
ssl.ca.location, host name verified) produces acks=all to a replicated topic and consumes it back in a
group; bob (a SCRAM user without ACLs) gets TOPIC_AUTHORIZATION_FAILED; a wrong password fails
authentication; no password appears in the ansible output (run with -v --diff) or in the brokers' logs.
"""
from __future__ import annotations

import json
import re
import stat
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from kazoo_bridge.local_server import ZooKeeperUnavailable, free_port, java_executable, zookeeper_classpath
from tests.deploy.test_ansible import (
    BIN,
    PLAYBOOK,
    _build_wheel,
    _dependency_wheelhouse,
    _inventory,
    _recap,
    _run,
    _stop_all,
)

ACL_AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
TOPIC = "secure-orders"
GROUP = "alice-app"


@pytest.fixture(autouse=True, scope="module")
def _ansible_installed() -> None:
    assert PLAYBOOK.exists(), "ansible-core is not in .venv (make deps installs it)"


def _cli_logs_in() -> bool:
    """Whether kbroker's admin tools take --command-config (TLS/SASL logins); without it the role's
    127.0.0.1-only PLAINTEXT admin listener (kbroker_local_admin_listener) carries the admin CLI."""
    helps = [subprocess.run([str(BIN / "kbroker"), tool, "--help"], capture_output=True, text=True).stdout
             for tool in ("configs", "acls")]
    return all("--command-config" in text for text in helps)


def _secure_inventory(base: Path, wheel: Path, wheelhouse: Path, ca_dir: Path, secrets: dict[str, str]) -> dict:
    data = _inventory(base, wheel, wheelhouse)
    if not _cli_logs_in():
        print("kbroker configs/acls take no --command-config: the admin CLI uses the local admin listener")
        data["all"]["vars"]["kbroker_local_admin_listener"] = True
        used = {v for group in data["all"]["children"].values() for host in group["hosts"].values()
                for k, v in host.items() if k.endswith("_port")}
        for host in data["all"]["children"]["kbroker"]["hosts"].values():
            port = free_port()
            while port in used:   # free_port() may hand out a port picked before (it is free until bound)
                port = free_port()
            used.add(port)
            host["kbroker_local_admin_port"] = port
    data["all"]["vars"].update({
        "kbroker_security_protocol": "SASL_SSL",
        "kbroker_inter_broker_password": secrets["admin"],
        "kbroker_ssl_example_ca": True,
        "kbroker_ssl_example_ca_dir": str(ca_dir),
        "kbroker_authorizer": ACL_AUTHORIZER,
        "kbroker_allow_everyone_if_no_acl_found": False,
        "kbroker_scram_users": [
            {"name": "alice", "password": secrets["alice"], "mechanism": "SCRAM-SHA-512", "iterations": 8192},
            {"name": "bob", "password": secrets["bob"], "mechanism": "SCRAM-SHA-512", "iterations": 4096},
        ],
        "kbroker_acls": [
            {"principal": "User:alice", "operations": ["Write", "Read", "Describe"], "topic": "secure-",
             "pattern_type": "prefixed"},
            {"principal": "User:alice", "operations": ["Read"], "group": GROUP},
        ],
    })
    return data


def _playbook(inventory: Path, playbook: str, *extra: str, timeout: float = 300) -> str:
    started = time.monotonic()
    result = _run([str(PLAYBOOK), "-i", str(inventory), playbook, *extra], timeout=timeout)
    output = result.stdout + result.stderr
    print(f"{playbook} {' '.join(extra)}: {time.monotonic() - started:.1f} s")
    assert result.returncode == 0, f"{playbook} failed:\n{output[-8000:]}"
    return output


def _client_config(bootstrap: str, ca: Path, user: str, password: str, mechanism: str = "SCRAM-SHA-512") -> dict:
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL", "sasl.mechanism": mechanism,
            "sasl.username": user, "sasl.password": password, "ssl.ca.location": str(ca),
            "ssl.endpoint.identification.algorithm": "https"}


def _create_topic(config: dict) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient(config)
    futures = admin.create_topics([NewTopic(TOPIC, num_partitions=3, replication_factor=3,
                                            config={"min.insync.replicas": "2"})], request_timeout=30)
    futures[TOPIC].result(60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:   # 3 ISR members on every partition: the brokers replicate over SASL_SSL
        topic = admin.list_topics(TOPIC, timeout=10).topics[TOPIC]
        if topic.error is None and len(topic.partitions) == 3 and \
                all(len(p.isrs) == 3 for p in topic.partitions.values()):
            return
        time.sleep(0.5)
    raise AssertionError(f"{TOPIC} did not reach 3 ISR members: {topic.partitions}")


def _produce(config: dict, values: list[str]) -> list[str]:
    from confluent_kafka import Producer
    errors: list[str] = []
    producer = Producer({**config, "acks": "all", "enable.idempotence": True, "message.timeout.ms": 60_000})
    for value in values:
        producer.produce(TOPIC, value=value.encode(), key=value[-1:].encode(),
                         on_delivery=lambda err, msg: errors.append(str(err)) if err else None)
    assert producer.flush(90) == 0, "messages still in flight"
    return errors


def _consume(config: dict, group: str, expected: int, timeout: float = 60) -> tuple[list[str], list]:
    from confluent_kafka import Consumer
    consumer = Consumer({**config, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([TOPIC])
    seen: list[str] = []
    errors = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and len(seen) < expected:
            for msg in consumer.consume(100, 1.0):
                if msg.error() is None:
                    seen.append(msg.value().decode())
                else:
                    errors.append(msg.error())
                    if not msg.error().retriable():
                        return seen, errors
    finally:
        consumer.close()
    return seen, errors


def _authentication_fails(config: dict) -> str:
    """A metadata request with these credentials; returns the error text librdkafka reports."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient
    reported: list[KafkaError] = []
    admin = AdminClient({**config, "error_cb": reported.append})
    with pytest.raises(KafkaException) as failure:
        admin.list_topics(timeout=10)
    admin.poll(1)
    del admin   # its threads stop retrying now
    authentication = [e for e in reported if e.code() == KafkaError._AUTHENTICATION]
    assert authentication, ([str(e) for e in reported[:5]], str(failure.value))
    return str(authentication[0])


@pytest.mark.slow  # a ZooKeeper and brokers, started by the playbooks rather than a fixture
def test_deploy_sasl_ssl_cluster(tmp_path: Path) -> None:
    try:
        java_executable()
        zookeeper_classpath()
    except ZooKeeperUnavailable as exc:
        pytest.fail(f"the deployment test needs Debian's zookeeper package (make debs): {exc}", pytrace=False)
    started = time.monotonic()
    secrets = {name: f"{name}-{uuid.uuid4().hex}" for name in ("admin", "alice", "bob")}
    wheel = _build_wheel(tmp_path / "dist")
    ca_dir = tmp_path / "example-ca"
    inventory_data = _secure_inventory(tmp_path / "hosts", wheel, _dependency_wheelhouse(), ca_dir, secrets)
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(json.dumps(inventory_data, indent=1))
    brokers = inventory_data["all"]["children"]["kbroker"]["hosts"]
    bootstrap = ",".join(f"127.0.0.1:{h['kbroker_port']}" for h in brokers.values())
    ca = ca_dir / "ca.pem"
    outputs: list[str] = []
    try:
        # 1. the cluster, its CA and certificates, users and ACLs; -v --diff would show any secret not no_log'd
        first = _playbook(inventory, "site.yml", "-v", "--diff")
        outputs.append(first)
        recap = _recap(first)
        assert set(recap) == {"zk1", "kb1", "kb2", "kb3"} and all(r["failed"] == 0 for r in recap.values()), recap
        assert re.search(r"TASK \[kbroker : Set the SCRAM users' credentials\][^\n]*\n[^\n]*changed: \[kb1\]", first), \
            first[-6000:]
        print(f"deployed in {time.monotonic() - started:.1f} s")

        # 2. what landed on the hosts and on the controller
        private = stat.S_IRUSR | stat.S_IWUSR
        for name in ("ca.key", "kb1.key", "kb2.key", "kb3.key"):
            assert stat.S_IMODE((ca_dir / name).stat().st_mode) == private, name
        for name, host in brokers.items():
            conf = Path(host["kbroker_conf_dir"])
            properties = (conf / "server.properties").read_text()
            assert re.search(rf"^listeners=SASL_SSL://127\.0\.0\.1:{host['kbroker_port']}(,LOCAL://127\.0\.0\.1:\d+)?$",
                             properties, re.M), properties
            assert "inter.broker.listener.name=SASL_SSL\n" in properties
            assert f"authorizer.class.name={ACL_AUTHORIZER}\n" in properties
            local_admin = inventory_data["all"]["vars"].get("kbroker_local_admin_listener", False)
            assert ("super.users=User:admin;User:ANONYMOUS\n" if local_admin else "super.users=User:admin\n") \
                in properties
            assert "ssl.keystore.type=PEM\n" in properties
            for path in (conf / "server.properties", conf / "ssl" / "server.keystore.pem",
                         conf / "admin-client.properties"):
                assert stat.S_IMODE(path.stat().st_mode) == private, f"{name}: {path} is not 0600"
            keystore = (conf / "ssl" / "server.keystore.pem").read_text()
            assert "PRIVATE KEY-----" in keystore and "BEGIN CERTIFICATE" in keystore
            text = subprocess.run(["openssl", "x509", "-noout", "-text", "-in", str(ca_dir / f"{name}.pem")],
                                  capture_output=True, text=True, check=True).stdout
            assert "IP Address:127.0.0.1" in text and f"DNS:{name}" in text, text
            subprocess.run(["openssl", "verify", "-CAfile", str(ca), str(ca_dir / f"{name}.pem")], check=True,
                           capture_output=True)

        # 3. idempotence: nothing changes on a second run (certificates, files, SCRAM users, ACLs)
        second = _playbook(inventory, "site.yml", "-v", "--diff")
        outputs.append(second)
        recap = _recap(second)
        assert set(recap) == {"zk1", "kb1", "kb2", "kb3"}
        assert all(r["changed"] == 0 and r["failed"] == 0 for r in recap.values()), (recap, second[-6000:])

        # 4. the administrator (inter-broker user, super user) makes a replicated topic
        _create_topic(_client_config(bootstrap, ca, "admin", secrets["admin"], "PLAIN"))

        # 5. alice produces and consumes over SASL_SSL with SCRAM-SHA-512 under her ACLs
        alice = _client_config(bootstrap, ca, "alice", secrets["alice"])
        values = [f"order-{i}" for i in range(300)]
        assert _produce(alice, values) == []
        seen, errors = _consume(alice, GROUP, len(values))
        assert sorted(seen) == sorted(values), (len(seen), errors[:3])

        # 6. bob authenticates but has no ACL: the topic is not his
        bob = _client_config(bootstrap, ca, "bob", secrets["bob"])
        seen, errors = _consume(bob, GROUP, 1, timeout=20)
        assert not seen
        names = {e.name() for e in errors}
        assert names & {"TOPIC_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED"}, errors

        # 7. a wrong password fails authentication
        reported = _authentication_fails({**alice, "sasl.password": secrets["alice"] + "x"})
        print(f"wrong password: {reported}")

        # 8. no secret in the ansible output or in the brokers' logs
        logs = [(Path(h["kbroker_log_dir"]) / "kbroker.out").read_text() for h in brokers.values()]
        for secret_name, secret in secrets.items():
            for index, text in enumerate(outputs):
                assert secret not in text, f"the {secret_name} password is in the output of ansible run {index + 1}"
            for name, text in zip(brokers, logs):
                assert secret not in text, f"the {secret_name} password is in {name}'s log"
        assert "PRIVATE KEY" not in "".join(outputs + logs)
        print(f"whole test {time.monotonic() - started:.1f} s")
    finally:
        _stop_all(inventory_data)
