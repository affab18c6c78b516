"""The admin API through confluent_kafka.admin.AdminClient and kafka-python's KafkaAdminClient:
create, describe, describe and alter configs (incremental and legacy), add partitions, delete
records, delete topics; each step is checked by what the broker then does, not only by what the
admin call returned."""
from __future__ import annotations

import pytest

from .clients import DEADLINE, DRIVERS
from .helpers import make_messages

DEFAULT_RETENTION_MS = "604800000"
DEFAULT_MAX_MESSAGE_BYTES = "1048588"


def produce_plain(bootstrap: str, topic: str, partition: int, count: int, size: int = 100) -> list[tuple[int, int]]:
    msgs = [m.__class__(partition, m.key, (m.value or b"x")[:size], m.headers, m.timestamp)
            for m in make_messages(count, seed=partition)]
    producer = DRIVERS["confluent"].producer(bootstrap)
    try:
        producer.send(topic, msgs)
        return producer.flush()
    finally:
        producer.close()


def produce_error(bootstrap: str, topic: str, value: bytes) -> str:
    """Produce one message that the broker is expected to refuse; returns the error's name."""
    from confluent_kafka import Producer

    errors = []
    p = Producer({"bootstrap.servers": bootstrap, "message.send.max.retries": 0, "enable.idempotence": False,
                  "compression.type": "none"})
    p.produce(topic, value=value, partition=0, on_delivery=lambda err, msg: errors.append(err))
    assert p.flush(DEADLINE) == 0
    assert errors and errors[0] is not None, "the broker accepted what it should refuse"
    return errors[0].name()


