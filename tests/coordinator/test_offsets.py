"""OffsetCommit / OffsetFetch semantics, the admin views (describe, list, delete) and offset
expiry."""
from __future__ import annotations

import asyncio

from kbroker.coordinator.group import GroupConfig, GroupCoordinator, OffsetAndMetadata
from kbroker.coordinator.group.offsets_log import GroupKey, OffsetKey, decode_key, iter_batches

from .conftest import START_MS, Env, ManualTimer, settle, subscription
from .helpers import form_group, stable_group

DAY_MS = 24 * 3600 * 1000


async def test_member_commit_then_fetch(env):
    results, _ = await stable_group(env, 2)
    member = results[1].member_id
    result = await env.coordinator.commit_offsets("g", member, 1, None, {
        ("orders", 0): (100, 4, "from-member"), ("orders", 1): (200, -1, None)})
    assert result == {("orders", 0): 0, ("orders", 1): 0}
    fetched = env.coordinator.fetch_offsets("g", [("orders", 0), ("orders", 1), ("orders", 2)])
    assert fetched == {("orders", 0): (100, 4, "from-member", 0), ("orders", 1): (200, -1, "", 0),
                       ("orders", 2): (-1, -1, "", 0)}
    assert env.coordinator.fetch_offsets("g", None) == {("orders", 0): (100, 4, "from-member", 0),
                                                        ("orders", 1): (200, -1, "", 0)}
    # a later commit wins
    await env.coordinator.commit_offsets("g", member, 1, None, {("orders", 0): (150, 5, "")})
    assert env.coordinator.fetch_offsets("g", [("orders", 0)]) == {("orders", 0): (150, 5, "", 0)}


async def test_standalone_consumer_commits_without_membership(env):
    result = await env.coordinator.commit_offsets("standalone", "", -1, None, {("t", 0): (7, -1, "meta")})
    assert result == {("t", 0): 0}
    assert env.coordinator.fetch_offsets("standalone", [("t", 0)]) == {("t", 0): (7, -1, "meta", 0)}
    description = env.coordinator.describe_group("standalone")
    assert (description.state, description.protocol_type, description.members) == ("Empty", "", ())
    assert [(g.group_id, g.protocol_type, g.state) for g in env.coordinator.list_groups()[1]] == [
        ("standalone", "", "Empty")]
    # again, into the now existing Empty group
    assert await env.coordinator.commit_offsets("standalone", "", -1, None, {("t", 0): (8, -1, "")}) == {("t", 0): 0}
    assert env.coordinator.fetch_offsets("standalone", [("t", 0)])[("t", 0)][0] == 8


async def test_group_emptied_by_its_members_accepts_simple_commits(env):
    results, _ = await stable_group(env, 1)
    env.coordinator.leave_group("g", [results[0].member_id])
    assert await env.coordinator.commit_offsets("g", "", -1, None, {("t", 0): (3, -1, "")}) == {("t", 0): 0}


async def test_commit_timestamps_default_to_now_and_v1_may_set_them(env):
    env.advance(5)
    await env.coordinator.commit_offsets("s", "", -1, None, {("t", 0): (1, -1, ""), ("t", 1): (2, -1, "", 12345)})
    offsets = env.coordinator.get_group("s").offsets
    assert offsets[("t", 0)] == OffsetAndMetadata(1, -1, "", START_MS + 5, None)
    assert offsets[("t", 1)].commit_timestamp_ms == 12345


async def test_explicit_retention_sets_an_expire_timestamp(env):
    await env.coordinator.commit_offsets("s", "", -1, None, {("t", 0): (1, -1, "")}, retention_ms=60_000)
    assert env.coordinator.get_group("s").offsets[("t", 0)].expire_timestamp_ms == START_MS + 60_000
    env.advance(59_999)
    assert await env.coordinator.cleanup_expired_offsets() == 0
    env.advance(1)
    assert await env.coordinator.cleanup_expired_offsets() == 1
    assert env.coordinator.get_group("s") is None  # Empty and offset-less: gone
    assert env.coordinator.fetch_offsets("s", [("t", 0)]) == {("t", 0): (-1, -1, "", 0)}


async def test_fetch_for_an_unknown_group(env):
    assert env.coordinator.fetch_offsets("nobody", None) == {}
    assert env.coordinator.fetch_offsets("nobody", [("t", 3)]) == {("t", 3): (-1, -1, "", 0)}


async def test_describe_group_in_each_state(env):
    assert env.coordinator.describe_group("nobody").state == "Dead"
    results = await form_group(env, 2)
    completing = env.coordinator.describe_group("g")
    assert completing.state == "CompletingRebalance" and completing.protocol_name == ""
    assert [(m.member_id, m.metadata, m.assignment) for m in completing.members] == [
        (results[0].member_id, b"", b""), (results[1].member_id, b"", b"")]
    env.sync("g", 1, results[1].member_id)
    env.sync("g", 1, results[0].member_id, assignments={results[0].member_id: b"A", results[1].member_id: b"B"})
    await settle()
    stable = env.coordinator.describe_group("g")
    assert (stable.error, stable.state, stable.protocol_type, stable.protocol_name) == (
        0, "Stable", "consumer", "range")
    assert [(m.client_id, m.client_host, m.metadata, m.assignment) for m in stable.members] == [
        ("client0", "/127.0.0.1", b"range-meta", b"A"), ("client1", "/127.0.0.1", b"range-meta", b"B")]


