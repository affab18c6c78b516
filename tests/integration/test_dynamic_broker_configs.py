"""IncrementalAlterConfigs on a broker resource through librdkafka's admin client, one broker (embedded store): SET,
DELETE, APPEND and SUBTRACT as Kafka 2.8's ZkAdminManager applies them to the broker's dynamic layer, validate_only
writing nothing, and message.max.bytes taking effect at once for topics that do not override it, and again after a
restart."""
from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

SET, DELETE, APPEND, SUBTRACT = (AlterConfigOpType.SET, AlterConfigOpType.DELETE, AlterConfigOpType.APPEND,
                                 AlterConfigOpType.SUBTRACT)
DYNAMIC_BROKER_CONFIG = 2


def _alter(admin: AdminClient, *ops: tuple[str, str | None, AlterConfigOpType], validate_only: bool = False) -> None:
    resource = ConfigResource("BROKER", "1", incremental_configs=[
        ConfigEntry(name, value, incremental_operation=op) for name, value, op in ops])
    admin.incremental_alter_configs([resource], validate_only=validate_only)[resource].result(30)


def _layer(admin: AdminClient) -> dict[str, str]:
    """Broker 1's dynamic layer as DescribeConfigs shows it."""
    resource = ConfigResource("BROKER", "1")
    entries = admin.describe_configs([resource])[resource].result(30)
    return {name: e.value for name, e in entries.items() if int(e.source) == DYNAMIC_BROKER_CONFIG}


def _wait_layer(admin: AdminClient, expected: dict[str, str]) -> None:
    deadline = time.monotonic() + 15
    while _layer(admin) != expected:
        assert time.monotonic() < deadline, f"broker 1's dynamic layer is {_layer(admin)}, not {expected}"
        time.sleep(0.1)


def _produce(bootstrap: str, topic: str, size: int) -> KafkaError | None:
    """One record of ``size`` bytes; the delivery error (None: written)."""
    got: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": bootstrap, "message.max.bytes": 1000000, "retries": 0})
    producer.produce(topic, b"v" * size, on_delivery=lambda err, _msg: got.append(err))
    producer.flush(15)
    return got[0]


def test_incremental_alter_configs_on_a_broker(broker_factory):
    broker = broker_factory({"broker.id": "1"})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("plain", 1, 1), NewTopic("own", 1, 1, config={"max.message.bytes": "100000"})])
    time.sleep(1)
    assert _produce(broker.bootstrap, "plain", 5000) is None

    _alter(admin, ("message.max.bytes", "2000", SET), validate_only=True)  # checked, nothing written
    time.sleep(0.5)
    assert _layer(admin) == {}
    assert _produce(broker.bootstrap, "plain", 5000) is None

    _alter(admin, ("message.max.bytes", "2000", SET))
    _wait_layer(admin, {"message.max.bytes": "2000"})
    assert _produce(broker.bootstrap, "plain", 5000).code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert _produce(broker.bootstrap, "own", 5000) is None  # the topic's own override wins
    broker.restart()  # read back from the store at start, before the logs are served
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert _layer(admin) == {"message.max.bytes": "2000"}
    assert _produce(broker.bootstrap, "plain", 5000).code() == KafkaError.MSG_SIZE_TOO_LARGE

    # APPEND and SUBTRACT only on LIST keys; the list starts from the key's default when the layer lacks it
    _alter(admin, ("log.cleanup.policy", "compact", APPEND))
    _wait_layer(admin, {"message.max.bytes": "2000", "log.cleanup.policy": "delete,compact"})
    _alter(admin, ("log.cleanup.policy", "delete", SUBTRACT))
    _wait_layer(admin, {"message.max.bytes": "2000", "log.cleanup.policy": "compact"})
    with pytest.raises(KafkaException) as refused:
        _alter(admin, ("message.max.bytes", "10", APPEND))
    assert refused.value.args[0].name() == "INVALID_REQUEST"
    assert refused.value.args[0].str() == "Config value append is not allowed for config key: message.max.bytes"

    _alter(admin, ("message.max.bytes", None, DELETE), ("log.cleanup.policy", None, DELETE))
    _wait_layer(admin, {})
    assert _produce(broker.bootstrap, "plain", 5000) is None
