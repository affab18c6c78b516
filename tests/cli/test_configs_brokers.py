"""`kbroker configs --entity-type brokers` against a real broker (embedded store): dynamic broker configs per broker
and at the cluster default, with kafka-configs.sh 2.8's output lines, errors and exit codes, and the broker taking
the change without a restart (DescribeConfigs answers from the layers the broker follows, not from the store)."""
from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.integration.conftest import BrokerProcess

from .conftest import failed, ok

ERROR = "Error while executing config command : "


@pytest.fixture(scope="module")
def broker_7(tmp_path_factory) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(tmp_path_factory.mktemp("brokers-cli"), {"broker.id": "7",
                                                                    "offsets.topic.replication.factor": "1"})
    broker.start()
    try:
        yield broker
    finally:
        broker.stop_cleanly()


def test_broker_and_default_configs_round_trip(broker_7, kbroker):
    b = ["configs", "--bootstrap-server", broker_7.bootstrap, "--entity-type", "brokers"]
    assert ok(kbroker(*b, "--describe")) == ("Dynamic configs for broker 7 are:\n"
                                             "Default configs for brokers in the cluster are:\n")
    assert ok(kbroker(*b, "--entity-default", "--alter", "--add-config", "log.cleaner.backoff.ms=20000")) == \
        "Completed updating default config for brokers in the cluster.\n"
    assert ok(kbroker(*b, "--entity-name", "7", "--alter",
                      "--add-config", "max.connections.per.ip=1000,log.cleaner.backoff.ms=30000")) == \
        "Completed updating config for broker 7.\n"

    def described() -> list[str]:
        return ok(kbroker(*b, "--describe")).splitlines()
    deadline = time.monotonic() + 15
    while "30000" not in "".join(described()) and time.monotonic() < deadline:
        time.sleep(0.2)
    lines = described()
    assert lines[0] == "Dynamic configs for broker 7 are:"
    split = lines.index("Default configs for brokers in the cluster are:")
    assert sorted(lines[1:split]) == [
        "  log.cleaner.backoff.ms=30000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:log.cleaner.backoff.ms=30000, "
        "DYNAMIC_DEFAULT_BROKER_CONFIG:log.cleaner.backoff.ms=20000, DEFAULT_CONFIG:log.cleaner.backoff.ms=15000}",
        "  max.connections.per.ip=1000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:max.connections.per.ip=1000, "
        "DEFAULT_CONFIG:max.connections.per.ip=2147483647}"]
    assert lines[split + 1:] == [  # the default entity shows only its own layer's synonym, as Kafka
        "  log.cleaner.backoff.ms=20000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:"
        "log.cleaner.backoff.ms=20000}"]

    # --delete-config of a key the layer does not set fails before anything is sent, as kafka-configs.sh
    assert failed(kbroker(*b, "--entity-name", "7", "--alter", "--delete-config", "log.retention.ms")) == \
        ERROR + "Invalid config(s): log.retention.ms"
    assert ok(kbroker(*b, "--entity-name", "7", "--alter", "--delete-config", "max.connections.per.ip")) == \
        "Completed updating config for broker 7.\n"
    deadline = time.monotonic() + 15
    while "max.connections.per.ip" in ok(kbroker(*b, "--entity-name", "7", "--describe")):
        assert time.monotonic() < deadline, "the deleted key is still in broker 7's layer"
        time.sleep(0.2)
    ok(kbroker(*b, "--entity-name", "7", "--alter", "--delete-config", "log.cleaner.backoff.ms"))
    ok(kbroker(*b, "--entity-default", "--alter", "--delete-config", "log.cleaner.backoff.ms"))


def test_broker_configs_kafka_refuses(broker_7, kbroker):
    b = ["configs", "--bootstrap-server", broker_7.bootstrap, "--entity-type", "brokers"]
    refused = failed(kbroker(*b, "--entity-name", "7", "--alter", "--add-config", "log.dirs=/elsewhere"))
    assert refused == (ERROR + "AlterConfigs of broker 7: Invalid config value for resource ConfigResource("
                       "type=BROKER, name='7'): Cannot update these configs dynamically: Set(log.dirs) "
                       "(INVALID_REQUEST)")
    refused = failed(kbroker(*b, "--entity-default", "--alter", "--add-config", "log.retention.ms=soon"))
    assert refused.endswith("Invalid config value for resource ConfigResource(type=BROKER, name=''): Invalid value "
                            "soon for configuration log.retention.ms: Not a number of type LONG "
                            "(INVALID_REQUEST)"), refused
    refused = failed(kbroker(*b, "--entity-default", "--alter",
                             "--add-config", "listener.name.plaintext.ssl.keystore.location=/k.pem"))
    assert refused.endswith("Cannot update these configs at default cluster level, broker id must be specified: "
                            "Set(listener.name.plaintext.ssl.keystore.location) (INVALID_REQUEST)"), refused
    refused = failed(kbroker(*b, "--entity-name", "7", "--alter", "--add-config", "ssl.keystore.location=/k.pem"))
    assert refused.endswith("These security configs can be dynamically updated only per-listener using the "
                            "listener prefix: Set(ssl.keystore.location) (INVALID_REQUEST)"), refused
    assert failed(kbroker(*b, "--entity-name", "seven", "--describe"), 2) == \
        "kbroker configs: error: The entity name for brokers must be a valid integer broker id, but it is: seven"
    # nothing was written: both layers are still empty
    assert ok(kbroker(*b, "--describe")) == ("Dynamic configs for broker 7 are:\n"
                                             "Default configs for brokers in the cluster are:\n")