async def test_list_groups_with_a_states_filter(env):
    await stable_group(env, 1, group="stable-group")
    await env.coordinator.commit_offsets("empty-group", "", -1, None, {("t", 0): (1, -1, "")})
    env.join("joining-group")
    await settle()
    def names(states):
        error, groups = env.coordinator.list_groups(states)
        assert error == 0
        return sorted(g.group_id for g in groups)
    assert names(None) == ["empty-group", "joining-group", "stable-group"]
    assert names([]) == ["empty-group", "joining-group", "stable-group"]
    assert names(["Stable"]) == ["stable-group"]
    assert names(["empty", "PREPARINGREBALANCE"]) == ["empty-group", "joining-group"]
    assert names(["Dead"]) == []


async def test_delete_groups_removes_offsets_with_tombstones(env):
    results, _ = await stable_group(env, 1)
    await env.coordinator.commit_offsets("g", results[0].member_id, 1, None,
                                         {("t", 0): (5, -1, ""), ("t", 1): (6, -1, "")})
    env.coordinator.leave_group("g", [results[0].member_id])
    partition = env.coordinator.partition_for("g")
    before = len(env.log.partitions[partition])
    assert await env.coordinator.delete_groups(["g"]) == {"g": 0}
    assert env.coordinator.get_group("g") is None
    assert env.coordinator.fetch_offsets("g", [("t", 0)]) == {("t", 0): (-1, -1, "", 0)}
    written = env.log.partitions[partition][before:]
    assert len(written) == 1
    records = next(iter_batches(written[0])).records
    assert [(decode_key(k), v) for k, v in records] == [
        (OffsetKey("g", "t", 0), None), (OffsetKey("g", "t", 1), None), (GroupKey("g"), None)]


async def test_deleting_an_offsets_only_group_writes_no_group_tombstone(env):
    await env.coordinator.commit_offsets("s", "", -1, None, {("t", 0): (5, -1, "")})
    partition = env.coordinator.partition_for("s")
    before = len(env.log.partitions[partition])
    assert await env.coordinator.delete_groups(["s"]) == {"s": 0}
    records = next(iter_batches(env.log.partitions[partition][before])).records
    assert [type(decode_key(k)).__name__ for k, _ in records] == ["OffsetKey"]


async def test_offsets_of_an_empty_consumer_group_expire_a_retention_after_it_emptied():
    env = Env(offsets_retention_ms=DAY_MS)
    member = env.join("g", session_ms=1_800_000)
    await settle()
    env.advance(6000)
    await settle()
    member_id = member.result().member_id
    env.sync("g", 1, member_id, assignments={member_id: b""})
    await settle()
    await env.coordinator.commit_offsets("g", member_id, 1, None, {("t", 0): (1, -1, "")})
    for _ in range(64):  # the member stays for 16 hours ...
        env.advance(15 * 60 * 1000)
        assert env.coordinator.heartbeat("g", member_id, 1) == 0
    env.coordinator.leave_group("g", [member_id])  # ... then leaves
    env.advance(DAY_MS - 1)  # the commit is 40 h old, but the group emptied less than a day ago
    assert await env.coordinator.cleanup_expired_offsets() == 0
    env.advance(1)
    assert await env.coordinator.cleanup_expired_offsets() == 1
    assert env.coordinator.get_group("g") is None


async def test_active_consumer_group_keeps_offsets_of_subscribed_topics():
    env = Env(offsets_retention_ms=DAY_MS)
    member = env.join("g", protocols=(("range", subscription("live")),), session_ms=1_800_000)
    await settle()
    env.advance(6000)
    await settle()
    member_id = member.result().member_id
    env.sync("g", 1, member_id, assignments={member_id: b""})
    await settle()
    await env.coordinator.commit_offsets("g", member_id, 1, None, {("live", 0): (1, -1, ""), ("gone", 0): (2, -1, "")})
    for _ in range(96):
        env.advance(15 * 60 * 1000)
        assert env.coordinator.heartbeat("g", member_id, 1) == 0
    assert await env.coordinator.cleanup_expired_offsets() == 1
    assert env.coordinator.fetch_offsets("g", None) == {("live", 0): (1, -1, "", 0)}


