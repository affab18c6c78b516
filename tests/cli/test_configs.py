"""`kbroker configs` against real brokers: client quotas and SCRAM credentials round trips with
kafka-configs.sh's output lines and exit codes; a SCRAM credential made by the CLI lets a real
client authenticate, and the password appears nowhere."""
from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from tests.integration.conftest import BrokerProcess
from tests.security.sasl_helpers import librdkafka_conf, run_broker, sasl_bootstrap, sasl_broker

from .conftest import failed, ok

ERROR = "Error while executing config command : "


def test_client_and_user_quotas_round_trip(broker, kbroker, unique):
    b = ["configs", "--bootstrap-server", broker.bootstrap]
    client, user = unique("c"), unique("u")
    assert ok(kbroker(*b, "--alter", "--entity-type", "clients", "--entity-name", client,
                      "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=2097152")) == \
        f"Completed updating config for client {client}.\n"
    assert ok(kbroker(*b, "--describe", "--entity-type", "clients", "--entity-name", client)) == \
        f"Quota configs for client-id '{client}' are producer_byte_rate=1048576.0, consumer_byte_rate=2097152.0\n"

    # a user's client ids: users first or clients first, a name or the default in each place
    assert ok(kbroker(*b, "--alter", "--entity-type", "users", "--entity-name", user, "--entity-type", "clients",
                      "--entity-default", "--add-config", "request_percentage=50.5")) == \
        f"Completed updating config for user {user}.\n"
    assert ok(kbroker(*b, "--alter", "--entity-type", "clients", "--entity-name", client, "--entity-type", "users",
                      "--entity-name", user, "--add-config", "producer_byte_rate=4096")) == \
        f"Completed updating config for client {client}.\n"
    lines = ok(kbroker(*b, "--describe", "--entity-type", "users", "--entity-name", user,
                       "--entity-type", "clients")).splitlines()
    assert sorted(lines) == sorted([
        f"Quota configs for user-principal '{user}', the default client-id are request_percentage=50.5",
        f"Quota configs for user-principal '{user}', client-id '{client}' are producer_byte_rate=4096.0"])
    # strict, as kafka-configs.sh: the user alone has no quota of its own
    assert ok(kbroker(*b, "--describe", "--entity-type", "users", "--entity-name", user)) == ""

    assert ok(kbroker(*b, "--alter", "--entity-type", "users", "--entity-default",
                      "--add-config", "consumer_byte_rate=10000000")) == \
        "Completed updating default config for users in the cluster.\n"
    assert ok(kbroker(*b, "--describe", "--entity-type", "users", "--entity-default")) == \
        "Quota configs for the default user-principal are consumer_byte_rate=1.0E7\n"

    assert ok(kbroker(*b, "--alter", "--entity-type", "clients", "--entity-name", client,
                      "--delete-config", "producer_byte_rate")) == f"Completed updating config for client {client}.\n"
    assert ok(kbroker(*b, "--describe", "--entity-type", "clients", "--entity-name", client)) == \
        f"Quota configs for client-id '{client}' are consumer_byte_rate=2097152.0\n"
    listed = ok(kbroker(*b, "--describe", "--entity-type", "clients")).splitlines()
    assert f"Quota configs for client-id '{client}' are consumer_byte_rate=2097152.0" in listed
    assert ok(kbroker(*b, "--alter", "--entity-type", "users", "--entity-default",
                      "--delete-config", "consumer_byte_rate"))


