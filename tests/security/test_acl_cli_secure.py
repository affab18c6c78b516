"""``kbroker acls --command-config``: the tool reaches SASL (PLAIN, SCRAM-SHA-512) and SSL listeners
with Kafka's client properties, authenticates as the user named there (whose ACLs then apply), and
a wrong password fails with one line naming no secret."""
from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import BrokerProcess, free_port

from .conftest import run_broker, tls_settings
from .pki import Pki
from .sasl_helpers import create_scram_users, sasl_bootstrap, sasl_broker

ACL_CLASS = "kafka.security.authorizer.AclAuthorizer"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[BrokerProcess]:
    """PLAINTEXT (the administrator, a super user), SASL_PLAINTEXT and SSL listeners; strict ACLs."""
    bp = sasl_broker(tmp_path_factory.mktemp("acl-cli"), {"authorizer.class.name": ACL_CLASS,
                                                          "super.users": "User:ANONYMOUS", **tls_settings(pki)})
    bp.ssl_port = free_port()  # type: ignore[attr-defined]
    bp.overrides["listeners"] += f",SSL://127.0.0.1:{bp.ssl_port}"  # type: ignore[attr-defined]
    gen = run_broker(bp)
    yield next(gen)
    yield from gen


def acls(bootstrap: str, config: Path | None, *args: str) -> subprocess.CompletedProcess:
    extra = ["--command-config", str(config)] if config else []
    return subprocess.run([sys.executable, "-m", "kbroker.cli", "acls", "--bootstrap-server", bootstrap, *extra,
                           *args], capture_output=True, text=True, timeout=30)


def write(path: Path, **props: str) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


def test_sasl_plain_and_scram(secured, tmp_path):
    create_scram_users(secured, {"SCRAM-SHA-512": ("bob", "bob-secret")})
    plain = write(tmp_path / "alice.properties", **{
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                            'username="alice" password="alice-secret";'})
    scram = write(tmp_path / "bob.properties", **{
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                            'username="bob" password="bob-secret";'})
    # authenticated as alice, who may not administer ACLs (not ANONYMOUS, the super user)
    r = acls(sasl_bootstrap(secured), plain, "--list")
    assert r.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in r.stderr
    # bob gets the cluster rights through the administrator, then administers over SCRAM
    r = acls(secured.bootstrap, None, "--add", "--allow-principal", "User:bob", "--operation", "Alter",
             "--operation", "Describe", "--cluster")
    assert r.returncode == 0, r.stderr
    r = acls(sasl_bootstrap(secured), scram, "--add", "--allow-principal", "User:alice", "--operation", "Read",
             "--topic", "by-bob")
    assert r.returncode == 0, r.stderr
    assert "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)" in r.stdout
    r = acls(sasl_bootstrap(secured), scram, "--list", "--topic", "by-bob")
    assert r.returncode == 0 and "principal=User:alice" in r.stdout
    # a wrong password: Kafka's failure, one line, the password nowhere
    wrong = write(tmp_path / "wrong.properties", **{
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                            'username="bob" password="not-bobs-password";'})
    r = acls(sasl_bootstrap(secured), wrong, "--list")
    assert r.returncode == 1 and "SASL authentication failed" in r.stderr
    assert "not-bobs-password" not in r.stderr + r.stdout
    # a mechanism the listener lacks
    bad = write(tmp_path / "gssapi.properties", **{"security.protocol": "SASL_PLAINTEXT",
                                                   "sasl.mechanism": "GSSAPI"})
    r = acls(sasl_bootstrap(secured), bad, "--list")
    assert r.returncode == 1 and "sasl.mechanism GSSAPI" in r.stderr


def test_ssl(secured, pki, tmp_path):
    ssl_bootstrap = f"127.0.0.1:{secured.ssl_port}"
    good = write(tmp_path / "ssl.properties", **{"security.protocol": "SSL",
                                                 "ssl.truststore.location": str(pki.ca)})
    # TLS without a client certificate: User:ANONYMOUS, the super user here
    r = acls(ssl_bootstrap, good, "--add", "--deny-principal", "User:mallory", "--operation", "All",
             "--topic", "over-tls")
    assert r.returncode == 0, r.stderr
    assert "(principal=User:mallory, host=*, operation=ALL, permissionType=DENY)" in r.stdout
    # an untrusted broker certificate: refused, one line
    untrusted = write(tmp_path / "untrusted.properties", **{"security.protocol": "SSL"})
    r = acls(ssl_bootstrap, untrusted, "--list")
    assert r.returncode == 1 and "TLS" in r.stderr and "Traceback" not in r.stderr


def test_topics_groups_and_reassign_take_the_command_config(secured, tmp_path):
    """Every admin tool reaches a secured listener the same way (kafka-*.sh --command-config)."""
    plain = write(tmp_path / "admin.properties", **{
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                            'username="alice" password="alice-secret";'})
    r = acls(secured.bootstrap, None, "--add", "--allow-principal", "User:alice", "--operation", "All",
             "--topic", "cc-", "--resource-pattern-type", "prefixed")
    assert r.returncode == 0, r.stderr
    r = acls(secured.bootstrap, None, "--add", "--allow-principal", "User:alice", "--operation", "Describe",
             "--cluster")
    assert r.returncode == 0, r.stderr

    def tool(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "kbroker.cli", *args, "--bootstrap-server",
                               sasl_bootstrap(secured), "--command-config", str(plain)],
                              capture_output=True, text=True, timeout=30)
    r = tool("topics", "--create", "--topic", "cc-one", "--partitions", "2")
    assert r.returncode == 0, r.stderr
    r = tool("topics", "--list")
    assert r.returncode == 0 and r.stdout.split() == ["cc-one"], (r.stdout, r.stderr)  # others are not described
    r = tool("groups", "--list")
    assert r.returncode == 0, r.stderr
    r = tool("reassign", "--list")
    assert r.returncode == 0, r.stderr
    # without the file the SASL listener closes the connection: the tool fails, one line
    r = subprocess.run([sys.executable, "-m", "kbroker.cli", "topics", "--list", "--bootstrap-server",
                        sasl_bootstrap(secured)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    r = subprocess.run([sys.executable, "-m", "kbroker.cli", "topics", "--list", "--bootstrap-server",
                        sasl_bootstrap(secured), "--command-config", str(tmp_path / "missing.properties")],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "cannot read the command config" in r.stderr
