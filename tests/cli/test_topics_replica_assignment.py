"""`kbroker topics --replica-assignment` (kafka-topics.sh's option) against the shared single broker: the
string's format and kafka-topics.sh's own checks, the options it excludes, --create with it, and --alter
where the list covers every partition and those the topic has are left out of the request (the broker's
answer to what is left shows it). The three-broker placement is checked in
tests/cluster/test_create_partitions_assignment.py."""
from __future__ import annotations

import pytest

from kbroker.tools.topics import parse_replica_assignment

from .conftest import free_port
from .test_topics import ERROR, failed, ok, partition_lines


def test_the_format_is_kafka_topics():
    assert parse_replica_assignment("1:2,2:3,3:1") == [[1, 2], [2, 3], [3, 1]]
    assert parse_replica_assignment(" 1 : 2 , 2:3") == [[1, 2], [2, 3]]
    assert parse_replica_assignment("0,0,0") == [[0], [0], [0]]


@pytest.mark.parametrize("text, message", [
    ("1:x", "'x' in partition 0 is not a broker id"),
    ("1:2,2:3.5", "'3.5' in partition 1 is not a broker id"),
    ("1:2,,3:1", "partition 1 ('') has an empty broker id"),
    ("1:,2:3", "partition 0 ('1:') has an empty broker id"),
    ("", "partition 0 ('') has an empty broker id"),
    ("1:2:1,2:3:3", "Partition replica lists may not contain duplicate entries: 1"),
    ("1:2,2:3:1", "Partition 1 has different replication factor: 2:3:1 (3 replicas, partition 0 has 2)"),
])
def test_bad_strings_are_refused(text, message):
    with pytest.raises(ValueError) as caught:
        parse_replica_assignment(text)
    assert str(caught.value) == message


@pytest.mark.parametrize("args, message", [
    (["--create", "--topic", "t", "--replica-assignment", "1:2", "--partitions", "1"],
     "--replica-assignment cannot be used with --partitions or --replication-factor in --create"),
    (["--create", "--topic", "t", "--replica-assignment", "1:2", "--replication-factor", "2"],
     "--replica-assignment cannot be used with --partitions or --replication-factor in --create"),
    (["--describe", "--replica-assignment", "1:2"], "--replica-assignment can only be used with --create or --alter"),
    (["--create", "--topic", "t", "--replica-assignment", "1:1"],
     "--replica-assignment '1:1': Partition replica lists may not contain duplicate entries: 1"),
    (["--alter", "--topic", "t", "--partitions", "3", "--replica-assignment", "1,b,2"],
     "--replica-assignment '1,b,2': 'b' in partition 1 is not a broker id"),
])
def test_bad_arguments_exit_2(kbroker, args, message):
    # checked before connecting: no broker listens there
    result = kbroker("topics", "--bootstrap-server", f"127.0.0.1:{free_port()}", *args)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert message in result.stderr and "Traceback" not in result.stderr


def test_create_and_alter_with_an_assignment(broker, kbroker, unique):
    b = ["--bootstrap-server", broker.bootstrap]
    topic = unique("assigned")
    assert ok(kbroker("topics", *b, "--create", "--topic", topic, "--replica-assignment", "0,0")) == \
        f"Created topic {topic}.\n"
    assert ok(kbroker("topics", *b, "--describe", "--topic", topic)).splitlines()[1:] == partition_lines(topic, 2)

    # the two partitions the topic has are left out: one assignment goes, for partition 2
    assert ok(kbroker("topics", *b, "--alter", "--topic", topic, "--partitions", "3",
                      "--replica-assignment", "0,0,0")) == ""
    assert ok(kbroker("topics", *b, "--describe", "--topic", topic)).splitlines()[1:] == partition_lines(topic, 3)

    # what is left after the existing partitions is what the broker checks
    message = failed(kbroker("topics", *b, "--alter", "--topic", topic, "--partitions", "5",
                             "--replica-assignment", "0,0,0,0"))
    assert message == (f"{ERROR}cannot add partitions to topic '{topic}': Increasing the number of partitions "
                       f"by 2 but 1 assignments provided. (INVALID_REPLICA_ASSIGNMENT)")
    message = failed(kbroker("topics", *b, "--alter", "--topic", topic, "--partitions", "4",
                             "--replica-assignment", "0,0,0,7"))
    assert message == (f"{ERROR}cannot add partitions to topic '{topic}': Unknown broker(s) in replica "
                       f"assignment: 7. (INVALID_REPLICA_ASSIGNMENT)")
    assert ok(kbroker("topics", *b, "--describe", "--topic", topic)).splitlines()[1:] == partition_lines(topic, 3)