def log_dirs_of(broker, topic: str) -> list[str]:
    return sorted(p.name for p in broker.dirs.glob(f"{topic}-*"))


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")  # legacy AlterConfigs on purpose
def test_confluent_admin(broker):
    from confluent_kafka import KafkaException, TopicCollection, TopicPartition
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewPartitions,
        NewTopic,
        ResourceType,
    )

    bs, topic = broker.bootstrap, "adm-confluent"
    admin = AdminClient({"bootstrap.servers": bs})

    def one(futures):
        (future,) = futures.values()
        return future.result(DEADLINE)

    def topic_configs() -> dict:
        return one(admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]))

    # create, and create again
    one(admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1,
                                      config={"retention.ms": "3600000"})]))
    with pytest.raises(KafkaException) as exc:
        one(admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)]))
    assert exc.value.args[0].name() == "TOPIC_ALREADY_EXISTS"
    assert log_dirs_of(broker, topic) == [f"{topic}-0", f"{topic}-1"]

    # describe
    desc = one(admin.describe_topics(TopicCollection([topic])))
    assert desc.name == topic and not desc.is_internal
    assert [(p.id, p.leader.id, [r.id for r in p.replicas], [r.id for r in p.isr]) for p in desc.partitions] == \
        [(0, 0, [0], [0]), (1, 0, [0], [0])]
    assert topic in admin.list_topics(timeout=DEADLINE).topics

    # describe configs: the override and a default
    configs = topic_configs()
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == 1  # DYNAMIC_TOPIC_CONFIG
    assert configs["max.message.bytes"].value == DEFAULT_MAX_MESSAGE_BYTES and configs["max.message.bytes"].is_default

    # incremental: set one key, delete another
    one(admin.incremental_alter_configs([ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("max.message.bytes", "2000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)])]))
    configs = topic_configs()
    assert configs["max.message.bytes"].value == "2000"
    assert configs["retention.ms"].value == DEFAULT_RETENTION_MS and configs["retention.ms"].is_default
    assert produce_error(bs, topic, bytes(5000)) == "MSG_SIZE_TOO_LARGE"  # the broker applies it

    # legacy AlterConfigs replaces the whole set of overrides: max.message.bytes goes back to its default
    one(admin.alter_configs([ConfigResource(ResourceType.TOPIC, topic, set_config={"retention.ms": "7200000"})]))
    configs = topic_configs()
    assert configs["retention.ms"].value == "7200000"
    assert configs["max.message.bytes"].value == DEFAULT_MAX_MESSAGE_BYTES
    assert produce_plain(bs, topic, 0, 1, size=5000) == [(0, 0)]

    # add partitions, and use the new one
    one(admin.create_partitions([NewPartitions(topic, 4)]))
    desc = one(admin.describe_topics(TopicCollection([topic])))
    assert [p.id for p in desc.partitions] == [0, 1, 2, 3]
    assert produce_plain(bs, topic, 3, 5) == [(3, o) for o in range(5)]

    # delete records: the log start offset moves, readers start there
    produce_plain(bs, topic, 0, 9)  # offsets 1..9
    deleted = one(admin.delete_records([TopicPartition(topic, 0, 6)]))
    assert deleted.low_watermark == 6
    from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": bs, "group.id": "adm-watermarks"})
    try:
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=DEADLINE) == (6, 10)
    finally:
        c.close()
    got = DRIVERS["confluent"].read(bs, topic, [0], 4)
    assert [r.offset for r in got] == [6, 7, 8, 9]

    # delete the topic: gone from metadata and from disk
    one(admin.delete_topics([topic], operation_timeout=DEADLINE))
    assert topic not in admin.list_topics(timeout=DEADLINE).topics
    with pytest.raises(KafkaException) as exc:
        one(admin.describe_topics(TopicCollection([topic])))
    assert exc.value.args[0].name() == "UNKNOWN_TOPIC_OR_PART"
    assert log_dirs_of(broker, topic) == []


def test_kafka_python_admin(broker):
    from kafka import TopicPartition
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewPartitions, NewTopic
    from kafka.errors import TopicAlreadyExistsError

    bs, topic = broker.bootstrap, "adm-kafka-python"
    admin = KafkaAdminClient(bootstrap_servers=bs, request_timeout_ms=int(DEADLINE * 1000))

    def topic_configs(config_filter: str = "all") -> dict:
        found = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter=config_filter)
        return {k: v["value"] for k, v in found["topic"][topic].items()}

    try:
        result = admin.create_topics([NewTopic(topic, 2, 1, topic_configs={"retention.ms": "3600000"})])
        assert [(t["name"], t["error_code"], t["num_partitions"]) for t in result["topics"]] == [(topic, 0, 2)]
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics([NewTopic(topic, 2, 1)])
        assert log_dirs_of(broker, topic) == [f"{topic}-0", f"{topic}-1"]

        (desc,) = admin.describe_topics([topic])
        assert desc["error_code"] == 0 and not desc["is_internal"]
        assert [(p["partition_index"], p["leader_id"], p["replica_nodes"], p["isr_nodes"])
                for p in sorted(desc["partitions"], key=lambda p: p["partition_index"])] == \
            [(0, 0, [0], [0]), (1, 0, [0], [0])]
        assert topic in admin.list_topics()

        configs = topic_configs()
        assert configs["retention.ms"] == "3600000"
        assert configs["max.message.bytes"] == DEFAULT_MAX_MESSAGE_BYTES
        assert topic_configs("modified") == {"retention.ms": "3600000"}

        # incremental
        assert admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs={
            "max.message.bytes": ("SET", "2000"), "retention.ms": ("DELETE", None)})], incremental=True) == \
            {"topic": {topic: "OK"}}
        assert topic_configs("modified") == {"max.message.bytes": "2000"}
        assert topic_configs()["retention.ms"] == DEFAULT_RETENTION_MS
        assert produce_error(bs, topic, bytes(5000)) == "MSG_SIZE_TOO_LARGE"

        # legacy AlterConfigs: kafka-python sends the other modified keys along (the request replaces
        # the whole set), so both overrides are in force afterwards
        assert admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs={
            "retention.ms": "7200000"})], incremental=False) == {"topic": {topic: "OK"}}
        assert topic_configs("modified") == {"max.message.bytes": "2000", "retention.ms": "7200000"}
        # a legacy reset sends every override but the one reset: the broker drops that one
        admin.reset_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs={"max.message.bytes": None})],
                            incremental=False)
        assert topic_configs("modified") == {"retention.ms": "7200000"}
        assert produce_plain(bs, topic, 0, 1, size=5000) == [(0, 0)]

        admin.create_partitions({topic: NewPartitions(4)})
        (desc,) = admin.describe_topics([topic])
        assert sorted(p["partition_index"] for p in desc["partitions"]) == [0, 1, 2, 3]
        assert produce_plain(bs, topic, 3, 5) == [(3, o) for o in range(5)]

        produce_plain(bs, topic, 0, 9)
        deleted = admin.delete_records({TopicPartition(topic, 0): 6})
        assert deleted[TopicPartition(topic, 0)]["low_watermark"] == 6
        got = DRIVERS["kafka-python"].read(bs, topic, [0], 4)
        assert [r.offset for r in got] == [6, 7, 8, 9]

        admin.delete_topics([topic])
        assert topic not in admin.list_topics()
        assert log_dirs_of(broker, topic) == []
    finally:
        admin.close()


