"""OffsetDelete (Kafka's GroupCoordinator.handleDeleteOffsets): which groups may lose which
offsets, the tombstones written, and the group removed once nothing is left."""
from __future__ import annotations

from kbroker.coordinator.group.offsets_log import GroupKey, OffsetKey, decode_key, iter_batches

from .conftest import Env, settle, subscription
from .helpers import stable_group, sync_all

GROUP_SUBSCRIBED_TO_TOPIC, NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND = 86, 68, 69
NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, INVALID_GROUP_ID = 16, 14, 24


def written_since(env: Env, group: str, before: int) -> list:
    partition = env.coordinator.partition_for(group)
    return [(decode_key(k), v) for batch in env.log.partitions[partition][before:]
            for k, v in next(iter_batches(batch)).records]


def log_size(env: Env, group: str) -> int:
    return len(env.log.partitions.get(env.coordinator.partition_for(group), []))


async def test_empty_group_loses_the_offsets_asked_for_with_tombstones(env):
    await env.coordinator.commit_offsets("s", "", -1, None, {("t", 0): (5, -1, ""), ("t", 1): (6, -1, ""),
                                                             ("u", 0): (7, -1, "")})
    before = log_size(env, "s")
    error, codes = await env.coordinator.delete_offsets("s", [("t", 0), ("t", 2)])
    assert (error, codes) == (0, {("t", 0): 0, ("t", 2): 0})  # no offset for t-2: still NONE, as Kafka
    assert env.coordinator.fetch_offsets("s", None) == {("t", 1): (6, -1, "", 0), ("u", 0): (7, -1, "", 0)}
    assert written_since(env, "s", before) == [(OffsetKey("s", "t", 0), None)]


async def test_the_last_offset_deleted_removes_the_group():
    env = Env(group_initial_rebalance_delay_ms=0)
    results, _ = await stable_group(env, 1, protocols=[(("range", subscription("t")),)])
    await env.coordinator.commit_offsets("g", results[0].member_id, 1, None, {("t", 0): (5, -1, "")})
    env.coordinator.leave_group("g", [results[0].member_id])
    assert env.coordinator.describe_group("g").state == "Empty"
    before = log_size(env, "g")
    assert await env.coordinator.delete_offsets("g", [("t", 0)]) == (0, {("t", 0): 0})
    assert env.coordinator.get_group("g") is None
    assert env.coordinator.describe_group("g").state == "Dead"
    assert written_since(env, "g", before) == [(OffsetKey("g", "t", 0), None), (GroupKey("g"), None)]
    assert await env.coordinator.delete_offsets("g", [("t", 0)]) == (GROUP_ID_NOT_FOUND, {})


async def test_consumer_group_with_members_keeps_subscribed_topics_only(env):
    results, _ = await stable_group(env, 2, protocols=[(("range", subscription("t")),),
                                                       (("range", subscription("t", "v")),)])
    member = results[0].member_id
    await env.coordinator.commit_offsets("g", member, 1, None, {("t", 0): (1, -1, ""), ("u", 0): (2, -1, ""),
                                                                ("v", 0): (3, -1, "")})
    before = log_size(env, "g")
    error, codes = await env.coordinator.delete_offsets("g", [("t", 0), ("u", 0), ("v", 0)])
    assert error == 0
    assert codes == {("t", 0): GROUP_SUBSCRIBED_TO_TOPIC, ("u", 0): 0, ("v", 0): GROUP_SUBSCRIBED_TO_TOPIC}
    assert set(env.coordinator.fetch_offsets("g", None)) == {("t", 0), ("v", 0)}
    assert written_since(env, "g", before) == [(OffsetKey("g", "u", 0), None)]
    assert env.coordinator.describe_group("g").state == "Stable"


async def test_consumer_group_while_rebalancing_uses_the_subscriptions_too():
    env = Env(group_initial_rebalance_delay_ms=0)
    proto = (("range", subscription("t")),)
    results, _ = await stable_group(env, 1, protocols=[proto])
    await env.coordinator.commit_offsets("g", results[0].member_id, 1, None, {("t", 0): (1, -1, ""),
                                                                               ("u", 0): (2, -1, "")})
    rejoin = env.join("g", results[0].member_id, protocols=proto)  # the leader re-joins: CompletingRebalance
    await settle()
    assert rejoin.done() and env.coordinator.describe_group("g").state == "CompletingRebalance"
    assert await env.coordinator.delete_offsets("g", [("t", 0), ("u", 0)]) == (
        0, {("t", 0): GROUP_SUBSCRIBED_TO_TOPIC, ("u", 0): 0})
    await sync_all(env, [rejoin.result()])


async def test_non_consumer_group_with_members_is_non_empty():
    env = Env(group_initial_rebalance_delay_ms=0)
    await stable_group(env, 1, group="connect")
    env.coordinator.get_group("connect").protocol_type = "connect"
    assert await env.coordinator.delete_offsets("connect", [("t", 0)]) == (NON_EMPTY_GROUP, {})


async def test_group_level_errors(env):
    assert await env.coordinator.delete_offsets("unknown", [("t", 0)]) == (GROUP_ID_NOT_FOUND, {})
    assert await env.coordinator.delete_offsets("", [("t", 0)]) == (INVALID_GROUP_ID, {})
    partition = env.coordinator.partition_for("g")
    env.coordinator.begin_loading(partition)
    assert await env.coordinator.delete_offsets("g", [("t", 0)]) == (COORDINATOR_LOAD_IN_PROGRESS, {})
    env.coordinator.unload_partition(partition)
    assert await env.coordinator.delete_offsets("g", [("t", 0)]) == (NOT_COORDINATOR, {})
