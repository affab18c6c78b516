"""`kbroker groups --reset-offsets` / `--delete-offsets` against a real broker, checked against
the offsets a confluent-kafka client reads back with committed()."""
from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from kbroker.tools.group_reset import parse_datetime, parse_duration

BASE_MS = 1_600_000_000_000  # 2020-09-13T12:26:40.000Z; record i of a partition is stamped BASE_MS + i s
PRODUCED = {0: 10, 1: 5}
PLAN_HEADER = ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]


@pytest.fixture(scope="module")
def topic(broker):
    from .conftest import run_cli
    name = "reset-topic"
    r = run_cli("topics", "--bootstrap-server", broker.bootstrap, "--create", "--topic", name, "--partitions", "2")
    assert r.returncode == 0, r.stderr
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    for partition, count in PRODUCED.items():
        for i in range(count):
            producer.produce(name, value=b"v%d" % i, partition=partition, timestamp=BASE_MS + i * 1000)
    assert producer.flush(30) == 0
    return name


def _consumer(broker, group: str, **extra) -> Consumer:
    return Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False,
                     "auto.offset.reset": "earliest", **extra})


def commit(broker, group: str, topic: str, offsets: dict[int, int]) -> None:
    c = _consumer(broker, group)
    try:
        c.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
    finally:
        c.close()


def committed(broker, group: str, topic: str) -> dict[int, int]:
    c = _consumer(broker, group)
    try:
        return {tp.partition: tp.offset for tp in c.committed([TopicPartition(topic, p) for p in PRODUCED], 30)}
    finally:
        c.close()


def plan(stdout: str) -> dict[tuple[str, str, int], int]:
    lines = [line for line in stdout.split("\n") if line.strip()]
    header = next(i for i, line in enumerate(lines) if line.split() == PLAN_HEADER)
    return {(g, t, int(p)): int(o) for g, t, p, o in (line.split() for line in lines[header + 1:])}


def reset(kbroker, broker, group: str, *args: str):
    return kbroker("groups", "--bootstrap-server", broker.bootstrap, "--reset-offsets", "--group", group, *args)


def test_dry_run_is_the_default_and_changes_nothing(broker, kbroker, topic, unique):
    group = unique("g")
    commit(broker, group, topic, {0: 3, 1: 2})
    r = reset(kbroker, broker, group, "--all-topics", "--to-earliest")
    assert r.returncode == 0, r.stderr
    assert "No action will be performed as the --execute option is missing" in r.stderr
    assert plan(r.stdout) == {(group, topic, 0): 0, (group, topic, 1): 0}
    r = reset(kbroker, broker, group, "--topic", topic, "--to-latest", "--dry-run")
    assert r.returncode == 0 and "WARN" not in r.stderr, r.stderr
    assert plan(r.stdout) == {(group, topic, 0): 10, (group, topic, 1): 5}
    assert committed(broker, group, topic) == {0: 3, 1: 2}


def test_to_datetime_with_kafkas_formats_and_zones(broker, kbroker, topic, unique):
    group = unique("g")
    commit(broker, group, topic, {0: 1, 1: 1})
    # 12:26:43.500Z lies between records 3 and 4 of both partitions: the first at or after it is 4
    for when in ("2020-09-13T12:26:43.500", "2020-09-13T12:26:43.500Z", "2020-09-13T14:26:43.500+02:00",
                 "2020-09-13T14:26:43.500+0200", "2020-09-13T10:26:43.500-02"):
        r = reset(kbroker, broker, group, "--topic", topic, "--to-datetime", when, "--dry-run")
        assert r.returncode == 0, (when, r.stderr)
        assert plan(r.stdout) == {(group, topic, 0): 4, (group, topic, 1): 4}, when
    # record 7 exists only in partition 0; partition 1 has nothing that late: its log end, with Kafka's warning
    r = reset(kbroker, broker, group, "--topic", topic, "--to-datetime", "2020-09-13T12:26:47.000", "--execute")
    assert r.returncode == 0, r.stderr
    assert "Warn: Partition 1 from topic reset-topic is empty. Falling back to latest known offset." in r.stdout
    assert plan(r.stdout) == {(group, topic, 0): 7, (group, topic, 1): 5}
    assert committed(broker, group, topic) == {0: 7, 1: 5}
    # --by-duration counts back from now: a long duration reaches the 2020 records, a short one none
    days = (int(time.time() * 1000) - BASE_MS) // 86_400_000 + 1
    r = reset(kbroker, broker, group, "--topic", topic, "--by-duration", f"P{days}D", "--dry-run")
    assert r.returncode == 0 and plan(r.stdout) == {(group, topic, 0): 0, (group, topic, 1): 0}, r.stderr
    r = reset(kbroker, broker, group, "--topic", topic, "--by-duration", "PT1H", "--dry-run")
    assert plan(r.stdout) == {(group, topic, 0): 10, (group, topic, 1): 5}