def test_created_partitions_start_their_leader_epoch_at_creation(broker):
    """As Kafka's makeLeader: a new partition's leader-epoch-checkpoint holds epoch 0 at offset 0 once it is
    created, so the first Produce to each partition writes no checkpoint (two fsyncs each, on the event loop)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("epoch-at-create", num_partitions=3)])["epoch-at-create"].result(DEADLINE)
    dirs = log_dirs_of(broker, "epoch-at-create")
    assert dirs == ["epoch-at-create-0", "epoch-at-create-1", "epoch-at-create-2"]
    checkpoints = [broker.dirs / d / "leader-epoch-checkpoint" for d in dirs]
    assert [c.read_text() for c in checkpoints] == ["0\n1\n0 0\n"] * 3
    written = [c.stat().st_mtime_ns for c in checkpoints]
    assert produce_plain(broker.bootstrap, "epoch-at-create", 1, 5)
    assert [c.stat().st_mtime_ns for c in checkpoints] == written
    assert checkpoints[1].read_text() == "0\n1\n0 0\n"


def test_a_large_topic_is_created_without_stalling_other_clients(broker):
    """Creating 1,000 partitions costs a directory, files and a checkpoint each (seconds here); the broker
    keeps answering other connections meanwhile, and every partition is there when CreateTopics answers."""
    import threading
    import time

    from confluent_kafka.admin import AdminClient, NewTopic

    creator = AdminClient({"bootstrap.servers": broker.bootstrap})
    other = AdminClient({"bootstrap.servers": broker.bootstrap})
    other.list_topics(timeout=DEADLINE)  # connected before the creation starts
    latencies: list[tuple[float, float]] = []
    stop = threading.Event()

    def ask_metadata() -> None:
        while not stop.is_set():
            sent = time.monotonic()
            other.list_topics(topic="epoch-at-create-missing-not", timeout=DEADLINE)
            latencies.append((sent, time.monotonic() - sent))

    t = threading.Thread(target=ask_metadata)
    t.start()
    try:
        started = time.monotonic()
        creator.create_topics([NewTopic("wide", num_partitions=1000)],
                              operation_timeout=120, request_timeout=120)["wide"].result(120)
        took = time.monotonic() - started
    finally:
        stop.set()
        t.join()
    during = [lat for sent, lat in latencies if started <= sent <= started + took]
    assert len(during) >= 3, (took, latencies[-5:])
    assert max(during) < max(0.5 * took, 0.2), (took, sorted(during)[-5:])
    assert len(log_dirs_of(broker, "wide")) == 1000
    md = creator.list_topics(topic="wide", timeout=DEADLINE).topics["wide"]
    assert len(md.partitions) == 1000 and all(p.leader == md.partitions[0].leader >= 0
                                              for p in md.partitions.values())
    assert produce_plain(broker.bootstrap, "wide", 999, 3)


def test_a_topic_deleted_while_its_partitions_are_created_is_gone(broker):
    import threading
    import time

    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    outcome: list = []

    def create() -> None:
        future = admin.create_topics([NewTopic("short-lived", num_partitions=1000)], operation_timeout=120,
                                     request_timeout=120)["short-lived"]
        try:
            outcome.append(future.result(120))
        except Exception as exc:  # either answer is fine; the broker must not be left half-way
            outcome.append(exc)

    t = threading.Thread(target=create)
    t.start()
    deadline = time.monotonic() + DEADLINE
    while not log_dirs_of(broker, "short-lived") and time.monotonic() < deadline:
        time.sleep(0.005)
    assert log_dirs_of(broker, "short-lived"), "creation never started"
    admin.delete_topics(["short-lived"], operation_timeout=30)["short-lived"].result(DEADLINE)
    t.join(120)
    assert outcome and not t.is_alive()
    assert log_dirs_of(broker, "short-lived") == [] or all("delete" in d for d in log_dirs_of(broker, "short-lived"))
    assert "short-lived" not in admin.list_topics(timeout=DEADLINE).topics
    admin.create_topics([NewTopic("short-lived", num_partitions=2)])["short-lived"].result(DEADLINE)
    assert produce_plain(broker.bootstrap, "short-lived", 1, 3)
