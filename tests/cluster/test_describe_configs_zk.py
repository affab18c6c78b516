"""DescribeConfigs on a 3-broker ZooKeeper cluster reads a topic's configs from ZooKeeper, as Kafka does
(ZkAdminManager.describeConfigs: adminZkClient.fetchEntityConfig), so a client reads at once what it has just
altered. Each broker's own view follows /config/changes a moment later; answering from it, a DescribeConfigs sent
right after the AlterConfigs answer showed the old value (a race: several rounds). KafkaJS's admin client sends
both to the controller; raw requests go through each pair of brokers in turn."""
from __future__ import annotations

import itertools
import uuid

from tests.kafkajs import run_kafkajs
from tests.raw_client import request

from .conftest import wait_until

ROUNDS = 12


def _alter(at: str, topic: str, configs: dict[str, str]) -> None:
    answer = request(at, 33, 0, {"resources": [{"resource_type": 2, "resource_name": topic, "configs": [
        {"name": k, "value": v} for k, v in configs.items()]}], "validate_only": False})
    assert [(r.error_code, r.error_message) for r in answer.responses] == [(0, None)]


def _describe(at: str, topic: str, key: str) -> tuple[str | None, int]:
    answer = request(at, 32, 1, {"resources": [{"resource_type": 2, "resource_name": topic,
                                                "configuration_keys": [key]}], "include_synonyms": False})
    [result] = answer.results
    assert result.error_code == 0, result
    [entry] = result.configs
    return entry.value, entry.config_source


def test_describe_right_after_alter_through_another_broker_shows_the_new_value(cluster):
    topic = f"read-own-write-{uuid.uuid4().hex[:8]}"
    brokers = list(cluster.brokers.values())
    created = request(brokers[0].bootstrap, 19, 4, {"topics": [{
        "name": topic, "num_partitions": 1, "replication_factor": 3, "assignments": [], "configs": []}],
        "timeout_ms": 30_000, "validate_only": False})
    assert [t.error_code for t in created.topics] == [0]
    wait_until(lambda: all(_describe(b.bootstrap, topic, "retention.ms")[1] == 5 for b in brokers), 15,
               "every broker describes the new topic")
    pairs = itertools.cycle(itertools.permutations(brokers, 2))
    stale = []
    for i in range(ROUNDS):
        writer, reader = next(pairs)
        value = str(3_600_000 + i)
        _alter(writer.bootstrap, topic, {"retention.ms": value})
        answer = _describe(reader.bootstrap, topic, "retention.ms")
        if answer != (value, 1):  # 1: TOPIC_CONFIG
            stale.append((i, writer.port, reader.port, answer))
    assert stale == [], f"answers older than the write: {stale}"


KAFKAJS_ALTER_THEN_DESCRIBE = """
const kafka = new kafkajs.Kafka({clientId: 'read-own-write', brokers: args.brokers,
                                 logLevel: kafkajs.logLevel.NOTHING});
const admin = kafka.admin();
await admin.connect();
try {
  await admin.createTopics({topics: [{topic: args.topic, numPartitions: 1, replicationFactor: 3}],
                           waitForLeaders: true});
  const TOPIC = kafkajs.ConfigResourceTypes.TOPIC;
  const answers = [];
  for (let i = 0; i < args.rounds; i++) {
    const value = String(3600000 + i);
    await admin.alterConfigs({resources: [{type: TOPIC, name: args.topic,
                                           configEntries: [{name: 'retention.ms', value}]}]});
    const described = await admin.describeConfigs({includeSynonyms: false,
      resources: [{type: TOPIC, name: args.topic, configNames: ['retention.ms']}]});
    answers.push([value, described.resources[0].configEntries[0].configValue]);
  }
  return answers;
} finally {
  await admin.disconnect();
}
"""


def test_kafkajs_describes_what_it_just_altered(cluster):
    answers = run_kafkajs(KAFKAJS_ALTER_THEN_DESCRIBE, {
        "brokers": cluster.bootstrap.split(","), "topic": f"kafkajs-rw-{uuid.uuid4().hex[:8]}", "rounds": ROUNDS})
    assert len(answers) == ROUNDS
    assert [(i, got) for i, (wrote, got) in enumerate(answers) if got != wrote] == []
