"""Consumer groups with real clients: members joining and leaving while messages flow, committed
offsets surviving a broker restart, and two groups on one topic (pub/sub) next to one group whose
members share it (queue).

Members commit synchronously after every batch they are handed, so the broker's group protocol
and offset storage are what make each message reach a group exactly once: the tests record every
(partition, offset) each member was handed, in order, and check that each partition's offsets
form exactly 0..n-1 across the whole group.
"""
from __future__ import annotations

import time
import zlib

import pytest

from .clients import DRIVERS, GroupMember, Journal, Msg, msg_content, wait_for
from .helpers import check_contiguous, create_topic, make_messages

GRACE = 1.0  # after everything arrived, keep polling this long so that late duplicates would show


def produce(driver, bootstrap: str, topic: str, msgs: list[Msg]) -> dict[tuple[int, int], tuple]:
    producer = driver.producer(bootstrap, "snappy")
    try:
        producer.send(topic, msgs)
        acks = producer.flush()
    finally:
        producer.close()
    return {ack: msg_content(m) for m, ack in zip(msgs, acks)}


def spread(msgs: list[Msg], partitions: int) -> list[Msg]:
    """Name a partition for every message, round robin, so that every partition gets some."""
    return [Msg(i % partitions, m.key, m.value, m.headers, m.timestamp) for i, m in enumerate(msgs)]


def covering(members: list[GroupMember], topic: str, partitions: int) -> bool:
    """The members' assignments are non-empty, disjoint and cover the topic: a settled generation."""
    held = [m.assignment for m in members]
    union = frozenset().union(*held)
    return (all(held) and sum(len(h) for h in held) == len(union)
            and union == {(topic, p) for p in range(partitions)})


def wait_consumed(journal: Journal, total: int, members: list[GroupMember], what: str) -> None:
    def done():
        for m in members:
            if m.error is not None:
                raise AssertionError(f"{m.name} failed: {m.error!r}")
        return len({(r.partition, r.offset) for _, r in journal.snapshot()}) >= total

    wait_for(done, what=what)
    time.sleep(GRACE)


def check_exactly_once(journal: Journal, expected: dict[tuple[int, int], tuple], start: dict[int, int] | None = None):
    entries = journal.snapshot()
    seen = [(r.partition, r.offset) for _, r in entries]
    dupes = {k for k in seen if seen.count(k) > 1}
    assert not dupes, f"handed out more than once: {sorted(dupes)[:10]}"
    assert set(seen) == set(expected), f"missing {sorted(set(expected) - set(seen))[:10]}"
    per_partition: dict[int, list[int]] = {}
    for _, r in entries:
        per_partition.setdefault(r.partition, []).append(r.offset)
        assert r.content() == expected[(r.partition, r.offset)]
    for p, offsets in per_partition.items():
        first = (start or {}).get(p, 0)
        assert offsets == list(range(first, first + len(offsets))), f"partition {p} not consumed in order"


def stop_all(members: list[GroupMember]) -> None:
    errors = []
    for m in members:
        m.stopping.set()  # all at once: each may be inside a poll
    for m in members:
        try:
            m.stop()
        except AssertionError as exc:
            errors.append(str(exc))
    assert not errors, errors


@pytest.mark.parametrize("client", list(DRIVERS))
def test_members_join_and_leave(broker, client):
    driver = DRIVERS[client]
    topic, group, partitions = f"grp-{client}", f"g-{client}", 6
    create_topic(broker.bootstrap, topic, partitions)
    seed = zlib.crc32(topic.encode())
    phases = [spread(make_messages(90, seed + i), partitions) for i in range(4)]
    journal = Journal()
    members: dict[str, GroupMember] = {}

    def start(name: str) -> GroupMember:
        members[name] = driver.member(broker.bootstrap, [topic], group, journal, name)
        members[name].start()
        return members[name]

    try:
        expected = produce(driver, broker.bootstrap, topic, phases[0])
        a, b, c = start("A"), start("B"), start("C")
        wait_for(lambda: covering([a, b, c], topic, partitions), what="A, B and C to share the partitions")
        expected.update(produce(driver, broker.bootstrap, topic, phases[1]))
        wait_consumed(journal, len(expected), [a, b, c], "phases 0-1")

        b.stop()  # leaves the group
        wait_for(lambda: covering([a, c], topic, partitions), what="A and C to take over B's partitions")
        expected.update(produce(driver, broker.bootstrap, topic, phases[2]))

        d = start("D")
        wait_for(lambda: covering([a, c, d], topic, partitions), what="D to get a share")
        expected.update(produce(driver, broker.bootstrap, topic, phases[3]))
        wait_consumed(journal, len(expected), [a, c, d], "phases 0-3")
    finally:
        stop_all([m for m in members.values() if m.is_alive()])

    check_contiguous(list(expected))
    check_exactly_once(journal, expected)
    handed = {name: sum(1 for who, _ in journal.snapshot() if who == name) for name in members}
    assert all(handed.values()), f"every member should have consumed something: {handed}"

    ends = {p: max(o for q, o in expected if q == p) + 1 for p in range(partitions)}
    assert driver.committed(broker.bootstrap, group, topic, list(range(partitions))) == ends


