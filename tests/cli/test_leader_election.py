"""``kbroker leader-election`` (kafka-leader-election.sh): argument and file checks, the answers of a
single broker (its own controller: every partition already has its only possible leader), and the
cluster ALTER ACL. The elections themselves, on three brokers, are in
tests/cluster/test_elect_leaders.py."""
from __future__ import annotations

import argparse
import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import ElectionType, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.cli import main
from kbroker.protocol import API_KEYS
from kbroker.tools import leader_election
from kbroker.tools.client import Connection
from tests.integration.conftest import BrokerProcess

NOWHERE = "127.0.0.1:1"  # nothing listens: the checks below must fail before connecting
ELECT = API_KEYS["ElectLeaders"]
CLUSTER_AUTHORIZATION_FAILED, INVALID_REQUEST = 31, 42


def elect_cli(bootstrap: str, *argv: str) -> tuple[int, str, str]:
    """Run the tool in-process: (exit status, stdout, stderr)."""
    parser = argparse.ArgumentParser()
    leader_election.add_parser(parser.add_subparsers())
    args = parser.parse_args(["leader-election", "--bootstrap-server", bootstrap, *argv])
    out, err = io.StringIO(), io.StringIO()
    return args.run(args, out, err), out.getvalue(), err.getvalue()


@pytest.mark.parametrize("args, message", [
    (["--topic", "t", "--partition", "0"], "the following arguments are required: --election-type"),
    (["--election-type", "preferred"], "one and only one of --topic, --all-topic-partitions and --path-to-json-file"),
    (["--election-type", "preferred", "--topic", "t", "--partition", "0", "--all-topic-partitions"],
     "one and only one of"),
    (["--election-type", "preferred", "--all-topic-partitions", "--path-to-json-file", "f"], "one and only one of"),
    (["--election-type", "preferred", "--topic", "t"], "--topic needs --partition"),
    (["--election-type", "preferred", "--all-topic-partitions", "--partition", "1"],
     "--partition is only allowed with --topic"),
    (["--election-type", "clean", "--all-topic-partitions"], "'clean' is not an election type: preferred or unclean"),
    (["--election-type", "unclean", "--topic", "t", "--partition", "-1"], "-1 is not a partition number"),
    (["--election-type", "unclean", "--topic", "t", "--partition", "one"], "'one' is not a partition number"),
])
def test_bad_arguments_exit_2(args, message, capsys):
    with pytest.raises(SystemExit) as exit:
        main(["leader-election", "--bootstrap-server", NOWHERE, *args])
    assert exit.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("content, message", [
    (None, "cannot read"),
    ("{", "the election file is not valid JSON"),
    ('{"version": 1}', 'the election file has no "partitions" list'),
    ('[{"topic": "t", "partition": 0}]', 'the election file has no "partitions" list'),
    ('{"partitions": {"topic": "t"}}', '"partitions" must be a list, not dict'),
    ('{"partitions": [{"partition": 0}]}', 'partition entry 0 needs a "topic" string'),
    ('{"partitions": [{"topic": "t", "partition": "0"}]}', 'partition entry 0 needs a "partition" number'),
    ('{"partitions": [{"topic": "t", "partition": -2}]}', 'partition entry 0 needs a "partition" number'),
    ('{"partitions": [{"topic": "t", "partition": 1}, {"topic": "t", "partition": 1}]}',
     "the election file contains duplicate partitions: t-1"),
])
def test_bad_election_files_fail_with_one_line(content, message, tmp_path: Path):
    path = tmp_path / "election.json"
    if content is not None:
        path.write_text(content)
    code, out, err = elect_cli(NOWHERE, "--election-type", "preferred", "--path-to-json-file", str(path))
    assert (code, out) == (1, "")
    assert err.startswith("Error: ") and message in err and err.count("\n") == 1, err


