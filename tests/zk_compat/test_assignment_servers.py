"""Replica placement with several brokers per server (issue 24 item 2): brokers that advertise one host
are one server, and no partition gets two replicas on one server while a server holds none; when every
broker is its own server the assignment is Kafka's (AdminUtils.assignReplicasToBrokers) unchanged."""
from __future__ import annotations

import random
from collections import Counter

import pytest

from zk_compat.assignment import (
    BrokerMetadata,
    RackAwareMode,
    assign_replicas_for_new_partitions,
    assign_replicas_to_brokers,
    broker_metadatas,
    rack_alternated_brokers,
)
from zk_compat.servers import crowded_servers, servers_of

# six brokers on three servers, two each; the host-mates are not neighbours by id
HOST_OF = {1: "127.0.0.2", 2: "127.0.0.3", 3: "127.0.0.4", 4: "127.0.0.2", 5: "127.0.0.3", 6: "127.0.0.4"}


def _metas(racks: dict[int, str] | None, hosts: dict[int, str] | None) -> list[BrokerMetadata]:
    ids = sorted(racks or hosts or {})
    return [BrokerMetadata(b, (racks or {}).get(b), (hosts or {}).get(b)) for b in ids]


@pytest.mark.parametrize("racks", [
    None,                                                      # no broker.rack at all
    {b: h for b, h in HOST_OF.items()},                        # host mode: rack = the server's host
    {1: "a", 2: "a", 4: "a", 5: "a", 3: "b", 6: "b"},          # two racks over three servers
    {1: "a", 2: "b", 3: "c", 4: "a", 5: "b", 6: "c"},          # racks named apart from the hosts
], ids=["no-racks", "rack-is-host", "two-racks", "named-racks"])
def test_six_brokers_on_three_servers_never_two_replicas_on_one(racks):
    metas = _metas(racks, HOST_OF)
    rack_count = len(set(racks.values())) if racks else 0
    for seed in range(60):
        partitions = random.Random(seed).randrange(1, 61)
        assignment = assign_replicas_to_brokers(metas, partitions, 3, rng=random.Random(seed))
        assert sorted(assignment) == list(range(partitions))
        for replicas in assignment.values():
            assert len({HOST_OF[b] for b in replicas}) == 3, (seed, assignment)
            if racks:
                assert len({racks[b] for b in replicas}) == min(3, rack_count)  # Kafka's rack rule still holds
        if partitions % 6 == 0:  # leaders over every broker, evenly
            leaders = Counter(r[0] for r in assignment.values())
            assert set(leaders.values()) == {partitions // 6} and len(leaders) == 6


def test_new_partitions_on_shared_servers_stay_apart():
    metas = _metas(None, HOST_OF)
    existing = assign_replicas_to_brokers(metas, 4, 3, rng=random.Random(7))
    added = assign_replicas_for_new_partitions(existing, metas, 40)
    assert sorted(added) == list(range(4, 40))
    for replicas in added.values():
        assert len({HOST_OF[b] for b in replicas}) == 3


def test_more_replicas_than_servers_spread_over_every_server():
    hosts = {b: f"server-{b % 2}" for b in range(1, 7)}  # six brokers on two servers, RF 3
    for seed in range(20):
        for replicas in assign_replicas_to_brokers(_metas(None, hosts), 12, 3, rng=random.Random(seed)).values():
            assert len(set(replicas)) == 3 and {hosts[b] for b in replicas} == {"server-0", "server-1"}


def test_a_server_spanning_two_racks_keeps_its_replicas_apart():
    # a misconfiguration: broker 1 and 2 on one machine with different racks; the machine wins
    hosts = {1: "h1", 2: "h1", 3: "h2", 4: "h3"}
    racks = {1: "a", 2: "b", 3: "a", 4: "b"}
    for seed in range(30):
        for replicas in assign_replicas_to_brokers(_metas(racks, hosts), 8, 3, rng=random.Random(seed)).values():
            assert len({hosts[b] for b in replicas}) == 3


def test_without_racks_shared_servers_place_as_racks_named_after_them():
    """What tools that know only racks compute with broker.rack = host is what the broker places."""
    for seed in range(20):
        by_server = assign_replicas_to_brokers(_metas(None, HOST_OF), 24, 3, rng=random.Random(seed))
        by_rack = assign_replicas_to_brokers(_metas(HOST_OF, None), 24, 3, rng=random.Random(seed))
        assert by_server == by_rack


# (broker ids, racks or None, partitions, replication factor, fixed start index, start partition id)
KAFKA_CASES = [
    ([0, 1, 2, 3, 4], None, 10, 3, 0, -1),
    ([0, 1, 2, 3, 4], None, 10, 3, -1, -1),
    ([1, 2, 3], None, 7, 3, -1, -1),
    ([3, 7, 11, 12], None, 9, 2, -1, 4),
    ([5], None, 3, 1, -1, -1),
    ([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], None, 37, 4, -1, -1),
    ([0, 1, 2, 3, 4, 5], {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}, 7, 3, 0, 0),
    ([0, 1, 2, 3, 4, 5], {0: "rack1", 1: "rack2", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack1"}, 13, 3, -1, -1),
    ([1, 2, 3, 4, 5], {1: "a", 2: "b", 3: "a", 4: "b", 5: "a"}, 10, 2, -1, -1),
    ([1, 2, 3, 4, 5, 6, 7, 8, 9], {i: f"r{i % 3}" for i in range(1, 10)}, 27, 3, 2, 5),
]


@pytest.mark.parametrize("ids, racks, partitions, rf, fixed_start, start_partition", KAFKA_CASES)
def test_every_broker_on_its_own_server_is_kafkas_assignment(ids, racks, partitions, rf, fixed_start,
                                                             start_partition):
    # host names in the reverse order of the ids, so that an order by host name would show
    own_hosts = {b: f"host-{1000 - b:04d}.example.net" for b in ids}
    for seed in range(8):
        kafka = assign_replicas_to_brokers(_metas(racks, dict.fromkeys(ids)) if racks else ids, partitions, rf,
                                           fixed_start_index=fixed_start, start_partition_id=start_partition,
                                           rng=random.Random(seed))
        placed = assign_replicas_to_brokers(_metas(racks, own_hosts), partitions, rf,
                                            fixed_start_index=fixed_start, start_partition_id=start_partition,
                                            rng=random.Random(seed))
        assert placed == kafka


@pytest.mark.parametrize("ids, racks, partitions, rf, fixed_start, start_partition", KAFKA_CASES)
def test_every_broker_on_one_server_is_kafkas_assignment(ids, racks, partitions, rf, fixed_start, start_partition):
    """Brokers all on one machine (a test cluster on 127.0.0.1) have no second server to spread over."""
    for seed in range(8):
        kafka = assign_replicas_to_brokers(_metas(racks, dict.fromkeys(ids)) if racks else ids, partitions, rf,
                                           fixed_start_index=fixed_start, start_partition_id=start_partition,
                                           rng=random.Random(seed))
        placed = assign_replicas_to_brokers(_metas(racks, dict.fromkeys(ids, "127.0.0.1")), partitions, rf,
                                            fixed_start_index=fixed_start, start_partition_id=start_partition,
                                            rng=random.Random(seed))
        assert placed == kafka


def test_every_broker_on_its_own_server_matches_kafkas_published_examples():
    # AdminUtilsTest.testReplicaAssignment and AdminRackAwareTest's rack-alternated example (apache/kafka core tests)
    hosts = {b: f"10.0.0.{20 - b}" for b in range(6)}
    assert assign_replicas_to_brokers(_metas(None, {b: hosts[b] for b in range(5)}), 10, 3, fixed_start_index=0) == {
        0: [0, 1, 2], 1: [1, 2, 3], 2: [2, 3, 4], 3: [3, 4, 0], 4: [4, 0, 1],
        5: [0, 2, 3], 6: [1, 3, 4], 7: [2, 4, 0], 8: [3, 0, 1], 9: [4, 1, 2]}
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert rack_alternated_brokers(racks, hosts) == [0, 3, 1, 5, 4, 2]
    assert assign_replicas_to_brokers(_metas(racks, hosts), 7, 3, fixed_start_index=0, start_partition_id=0) == {
        0: [0, 3, 1], 1: [3, 1, 5], 2: [1, 5, 4], 3: [5, 4, 2], 4: [4, 2, 0], 5: [2, 0, 3], 6: [0, 4, 2]}


def test_brokers_of_a_rack_alternate_between_its_servers():
    racks = {1: "a", 2: "a", 3: "a", 4: "a", 5: "b", 6: "b"}
    hosts = {1: "h1", 2: "h1", 3: "h2", 4: "h2", 5: "h3", 6: "h3"}
    assert rack_alternated_brokers(racks) == [1, 5, 2, 6, 3, 4]
    assert rack_alternated_brokers(racks, hosts) == [1, 5, 3, 6, 2, 4]


def test_broker_metadatas_keep_servers_in_every_rack_mode():
    servers = {0: "h1", 1: "h1", 2: "h2"}
    for mode in RackAwareMode:
        metas = broker_metadatas([(2, None), (0, None), (1, None)], mode, servers)
        assert [(m.id, m.server) for m in metas] == [(0, "h1"), (1, "h1"), (2, "h2")]
    disabled = broker_metadatas([(0, "r"), (1, "r"), (2, "s")], RackAwareMode.DISABLED, servers)
    assert [m.rack for m in disabled] == [None, None, None] and [m.server for m in disabled] == ["h1", "h1", "h2"]


def test_servers_from_advertised_hosts():
    servers = servers_of({
        1: ["kb1.example.net", "10.0.0.5"],  # one broker, two names: one server
        2: ["10.0.0.5"],
        3: ["KB1.Example.NET"],              # DNS names are case-insensitive
        4: ["kb2.example.net"],
        5: [],                               # registered without endpoints: its own server
    })
    assert servers[1] == servers[2] == servers[3] == "10.0.0.5"
    assert servers[4] == "kb2.example.net"
    assert servers[5] not in {servers[1], servers[4]}
    assert crowded_servers([1, 4, 2], servers) == {"10.0.0.5": [1, 2]}
    assert crowded_servers([1, 4, 5], servers) == {}
