"""DynamicBrokerConfig's write path and follow path, without a broker: Kafka 2.8's checks and messages
(DynamicBrokerConfig.validateConfigs, LogCleaner.validateReconfiguration, toPersistentProps), the layers read back
from the store less what Kafka ignores there, and another broker's layer left alone."""
from __future__ import annotations

import pytest

from kbroker.config.broker import load_config
from kbroker.config.dynamic import DynamicBrokerConfig, DynamicConfigError


@pytest.fixture
def dynamic() -> DynamicBrokerConfig:
    return DynamicBrokerConfig(load_config(None, ["broker.id=1", "log.cleaner.threads=4"]), 1)


@pytest.mark.parametrize("props, per_broker, message", [
    ({"zookeeper.connect": "elsewhere:2181"}, True, "Cannot update these configs dynamically: Set(zookeeper.connect)"),
    ({"log.retention.hours": "1"}, False, "Cannot update these configs dynamically: Set(log.retention.hours)"),
    ({"ssl.keystore.location": "/k.pem"}, True,
     "These security configs can be dynamically updated only per-listener using the listener prefix: "
     "Set(ssl.keystore.location)"),
    ({"listener.name.ssl.ssl.keystore.location": "/k.pem"}, False,
     "Cannot update these configs at default cluster level, broker id must be specified: "
     "Set(listener.name.ssl.ssl.keystore.location)"),
    ({"max.connections": "-1"}, False, "Invalid value -1 for configuration max.connections: Value must be at least 0"),
    ({"unclean.leader.election.enable": "yes"}, False,
     "Invalid value yes for configuration unclean.leader.election.enable: Expected value to be either true or false"),
    ({"log.cleaner.threads": "1"}, False,
     "Log cleaner threads cannot be reduced to less than half the current value 4"),
    ({"log.cleaner.threads": "9"}, False,
     "Log cleaner threads cannot be increased to more than double the current value 4"),
])
def test_refused_as_kafka(dynamic, props, per_broker, message):
    with pytest.raises(DynamicConfigError) as refused:
        dynamic.validate(props, per_broker)
    assert str(refused.value) == message


def test_accepted(dynamic):
    dynamic.validate({"log.retention.ms": "1000", "max.connections": "10", "log.cleaner.threads": "8"}, False)
    dynamic.validate({"listener.name.ssl.ssl.keystore.type": "PEM",
                      "sasl.kerberos.min.time.before.relogin": "58000", "some.custom.key": "x"}, True)
    assert dynamic.current.log.retention_ms != 1000  # validating changes nothing


def test_password_configs_refused_as_without_an_encoder_secret(dynamic):
    with pytest.raises(DynamicConfigError, match="^Password encoder secret not configured$"):
        dynamic.persistent({"listener.name.ssl.ssl.key.password": "secret"}, True)
    with pytest.raises(DynamicConfigError, match="^Password config can be defined only at broker level$"):
        dynamic.persistent({"listener.name.ssl.sasl.jaas.config": "x"}, False)
    assert dynamic.persistent({"log.retention.ms": "1"}, False) == {"log.retention.ms": "1"}


def test_layers_read_back_less_what_kafka_ignores(dynamic):
    seen = []
    dynamic.subscribe(lambda config, changed: seen.append(changed))
    dynamic.apply_entity("brokers/<default>", {"log.retention.ms": "1000", "broker.id": "9",
                                               "listener.name.ssl.ssl.keystore.location": "/k.pem"})
    assert dynamic.cluster_default == {"log.retention.ms": "1000"}
    dynamic.apply_entity("brokers/2", {"log.retention.ms": "5"})  # another broker's layer
    dynamic.apply_entity("brokers/1", {"log.retention.ms": "2000", "log.retention.bytes": "many"})
    assert dynamic.per_broker == {"log.retention.ms": "2000"}
    assert dynamic.current.log.retention_ms == 2000
    dynamic.apply_entity("brokers/1", {})
    assert dynamic.current.log.retention_ms == 1000
    assert seen == [frozenset({"log.retention.ms"})] * 3


def test_logged_refusals_never_show_a_password():
    from kbroker.config.dynamic import hide_passwords

    props = {"listener.name.sasl_ssl.ssl.keystore.password": "s3cret", "sasl.jaas.config": "x password=\"pw1\";",
             "log.retention.ms": "s3cret-looking"}
    text = hide_passwords("Invalid value s3cret in x password=\"pw1\"; for log.retention.ms s3cret-looking", props)
    assert "s3cret" not in text.replace("[hidden]-looking", "") and "pw1" not in text
    assert text.count("[hidden]") == 3
