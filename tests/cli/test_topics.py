"""`kbroker topics` against a real broker: Kafka's output lines and exit codes."""
from __future__ import annotations

import re

import pytest

from .conftest import failed, free_port, ok

ERROR = "Error while executing topic command : "


def header_re(topic: str, partitions: int, configs: str = "") -> re.Pattern:
    # TopicId is printed, as Kafka does, only when the broker reports a non-zero topic id
    return re.compile(rf"Topic: {re.escape(topic)}(\tTopicId: [A-Za-z0-9_-]{{22}})?\tPartitionCount: {partitions}"
                      rf"\tReplicationFactor: 1\tConfigs: {re.escape(configs)}")


def partition_lines(topic: str, count: int) -> list[str]:
    return [f"\tTopic: {topic}\tPartition: {p}\tLeader: 0\tReplicas: 0\tIsr: 0" for p in range(count)]


def test_create_list_describe_alter_delete(broker, kbroker, unique):
    b = ["--bootstrap-server", broker.bootstrap]
    topic = unique("life")

    assert ok(kbroker("topics", *b, "--create", "--topic", topic, "--partitions", "1",
                      "--replication-factor", "1")) == f"Created topic {topic}.\n"

    listed = ok(kbroker("topics", *b, "--list")).splitlines()
    assert topic in listed
    assert "__consumer_offsets" in listed
    assert listed == sorted(listed)
    assert "__consumer_offsets" not in ok(kbroker("topics", *b, "--list", "--exclude-internal")).splitlines()

    lines = ok(kbroker("topics", *b, "--describe", "--topic", topic)).splitlines()
    assert header_re(topic, 1).fullmatch(lines[0]), lines[0]
    assert lines[1:] == partition_lines(topic, 1)

    assert ok(kbroker("topics", *b, "--alter", "--topic", topic, "--partitions", "3")) == ""
    lines = ok(kbroker("topics", *b, "--describe", "--topic", topic)).splitlines()
    assert header_re(topic, 3).fullmatch(lines[0]), lines[0]
    assert lines[1:] == partition_lines(topic, 3)

    assert ok(kbroker("topics", *b, "--delete", "--topic", topic)) == ""
    assert topic not in ok(kbroker("topics", *b, "--list")).splitlines()
    assert failed(kbroker("topics", *b, "--describe", "--topic", topic)) == \
        f"{ERROR}Topic '{topic}' does not exist as expected"
    assert failed(kbroker("topics", *b, "--delete", "--topic", topic)) == \
        f"{ERROR}Topic '{topic}' does not exist as expected"
    assert ok(kbroker("topics", *b, "--delete", "--topic", topic, "--if-exists")) == ""


def test_create_with_broker_defaults(broker, kbroker, unique):
    b = ["--bootstrap-server", broker.bootstrap]
    topic = unique("defaults")
    assert ok(kbroker("topics", *b, "--create", "--topic", topic)) == f"Created topic {topic}.\n"
    lines = ok(kbroker("topics", *b, "--describe", "--topic", topic)).splitlines()
    assert header_re(topic, 1).fullmatch(lines[0]), lines[0]  # num.partitions=1 by default
    assert lines[1:] == partition_lines(topic, 1)


def test_creating_an_existing_topic_fails(broker, kbroker, unique):
    b = ["--bootstrap-server", broker.bootstrap]
    topic = unique("twice")
    ok(kbroker("topics", *b, "--create", "--topic", topic))
    assert failed(kbroker("topics", *b, "--create", "--topic", topic, "--partitions", "2")) == \
        f"{ERROR}Topic '{topic}' already exists."
    assert ok(kbroker("topics", *b, "--create", "--topic", topic, "--if-not-exists")) == ""
    # and the first one is untouched
    lines = ok(kbroker("topics", *b, "--describe", "--topic", topic)).splitlines()
    assert len(lines) == 2