def test_bad_input(broker, kbroker, unique):
    b = ["configs", "--bootstrap-server", broker.bootstrap]
    client = unique("c")
    alter = [*b, "--alter", "--entity-type", "clients", "--entity-name", client]
    assert failed(kbroker(*alter, "--add-config", "producer_byte_rate=1.5")) == \
        ERROR + "AlterClientQuotas: Configuration producer_byte_rate must be a Long value (INVALID_REQUEST)"
    assert failed(kbroker(*alter, "--add-config", "producer_byte_rate=fast")) == \
        ERROR + "Cannot parse quota configuration value for producer_byte_rate: fast"
    assert failed(kbroker(*alter, "--add-config", "retention.ms=5")) == \
        ERROR + "Only quota configs can be added for 'clients' using --bootstrap-server. " \
                "Unexpected config names: retention.ms"
    assert failed(kbroker(*alter, "--add-config", "SCRAM-SHA-256=[password=hush]")) == \
        ERROR + "Only quota configs can be added for 'clients' using --bootstrap-server. " \
                "Unexpected config names: SCRAM-SHA-256"
    user = [*b, "--alter", "--entity-type", "users", "--entity-name", unique("u")]
    assert failed(kbroker(*user, "--add-config", "SCRAM-SHA-256=[password=hush],producer_byte_rate=5")) == \
        ERROR + "Cannot alter both quota and SCRAM credential configs simultaneously for 'users' using " \
                "--bootstrap-server."
    low = kbroker(*user, "--add-config", "SCRAM-SHA-256=[iterations=100,password=hush-hush]")
    assert failed(low) == ERROR + "Iterations 100 is less than the minimum 4096 required for SCRAM-SHA-256"
    bad = kbroker(*user, "--add-config", "SCRAM-SHA-256=[pass=hush-hush]")
    assert "hush-hush" not in failed(bad)
    assert failed(kbroker(*b, "--alter", "--entity-type", "users", "--entity-default",
                          "--add-config", "SCRAM-SHA-256=[password=hush]")) == \
        ERROR + "The use of --entity-default is not allowed with User SCRAM Credentials using --bootstrap-server."
    # argument errors: exit 2, usage on stderr
    assert "at least one of --add-config, --add-config-file or --delete-config" in failed(kbroker(*alter), 2)
    assert "an entity name" in failed(kbroker(*b, "--alter", "--entity-type", "clients",
                                              "--add-config", "producer_byte_rate=1"), 2)
    assert "at least one --entity-type" in failed(kbroker(*b, "--describe"), 2)
    assert "invalid choice" in failed(kbroker(*b, "--describe", "--entity-type", "groups"), 2)
    assert "only 'users' and 'clients'" in failed(kbroker(*b, "--describe", "--entity-type", "users",
                                                          "--entity-type", "users"), 2)
    assert "key=val" in failed(kbroker(*alter, "--add-config", "producer_byte_rate"), 2)
    # nothing of the refused alterations was written
    assert ok(kbroker(*b, "--describe", "--entity-type", "clients", "--entity-name", client)) == ""


@pytest.fixture(scope="module")
def scram_broker(tmp_path_factory) -> Iterator[BrokerProcess]:
    yield from run_broker(sasl_broker(tmp_path_factory.mktemp("configs-scram")))


def authenticates(bp: BrokerProcess, mechanism: str, user: str, password: str) -> bool:
    """Metadata over SASL_PLAINTEXT with these credentials: True once answered, False on the first
    authentication error (librdkafka's __AUTHENTICATION from the broker's SASL_AUTHENTICATION_FAILED)."""
    failures: list[KafkaError] = []
    producer = Producer(librdkafka_conf(bp, mechanism, user, password, error_cb=failures.append))
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            producer.list_topics(timeout=0.5)
            return True
        except KafkaException:
            producer.poll(0)
            if any(f.code() == KafkaError._AUTHENTICATION for f in failures):
                return False
    raise AssertionError(f"neither answered nor refused: {failures}")