def test_to_earliest_to_offset_and_shift_by_are_clamped_and_executed(broker, kbroker, topic, unique):
    group = unique("g")
    commit(broker, group, topic, {0: 6, 1: 3})
    r = reset(kbroker, broker, group, "--topic", topic, "--shift-by", "-2", "--execute")
    assert r.returncode == 0, r.stderr
    assert committed(broker, group, topic) == {0: 4, 1: 1}
    r = reset(kbroker, broker, group, "--all-topics", "--shift-by", "-3", "--execute")
    assert "is lower than earliest offset for topic partition reset-topic-1. Value will be set to 0" in r.stderr
    assert committed(broker, group, topic) == {0: 1, 1: 0}
    r = reset(kbroker, broker, group, "--topic", f"{topic}:1", "--to-offset", "100", "--execute")
    assert r.returncode == 0, r.stderr
    assert plan(r.stdout) == {(group, topic, 1): 5}
    assert committed(broker, group, topic) == {0: 1, 1: 5}
    r = reset(kbroker, broker, group, "--topic", f"{topic}:0,1", "--to-offset", "3", "--execute")
    assert committed(broker, group, topic) == {0: 3, 1: 3}
    r = reset(kbroker, broker, group, "--all-topics", "--to-latest", "--execute")
    assert committed(broker, group, topic) == {0: 10, 1: 5}
    r = reset(kbroker, broker, group, "--all-topics", "--to-earliest", "--execute")
    assert r.returncode == 0, r.stderr
    assert committed(broker, group, topic) == {0: 0, 1: 0}


def test_to_current_from_file_and_export(broker, kbroker, topic, unique, tmp_path):
    group = unique("g")
    commit(broker, group, topic, {0: 2})
    r = reset(kbroker, broker, group, "--topic", topic, "--to-current", "--export")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [f"{topic},0,2", f"{topic},1,5"]  # no committed offset: the log end
    csv = tmp_path / "plan.csv"
    csv.write_text(f"{topic},0,8\n{topic},1,50\n")
    r = reset(kbroker, broker, group, "--from-file", str(csv), "--execute")
    assert r.returncode == 0, r.stderr
    assert plan(r.stdout) == {(group, topic, 0): 8, (group, topic, 1): 5}
    assert committed(broker, group, topic) == {0: 8, 1: 5}


def test_an_active_group_is_refused_and_keeps_its_offsets(broker, kbroker, topic, unique):
    group = unique("g")
    commit(broker, group, topic, {0: 2, 1: 2})
    member = _consumer(broker, group)
    member.subscribe([topic])
    try:
        deadline = time.monotonic() + 30
        while not member.assignment() and time.monotonic() < deadline:
            member.poll(0.1)
        r = reset(kbroker, broker, group, "--all-topics", "--to-earliest", "--execute")
        assert r.returncode == 1
        assert (f"Error: Assignments can only be reset if the group '{group}' is inactive, but the current state "
                f"is Stable.") in r.stderr
        assert plan(r.stdout) == {}
        r = kbroker("groups", "--bootstrap-server", broker.bootstrap, "--delete-offsets", "--group", group,
                    "--topic", topic)
        assert r.returncode == 1
        assert "Error: Encounter some partition level error, see the follow-up details:" in r.stderr
        rows = [line.rstrip().split(None, 2) for line in r.stdout.split("\n")[2:] if line.strip()]
        assert rows == [[topic, "0", "Error: The consumer group is actively subscribed to the topic"],
                        [topic, "1", "Error: The consumer group is actively subscribed to the topic"]]
    finally:
        member.close()
    assert committed(broker, group, topic) == {0: 2, 1: 2}