def test_group_of_three_different_clients(broker):
    """One member per client library in one group: the coordinator picks the protocol all three
    name (aiokafka offers only roundrobin), and the group still hands out each message once."""
    topic, group, partitions = "mixed", "g-mixed", 6
    create_topic(broker.bootstrap, topic, partitions)
    seed = zlib.crc32(topic.encode())
    journal = Journal()
    members = [DRIVERS[name].member(broker.bootstrap, [topic], group, journal, name) for name in DRIVERS]
    expected = produce(DRIVERS["confluent"], broker.bootstrap, topic, spread(make_messages(60, seed), partitions))
    try:
        for m in members:
            m.start()
        wait_for(lambda: covering(members, topic, partitions), what="the three clients to share the topic")
        expected.update(produce(DRIVERS["kafka-python"], broker.bootstrap, topic,
                                spread(make_messages(60, seed + 1), partitions)))
        wait_consumed(journal, len(expected), members, "the first two batches")
        members[2].stop()  # aiokafka leaves
        wait_for(lambda: covering(members[:2], topic, partitions), what="the other two to take over")
        expected.update(produce(DRIVERS["aiokafka"], broker.bootstrap, topic,
                                spread(make_messages(60, seed + 2), partitions)))
        wait_consumed(journal, len(expected), members[:2], "the third batch")
    finally:
        stop_all([m for m in members if m.is_alive()])
    check_exactly_once(journal, expected)
    handed = {name: sum(1 for who, _ in journal.snapshot() if who == name) for name in DRIVERS}
    assert all(handed.values()), f"every member should have consumed something: {handed}"


@pytest.mark.parametrize("client", list(DRIVERS))
def test_committed_offsets_survive_restart(broker, client):
    driver = DRIVERS[client]
    topic, group, partitions = f"resume-{client}", f"r-{client}", 3
    create_topic(broker.bootstrap, topic, partitions)
    seed = zlib.crc32(topic.encode())
    first = produce(driver, broker.bootstrap, topic, spread(make_messages(60, seed), partitions))
    journal = Journal()
    member = driver.member(broker.bootstrap, [topic], group, journal, "first")
    member.start()
    try:
        wait_consumed(journal, len(first), [member], "the first batch")
    finally:
        stop_all([member])
    check_exactly_once(journal, first)
    ends = {p: max(o for q, o in first if q == p) + 1 for p in range(partitions)}
    assert driver.committed(broker.bootstrap, group, topic, list(range(partitions))) == ends

    broker.restart()
    assert driver.committed(broker.bootstrap, group, topic, list(range(partitions))) == ends

    second = produce(driver, broker.bootstrap, topic, spread(make_messages(60, seed + 1), partitions))
    journal = Journal()
    member = driver.member(broker.bootstrap, [topic], group, journal, "second")
    member.start()
    try:
        wait_consumed(journal, len(second), [member], "the second batch")
    finally:
        stop_all([member])
    check_exactly_once(journal, second, start=ends)  # resumed where the first member stopped
    final = {p: max(o for q, o in second if q == p) + 1 for p in range(partitions)}
    assert driver.committed(broker.bootstrap, group, topic, list(range(partitions))) == final


@pytest.mark.parametrize("client", list(DRIVERS))
def test_live_group_across_restart(broker, client):
    """Members stay subscribed while the broker restarts: the group comes back from
    __consumer_offsets with its generation and members, and consumption goes on exactly once."""
    driver = DRIVERS[client]
    topic, group, partitions = f"live-{client}", f"l-{client}", 4
    create_topic(broker.bootstrap, topic, partitions)
    seed = zlib.crc32(topic.encode())
    expected = produce(driver, broker.bootstrap, topic, spread(make_messages(80, seed), partitions))
    journal = Journal()
    members = [driver.member(broker.bootstrap, [topic], group, journal, name) for name in ("A", "B")]
    try:
        for m in members:
            m.start()
        wait_for(lambda: covering(members, topic, partitions), what="A and B to share the topic")
        wait_consumed(journal, len(expected), members, "before the restart")
        before = [m.assignment for m in members]
        broker.restart()
        expected.update(produce(driver, broker.bootstrap, topic, spread(make_messages(80, seed + 1), partitions)))
        wait_consumed(journal, len(expected), members, "after the restart")
        assert [m.assignment for m in members] == before, "the restart should not have moved partitions"
    finally:
        stop_all(members)
    check_exactly_once(journal, expected)


@pytest.mark.parametrize("client", list(DRIVERS))
def test_pubsub_and_queue(broker, client):
    """Group "pub" (one member) and group "queue" (two members) read the same topic: pub sees
    everything, and the queue's members together see everything once."""
    driver = DRIVERS[client]
    topic, partitions = f"fanout-{client}", 2
    create_topic(broker.bootstrap, topic, partitions)
    seed = zlib.crc32(topic.encode())
    expected = produce(driver, broker.bootstrap, topic, spread(make_messages(60, seed), partitions))
    pub, queue = Journal(), Journal()
    x = driver.member(broker.bootstrap, [topic], f"pub-{client}", pub, "X")
    y = driver.member(broker.bootstrap, [topic], f"queue-{client}", queue, "Y")
    z = driver.member(broker.bootstrap, [topic], f"queue-{client}", queue, "Z")
    members = [x, y, z]
    try:
        for m in members:
            m.start()
        wait_for(lambda: covering([y, z], topic, partitions), what="Y and Z to share the topic")
        expected.update(produce(driver, broker.bootstrap, topic,
                                spread(make_messages(60, seed + 1), partitions)))
        wait_consumed(pub, len(expected), [x], "group pub")
        wait_consumed(queue, len(expected), [y, z], "group queue")
    finally:
        stop_all(members)
    check_exactly_once(pub, expected)
    check_exactly_once(queue, expected)
    by_member = {"Y": set(), "Z": set()}
    for who, r in queue.snapshot():
        by_member[who].add((r.partition, r.offset))
    assert by_member["Y"] and by_member["Z"], "both queue members should have consumed"
    assert not by_member["Y"] & by_member["Z"]