async def test_async_append_and_require_stable():
    timer = ManualTimer()
    written: list[tuple[int, bytes]] = []
    gate = asyncio.Event()

    async def append(partition: int, batch: bytearray) -> int:
        await gate.wait()
        written.append((partition, bytes(batch)))
        return len(written) - 1

    coordinator = GroupCoordinator(GroupConfig(), append=append, clock=timer.clock, timer=timer)
    commit = asyncio.ensure_future(coordinator.commit_offsets("s", "", -1, None, {("t", 0): (9, -1, "")}))
    await settle()
    assert not commit.done()
    assert coordinator.fetch_offsets("s", [("t", 0)], require_stable=True) == {("t", 0): (-1, -1, "", 88)}
    assert coordinator.fetch_offsets("s", [("t", 0)]) == {("t", 0): (-1, -1, "", 0)}  # not yet visible
    gate.set()
    await settle()
    assert commit.result() == {("t", 0): 0}
    assert coordinator.fetch_offsets("s", [("t", 0)], require_stable=True) == {("t", 0): (9, -1, "", 0)}
    assert len(written) == 1


async def test_async_append_for_the_leader_assignment():
    timer = ManualTimer()
    gate = asyncio.Event()

    async def append(partition: int, batch: bytearray) -> int:
        await gate.wait()
        return 0

    coordinator = GroupCoordinator(GroupConfig(group_initial_rebalance_delay_ms=0), append=append,
                                   clock=timer.clock, timer=timer)
    join = await coordinator.join_group("g", "", client_id="c", client_host="h", session_timeout_ms=10_000,
                                        protocol_type="consumer", protocols=[("range", b"")],
                                        require_known_member_id=False)
    sync = asyncio.ensure_future(coordinator.sync_group("g", 1, join.member_id, assignments={join.member_id: b"x"}))
    await settle()
    assert not sync.done() and coordinator.describe_group("g").state == "CompletingRebalance"
    gate.set()
    await settle()
    assert sync.result().assignment == b"x" and coordinator.describe_group("g").state == "Stable"


async def test_without_a_log_state_is_kept_in_memory():
    timer = ManualTimer()
    coordinator = GroupCoordinator(clock=timer.clock, timer=timer)
    assert await coordinator.commit_offsets("s", "", -1, None, {("t", 0): (1, -1, "")}) == {("t", 0): 0}
    assert coordinator.fetch_offsets("s", None) == {("t", 0): (1, -1, "", 0)}


async def test_generation_minus_one_commits_naming_a_member_are_stored_on_an_empty_group(env):
    """ZooKeeper-era clients (pykafka's SimpleConsumer) send their own consumer id with
    generation -1; Kafka stores those on an Empty group (doCommitOffsets), as a simple commit."""
    result = await env.coordinator.commit_offsets("zk-era", "vm:1234", -1, None, {("t", 0): (9, -1, "")})
    assert result == {("t", 0): 0}
    assert env.coordinator.fetch_offsets("zk-era", [("t", 0)]) == {("t", 0): (9, -1, "", 0)}
    await stable_group(env, 1, "busy")  # a group with members still refuses a stranger
    refused = await env.coordinator.commit_offsets("busy", "vm:1234", -1, None, {("t", 0): (1, -1, "")})
    assert refused == {("t", 0): 25}  # UNKNOWN_MEMBER_ID


async def test_txn_offset_commit_v3_fences_members_and_generations_as_kafka():
    """KIP-447: TxnOffsetCommit naming the consumer's member and generation is refused for an unknown member
    (UNKNOWN_MEMBER_ID 25), an old generation (ILLEGAL_GENERATION 22) and a replaced static instance
    (FENCED_INSTANCE_ID 82); unset fields (v0-2: "" and -1) are not checked; a valid commit is staged."""
    env = Env()
    results, _ = await stable_group(env, 2, instance_ids=["i0", "i1"])
    member, generation = results[0].member_id, results[0].generation_id
    offsets = {("t", 0): (10, -1, "")}

    async def commit(**fields):
        return (await env.coordinator.txn_commit_offsets("g", 4000, 0, offsets, **fields))[("t", 0)]

    assert await commit(member_id="somebody-else", generation_id=generation) == 25
    assert await commit(member_id=member, generation_id=generation - 1) == 22
    assert await commit(member_id="", generation_id=generation + 1) == 22
    assert await commit(member_id="stale-member-of-i0", group_instance_id="i0", generation_id=generation) == 82
    assert env.coordinator.fetch_offsets("g", [("t", 0)], require_stable=True)[("t", 0)][3] == 0  # nothing staged
    assert await commit() == 0  # v0-2: no member, no generation
    assert await commit(member_id=member, group_instance_id="i0", generation_id=generation) == 0
    assert env.coordinator.fetch_offsets("g", [("t", 0)], require_stable=True)[("t", 0)][3] == 88  # pending
    # a group the coordinator never saw: a member id or a generation above 0 names nothing that exists
    assert (await env.coordinator.txn_commit_offsets("fresh", 4001, 0, offsets, member_id="m"))[("t", 0)] == 25
    assert (await env.coordinator.txn_commit_offsets("fresh", 4001, 0, offsets, generation_id=3))[("t", 0)] == 22
    assert (await env.coordinator.txn_commit_offsets("fresh", 4001, 0, offsets))[("t", 0)] == 0