def test_delete_offsets_of_an_empty_group(broker, kbroker, topic, unique):
    group = unique("g")
    commit(broker, group, topic, {0: 4, 1: 3})
    r = kbroker("groups", "--bootstrap-server", broker.bootstrap, "--delete-offsets", "--group", group,
                "--topic", f"{topic}:1", "--topic", "no-such-topic")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"Request succeed for deleting offsets with topic {topic}:1, no-such-topic group "
                               f"{group}\n\nTOPIC ")
    rows = [line.rstrip().split(None, 2) for line in r.stdout.split("\n")[3:] if line.strip()]
    assert rows == [["no-such-topic", "-1", "Error: This server does not host this topic-partition."],
                    [topic, "1", "Successful"]]
    assert committed(broker, group, topic) == {0: 4, 1: -1001}  # librdkafka's OFFSET_INVALID: no offset
    r = kbroker("groups", "--bootstrap-server", broker.bootstrap, "--delete-offsets", "--group", unique("none"),
                "--topic", topic)
    assert r.returncode == 1
    assert "does not exist." in r.stderr and "Error: The group id does not exist." in r.stdout


@pytest.mark.parametrize("args, message", [
    (["--reset-offsets", "--group", "g", "--all-topics"], "takes one of these options: --to-datetime"),
    (["--reset-offsets", "--group", "g", "--to-earliest"], "One of the reset scopes should be defined"),
    (["--reset-offsets", "--all-topics", "--to-earliest"], "takes one of these options: --all-groups, --group"),
    (["--reset-offsets", "--group", "g", "--all-topics", "--to-earliest", "--dry-run", "--execute"],
     "not allowed with argument"),
    (["--reset-offsets", "--group", "g", "--all-topics", "--to-datetime", "2020-01-01 00:00:00"],
     "It does not contain a 'T' according to ISO8601 format"),
    (["--reset-offsets", "--group", "g", "--all-topics", "--by-duration", "1h"], "cannot be parsed to a Duration"),
    (["--delete-offsets", "--group", "g"], "Option --delete-offsets takes the --topic option"),
    (["--delete-offsets", "--topic", "t"], "takes the --group option with exactly one group"),
    (["--describe", "--group", "g", "--to-earliest"], "only go with --reset-offsets"),
])
def test_bad_arguments_exit_2(kbroker, args, message):
    r = kbroker("groups", "--bootstrap-server", "127.0.0.1:9", *args)
    assert r.returncode == 2 and message in r.stderr, r.stderr


def test_datetime_and_duration_parsing():
    assert parse_datetime("2020-09-13T12:26:40.000") == BASE_MS
    assert parse_datetime("2020-09-13T12:26:40.5Z") == BASE_MS + 5  # Java reads the fraction as milliseconds
    assert parse_datetime("2020-09-13T13:26:40.000+01") == BASE_MS
    for bad in ("2020-09-13T12:26:40", "2020-09-13T12:26:40.123456", "2020-02-30T00:00:00.000",
                "2020-09-13T24:00:00.000", "2020-09-13T12:26:40.000+2"):
        with pytest.raises(ValueError):
            parse_datetime(bad)
    assert parse_duration("PT10M") == 600_000
    assert parse_duration("P1DT2H3M4.5S") == ((24 + 2) * 60 + 3) * 60_000 + 4_500
    assert parse_duration("-PT1S") == -1000
    assert parse_duration("p2d") == 2 * 86_400_000
    for bad in ("P", "PT", "1D", "P1H", "PT1D"):
        with pytest.raises(ValueError):
            parse_duration(bad)