def test_describe_shows_config_overrides(broker, kbroker, unique):
    b = ["--bootstrap-server", broker.bootstrap]
    plain, tuned = unique("plain"), unique("tuned")
    ok(kbroker("topics", *b, "--create", "--topic", plain, "--partitions", "2"))
    ok(kbroker("topics", *b, "--create", "--topic", tuned, "--partitions", "2",
               "--config", "retention.ms=3600000", "--config", "cleanup.policy=compact"))

    lines = ok(kbroker("topics", *b, "--describe", "--topic", tuned)).splitlines()
    assert header_re(tuned, 2, "cleanup.policy=compact,retention.ms=3600000").fullmatch(lines[0]), lines[0]
    assert lines[1:] == partition_lines(tuned, 2)

    # both at once, in name order, via Kafka's comma-separated include list
    lines = ok(kbroker("topics", *b, "--describe", "--topic", f"{plain},{tuned}")).splitlines()
    assert [line for line in lines if line.startswith("Topic:")] == sorted(
        [line for line in lines if line.startswith("Topic:")], key=lambda s: s.split("\t")[0])
    headers = {line.split("\t")[0]: line for line in lines if line.startswith("Topic:")}
    assert header_re(plain, 2, "").fullmatch(headers[f"Topic: {plain}"])
    assert header_re(tuned, 2, "cleanup.policy=compact,retention.ms=3600000").fullmatch(headers[f"Topic: {tuned}"])

    lines = ok(kbroker("topics", *b, "--describe", "--topic", f"{plain},{tuned}", "--topics-with-overrides")
               ).splitlines()
    assert len(lines) == 1 and header_re(tuned, 2, "cleanup.policy=compact,retention.ms=3600000").fullmatch(lines[0])


def test_invalid_config_is_a_broker_error(broker, kbroker, unique):
    topic = unique("badconf")
    message = failed(kbroker("topics", "--bootstrap-server", broker.bootstrap, "--create", "--topic", topic,
                             "--config", "retention.ms=soon"))
    assert message.startswith(f"{ERROR}cannot create topic '{topic}': ") and message.endswith("(INVALID_CONFIG)")


def test_shrinking_partitions_fails(broker, kbroker, unique):
    b = ["--bootstrap-server", broker.bootstrap]
    topic = unique("shrink")
    ok(kbroker("topics", *b, "--create", "--topic", topic, "--partitions", "3"))
    message = failed(kbroker("topics", *b, "--alter", "--topic", topic, "--partitions", "2"))
    assert message.startswith(f"{ERROR}cannot add partitions to topic '{topic}': ")
    assert message.endswith("(INVALID_PARTITIONS)")
    assert failed(kbroker("topics", *b, "--alter", "--topic", unique("absent"), "--partitions", "2")).endswith(
        "does not exist as expected")


def test_list_with_a_regex(broker, kbroker, unique):
    b = ["--bootstrap-server", broker.bootstrap]
    stem = unique("rx")
    for suffix in ("a", "b", "c"):
        ok(kbroker("topics", *b, "--create", "--topic", f"{stem}.{suffix}"))
    assert ok(kbroker("topics", *b, "--list", "--topic", re.escape(stem) + r"\.[ab]")).splitlines() == \
        [f"{stem}.a", f"{stem}.b"]


@pytest.mark.parametrize("args, message", [
    ([], "one of the arguments --create --list --describe --alter --delete is required"),
    (["--list", "--describe"], "not allowed with argument"),
    (["--create"], "--create needs --topic"),
    (["--create", "--topic", "t", "--config", "retention.ms"], "is not KEY=VALUE"),
    (["--create", "--topic", "t", "--partitions", "0"], "--partitions must be at least 1"),
    (["--alter", "--topic", "t"], "--alter needs --partitions"),
    (["--list", "--partitions", "3"], "--partitions can only be used with --create or --alter"),
    (["--describe", "--config", "a=b"], "--config can only be used with --create"),
])
def test_bad_arguments_exit_2(kbroker, args, message):
    # no broker is needed: arguments are checked before connecting
    result = kbroker("topics", "--bootstrap-server", f"127.0.0.1:{free_port()}", *args)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_bootstrap_server_exits_2(kbroker):
    result = kbroker("topics", "--list")
    assert result.returncode == 2 and "--bootstrap-server" in result.stderr


@pytest.mark.parametrize("command", [
    ["topics", "--list"],
    ["topics", "--create", "--topic", "t"],
    ["topics", "--describe"],
])
def test_no_broker_running(kbroker, command):
    port = free_port()  # nothing listens there
    result = kbroker(command[0], "--bootstrap-server", f"127.0.0.1:{port}", *command[1:])
    assert failed(result) == f"{ERROR}cannot connect to 127.0.0.1:{port}: connection refused"


@pytest.mark.parametrize("address", ["localhost", "127.0.0.1:", "127.0.0.1:99999", ","])
def test_bad_bootstrap_address_exits_2(kbroker, address):
    result = kbroker("topics", "--bootstrap-server", address, "--list")
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "argument --bootstrap-server:" in result.stderr and "Traceback" not in result.stderr
