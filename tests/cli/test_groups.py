"""`kbroker groups` against a real broker and a real confluent-kafka consumer group."""
from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer

from .conftest import free_port

HEADER = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
          "CLIENT-ID"]
CLIENT_ID = "cli-test-consumer"
# messages produced per partition, and how many of them the group has committed
PRODUCED = {0: 6, 1: 4, 2: 3}
COMMITTED = {0: 4, 1: 1}  # partition 2: consumed but never committed


def table(stdout: str) -> list[list[str]]:
    """Kafka's table: a blank line, the header, rows; every row's columns start where the header's do."""
    lines = stdout.split("\n")
    assert lines[0] == "" and lines[-1] == "", stdout
    header, rows = lines[1], lines[2:-1]
    assert header.split() == HEADER, header
    starts = [header.index(h) for h in HEADER]
    for row in rows:
        cells = row.split()
        assert len(cells) == len(HEADER), row
        assert [row.index(c, s) for c, s in zip(cells, starts)] == starts, (header, row)
    return [row.split() for row in rows]


@pytest.fixture(scope="module")
def consumed_group(broker, tmp_path_factory):
    """A topic of 3 partitions and a group whose one consumer read everything but committed only
    part of it. Yields (topic, group, consumer); the consumer stays in the group until closed."""
    from .conftest import run_cli
    topic, group = "cli-groups-topic", "cli-groups-group"
    r = run_cli("topics", "--bootstrap-server", broker.bootstrap, "--create", "--topic", topic, "--partitions", "3")
    assert r.returncode == 0, r.stderr
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    for partition, count in PRODUCED.items():
        for i in range(count):
            producer.produce(topic, value=f"{partition}-{i}".encode(), partition=partition)
    assert producer.flush(30) == 0

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "client.id": CLIENT_ID,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    seen = {p: 0 for p in PRODUCED}
    deadline = time.monotonic() + 30
    while sum(seen.values()) < sum(PRODUCED.values()) and time.monotonic() < deadline:
        m = consumer.poll(0.2)
        if m is None or m.error():
            continue
        assert m.offset() == seen[m.partition()]
        seen[m.partition()] += 1
        if m.partition() in COMMITTED and m.offset() + 1 == COMMITTED[m.partition()]:
            consumer.commit(message=m, asynchronous=False)  # commits offset + 1
    assert seen == PRODUCED
    yield topic, group, consumer
    consumer.close()


def test_list_and_describe_a_live_group(broker, kbroker, consumed_group):
    topic, group, consumer = consumed_group
    b = ["--bootstrap-server", broker.bootstrap]

    r = kbroker("groups", *b, "--list")
    assert r.returncode == 0 and r.stderr == ""
    assert group in r.stdout.splitlines()

    r = kbroker("groups", *b, "--describe", "--group", group)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    member = consumer.memberid()
    assert member
    assert table(r.stdout) == [
        [group, topic, "0", "4", "6", "2", member, "/127.0.0.1", CLIENT_ID],
        [group, topic, "1", "1", "4", "3", member, "/127.0.0.1", CLIENT_ID],
        [group, topic, "2", "-", "3", "-", member, "/127.0.0.1", CLIENT_ID],
    ]

    r = kbroker("groups", *b, "--describe", "--group", group, "--members", "--verbose")
    assert r.returncode == 0 and r.stderr == ""
    lines = r.stdout.split("\n")
    assert lines[0] == "" and lines[1].split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                                                    "ASSIGNMENT"]
    assert lines[2].split() == [group, member, "/127.0.0.1", CLIENT_ID, "3", f"{topic}(0,1,2)"]

    r = kbroker("groups", *b, "--describe", "--group", group, "--state")
    assert r.returncode == 0 and r.stderr == ""
    lines = r.stdout.split("\n")
    assert lines[1].split() == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]
    assert lines[2].split() == [group, broker.bootstrap, "(0)", "range", "Stable", "1"]

    r = kbroker("groups", *b, "--list", "--state")
    assert r.returncode == 0
    assert [group, "Stable"] in [line.split() for line in r.stdout.splitlines()]


def test_describe_after_the_members_left(broker, kbroker, consumed_group):
    topic, group, consumer = consumed_group
    consumer.close()  # LeaveGroup: the group is Empty at once; closing again at teardown is harmless
    b = ["--bootstrap-server", broker.bootstrap]
    r = kbroker("groups", *b, "--describe", "--group", group)
    assert r.returncode == 0, r.stderr
    assert r.stderr == f"\nConsumer group '{group}' has no active members.\n"
    # only partitions with a committed offset remain, without a member
    expected = [
        [group, topic, "0", "4", "6", "2", "-", "-", "-"],
        [group, topic, "1", "1", "4", "3", "-", "-", "-"],
    ]
    assert table(r.stdout) == expected

    # --all-groups: the same table among those of any other group on the shared broker
    r = kbroker("groups", *b, "--describe", "--all-groups")
    assert r.returncode == 0, r.stderr
    assert f"\nConsumer group '{group}' has no active members.\n" in r.stderr
    tables = [table("\n" + part + "\n") for part in r.stdout.strip("\n").split("\n\n")]
    assert expected in tables
    r = kbroker("groups", *b, "--describe", "--group", group, "--members")
    assert r.returncode == 0 and r.stdout == ""
    assert r.stderr == f"\nConsumer group '{group}' has no active members.\n"


def test_describe_an_unknown_group(broker, kbroker):
    r = kbroker("groups", "--bootstrap-server", broker.bootstrap, "--describe", "--group", "no-such-group")
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr == "Error: Consumer group 'no-such-group' does not exist.\n"


@pytest.mark.parametrize("args", [["--list"], ["--describe", "--group", "g"]])
def test_no_broker_running(kbroker, args):
    port = free_port()
    r = kbroker("groups", "--bootstrap-server", f"127.0.0.1:{port}", *args)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr == (f"Error: Executing consumer group command failed due to cannot connect to "
                        f"127.0.0.1:{port}: connection refused\n")


@pytest.mark.parametrize("args, message", [
    ([], "one of the arguments --list --describe --reset-offsets --delete-offsets is required"),
    (["--describe"], "--describe needs --group or --all-groups"),
    (["--describe", "--group", "g", "--all-groups"], "cannot be used together"),
    (["--describe", "--group", "g", "--verbose"], "--verbose only goes with --describe --members"),
    (["--describe", "--group", "g", "--members", "--state"], "not allowed with argument"),
])
def test_bad_arguments_exit_2(kbroker, args, message):
    r = kbroker("groups", "--bootstrap-server", f"127.0.0.1:{free_port()}", *args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert message in r.stderr and "Traceback" not in r.stderr