def test_unreadable_admin_config_is_one_line(tmp_path: Path):
    code, out, err = elect_cli(NOWHERE, "--election-type", "preferred", "--all-topic-partitions",
                               "--admin.config", str(tmp_path / "missing.properties"))
    assert (code, out) == (1, "")
    assert err.startswith("Error: cannot read the command config") and err.count("\n") == 1, err


def test_unreachable_broker_is_one_line():
    code, out, err = elect_cli(NOWHERE, "--election-type", "preferred", "--all-topic-partitions")
    assert (code, out) == (1, "")
    assert err == "Error: cannot connect to 127.0.0.1:1: connection refused\n"


def test_single_broker_answers_as_a_one_broker_cluster(broker, unique, tmp_path: Path):
    topic = unique("t")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)

    code, out, err = elect_cli(broker.bootstrap, "--election-type", "preferred", "--topic", topic, "--partition", "1")
    assert (code, out, err) == (0, f"Valid replica already elected for partitions {topic}-1\n", "")
    code, out, err = elect_cli(broker.bootstrap, "--election-type", "unclean", "--all-topic-partitions")
    assert (code, out, err) == (0, "", "")  # nothing needed an election: nothing listed

    path = tmp_path / "election.json"
    path.write_text(json.dumps({"partitions": [{"topic": topic, "partition": 0}, {"topic": topic, "partition": 5}]}))
    code, out, err = elect_cli(broker.bootstrap, "--election-type", "unclean", "--path-to-json-file", str(path))
    assert code == 1
    assert out.splitlines() == [
        f"Valid replica already elected for partitions {topic}-0",
        f"Error completing leader election (UNCLEAN) for partition: {topic}-5: "
        "org.apache.kafka.common.errors.UnknownTopicOrPartitionException: The partition does not exist."]
    assert err == "Error: 1 replica(s) could not be elected\n"

    result = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)]).result(30)
    assert [e.code() for e in result.values()] == [KafkaError.ELECTION_NOT_NEEDED]

    conn = Connection(broker.host, broker.port)
    try:  # an election type that is neither 0 nor 1 is refused, with a message
        bad = conn.send(ELECT, {"election_type": 2, "timeout_ms": 1000,
                                "topic_partitions": [{"topic": topic, "partition_id": [0]}]})
        (result,) = [p for r in bad.replica_election_results for p in r.partition_result]
        assert (bad.error_code, result.error_code) == (INVALID_REQUEST, INVALID_REQUEST)
        assert "unknown election type 2" in result.error_message
    finally:
        conn.close()


@pytest.fixture(scope="module")
def locked_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """Clients on PLAINTEXT are User:ANONYMOUS, whom no ACL allows anything."""
    bp = BrokerProcess(tmp_path_factory.mktemp("elect-acl"), {
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "super.users": "User:admin",
        "allow.everyone.if.no.acl.found": "false"})
    bp.start()
    try:
        yield bp
    finally:
        bp.kill()


def test_cluster_alter_is_required(locked_broker: BrokerProcess):
    code, out, err = elect_cli(locked_broker.bootstrap, "--election-type", "preferred", "--topic", "t",
                               "--partition", "0")
    assert (code, out, err) == (1, "Not authorized to perform leader election\n",
                                "Error: Not authorized to perform leader election\n")
    conn = Connection(locked_broker.host, locked_broker.port)
    try:
        named = conn.send(ELECT, {"election_type": 0, "timeout_ms": 1000,
                                  "topic_partitions": [{"topic": "t", "partition_id": [0, 1]}]})
        assert named.error_code == CLUSTER_AUTHORIZATION_FAILED
        assert [(r.topic, p.partition_id, p.error_code) for r in named.replica_election_results
                for p in r.partition_result] == [("t", 0, 31), ("t", 1, 31)]
        every = conn.send(ELECT, {"election_type": 1, "timeout_ms": 1000, "topic_partitions": None}, version=1)
        assert (every.error_code, every.replica_election_results) == (CLUSTER_AUTHORIZATION_FAILED, [])
    finally:
        conn.close()