def test_scram_credentials_round_trip(scram_broker, kbroker, tmp_path):
    bp = scram_broker
    b = ["configs", "--bootstrap-server", bp.bootstrap]
    password = "dora-Secret-9x"
    added = kbroker(*b, "--alter", "--entity-type", "users", "--entity-name", "dora", "--add-config",
                    f"SCRAM-SHA-256=[iterations=8192,password={password}],SCRAM-SHA-512=[password={password}]")
    assert ok(added) == "Completed updating config for user dora.\n"
    described = kbroker(*b, "--describe", "--entity-type", "users", "--entity-name", "dora")
    assert ok(described) == ("SCRAM credential configs for user-principal 'dora' are "
                             "SCRAM-SHA-256=iterations=8192, SCRAM-SHA-512=iterations=4096\n")
    # the credential the CLI salted works for a real client, the wrong password does not
    assert authenticates(bp, "SCRAM-SHA-256", "dora", password)
    assert authenticates(bp, "SCRAM-SHA-512", "dora", password)
    assert not authenticates(bp, "SCRAM-SHA-256", "dora", password + "x")
    # and for kbroker configs itself: --command-config with Kafka's client properties, on the SASL listener
    props = tmp_path / "dora.properties"
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
                     "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
                     f'username="dora" password="{password}";\n')
    assert ok(kbroker("configs", "--bootstrap-server", sasl_bootstrap(bp), "--command-config", str(props),
                      "--describe", "--entity-type", "users", "--entity-name", "dora")) == described.stdout

    # quotas for the same user, then one mechanism deleted: the rest stays
    assert ok(kbroker(*b, "--alter", "--entity-type", "users", "--entity-name", "dora",
                      "--add-config", "producer_byte_rate=1048576"))
    assert ok(kbroker(*b, "--alter", "--entity-type", "users", "--entity-name", "dora",
                      "--delete-config", "SCRAM-SHA-512")) == "Completed updating config for user dora.\n"
    assert ok(kbroker(*b, "--describe", "--entity-type", "users", "--entity-name", "dora")) == (
        "Quota configs for user-principal 'dora' are producer_byte_rate=1048576.0\n"
        "SCRAM credential configs for user-principal 'dora' are SCRAM-SHA-256=iterations=8192\n")
    assert authenticates(bp, "SCRAM-SHA-256", "dora", password)
    assert not authenticates(bp, "SCRAM-SHA-512", "dora", password)
    # describing every user lists dora; deleting a credential that is not there is the broker's error
    assert "SCRAM credential configs for user-principal 'dora' are SCRAM-SHA-256=iterations=8192" in \
        ok(kbroker(*b, "--describe", "--entity-type", "users")).splitlines()
    missing = failed(kbroker(*b, "--alter", "--entity-type", "users", "--entity-name", "dora",
                             "--delete-config", "SCRAM-SHA-512"))
    assert missing.startswith(ERROR + "AlterUserScramCredentials for user 'dora': ") and "RESOURCE_NOT_FOUND" in missing
    # --add-config-file (Kafka 2.8): the password stays off the command line (ps, shell history)
    secret_file = tmp_path / "erin.properties"
    secret_file.write_text(f"SCRAM-SHA-512=[iterations=4096,password={password}]\n")
    from_file = kbroker(*b, "--alter", "--entity-type", "users", "--entity-name", "erin",
                        "--add-config-file", str(secret_file))
    assert ok(from_file) == "Completed updating config for user erin.\n"
    assert authenticates(bp, "SCRAM-SHA-512", "erin", password)
    both = kbroker(*b, "--alter", "--entity-type", "users", "--entity-name", "erin", "--add-config-file",
                   str(secret_file), "--add-config", "SCRAM-SHA-512=[password=other]")
    assert both.returncode == 2 and "both in --add-config and in --add-config-file" in both.stderr
    for text in (added.stdout, added.stderr, described.stdout, from_file.stdout, from_file.stderr, bp.log()):
        assert password not in text


def test_topic_configs(broker, kbroker, unique):
    b = ["configs", "--bootstrap-server", broker.bootstrap]
    topic = unique("t")
    ok(kbroker("topics", "--bootstrap-server", broker.bootstrap, "--create", "--topic", topic, "--partitions", "1"))
    assert ok(kbroker(*b, "--describe", "--entity-type", "topics", "--entity-name", topic)) == \
        f"Dynamic configs for topic {topic} are:\n"
    assert ok(kbroker(*b, "--alter", "--entity-type", "topics", "--entity-name", topic,
                      "--add-config", "retention.ms=60000,cleanup.policy=[compact,delete]")) == \
        f"Completed updating config for topic {topic}.\n"
    lines = ok(kbroker(*b, "--describe", "--entity-type", "topics", "--entity-name", topic)).splitlines()
    assert lines[0] == f"Dynamic configs for topic {topic} are:"
    assert sorted(lines[1:]) == [
        "  cleanup.policy=compact,delete sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact,delete, "
        "DEFAULT_CONFIG:log.cleanup.policy=delete}",  # retention.ms has none: log.retention.ms is set nowhere
        "  retention.ms=60000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=60000}"]
    assert failed(kbroker(*b, "--alter", "--entity-type", "topics", "--entity-name", topic,
                          "--delete-config", "segment.ms")) == ERROR + "Invalid config(s): segment.ms"
    ok(kbroker(*b, "--alter", "--entity-type", "topics", "--entity-name", topic, "--delete-config", "retention.ms"))
    assert ok(kbroker(*b, "--describe", "--entity-type", "topics", "--entity-name", topic)).splitlines()[1:] == [
        "  cleanup.policy=compact,delete sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact,delete, "
        "DEFAULT_CONFIG:log.cleanup.policy=delete}"]
    assert f"Dynamic configs for topic {topic} are:" in ok(kbroker(*b, "--describe", "--entity-type", "topics"))
    missing = failed(kbroker(*b, "--describe", "--entity-type", "topics", "--entity-name", unique("none")))
    assert "UNKNOWN_TOPIC_OR_PARTITION" in missing
    assert "--entity-default is not allowed" in failed(kbroker(*b, "--describe", "--entity-type", "topics",
                                                               "--entity-default"), 2)
