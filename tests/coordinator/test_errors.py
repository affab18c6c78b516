"""Every error code the coordinator hands out, each on the path where Kafka gives it."""
from __future__ import annotations

import pytest

from kbroker import errors
from kbroker.coordinator.group import GroupConfig, GroupCoordinator, partition_for

from .conftest import Env, ManualTimer, settle
from .helpers import form_group, stable_group

TP = ("t", 0)


async def test_invalid_group_id_for_membership_apis(env):
    join = env.join("")
    sync = env.sync("", 1, "m")
    await settle()
    assert join.result().error == 24 and sync.result().error == 24
    assert env.coordinator.heartbeat("", "m", 1) == 24
    assert env.coordinator.leave_group("", ["m"]).error == 24
    # the offset and admin APIs accept the empty group id, as Kafka does for old clients
    assert await env.coordinator.commit_offsets("", "", -1, None, {TP: (1, -1, "")}) == {TP: 0}
    assert env.coordinator.fetch_offsets("", [TP]) == {TP: (1, -1, "", 0)}


@pytest.mark.parametrize("session_ms, error", [(5999, 26), (6000, 0), (1_800_000, 0), (1_800_001, 26)])
async def test_invalid_session_timeout(session_ms, error):
    env = Env(group_initial_rebalance_delay_ms=0)
    task = env.join(session_ms=session_ms, member_id="")
    await settle()
    assert task.result().error == error


async def test_unknown_member_id(env):
    unknown_group = env.join("g", "ghost")
    await settle()
    assert unknown_group.result().error == 25 and unknown_group.result().member_id == "ghost"
    assert env.coordinator.heartbeat("g", "ghost", 0) == 25
    sync = env.sync("g", 0, "ghost")
    await settle()
    assert sync.result().error == 25
    results, _ = await stable_group(env, 1)
    ghost_join = env.join("g", "ghost")
    # a known member id that claims an instance id the group does not know
    wrong_instance = env.join("g", results[0].member_id, "inst-x")
    ghost_sync = env.sync("g", 1, "ghost")
    await settle()
    assert ghost_join.result().error == 25 and wrong_instance.result().error == 25
    assert ghost_sync.result().error == 25
    assert env.coordinator.heartbeat("g", "ghost", 1) == 25


async def test_illegal_generation(env):
    results, _ = await stable_group(env, 2)
    member = results[1].member_id
    assert env.coordinator.heartbeat("g", member, 7) == 22
    sync = env.sync("g", 7, member)
    await settle()
    assert sync.result().error == 22
    assert await env.coordinator.commit_offsets("g", member, 7, None, {TP: (1, -1, "")}) == {TP: 22}
    # a generation for a group this coordinator never saw
    assert await env.coordinator.commit_offsets("other", "m", 3, None, {TP: (1, -1, "")}) == {TP: 22}


async def test_rebalance_in_progress(env):
    results = await form_group(env, 2)
    member = results[1].member_id
    # CompletingRebalance: commits are refused until the assignment is out
    assert await env.coordinator.commit_offsets("g", member, 1, None, {TP: (1, -1, "")}) == {TP: 27}
    assert env.coordinator.heartbeat("g", member, 1) == 0
    env.join(client_id="late")
    await settle()
    assert env.coordinator.heartbeat("g", member, 1) == 27
    sync = env.sync("g", 1, member)
    await settle()
    assert sync.result().error == 27
    # PreparingRebalance: a member of the current generation may still commit
    assert await env.coordinator.commit_offsets("g", member, 1, None, {TP: (1, -1, "")}) == {TP: 0}


async def test_group_max_size_reached():
    env = Env(group_max_size=2)
    results, _ = await stable_group(env, 2)
    third = env.join(client_id="third")
    await settle()
    assert third.result().error == 81 and third.result().member_id == ""
    env.join("g", results[0].member_id)  # rebalance; existing members may still re-join
    again = env.join("g", results[1].member_id)
    await settle()
    assert again.result().error == 0 and again.result().generation_id == 2


async def test_fenced_instance_id_on_every_api(env):
    results, _ = await stable_group(env, 1, instance_ids=["inst"])
    impostor = "inst-00000000-0000-4000-8000-000000000000"
    join = env.join("g", impostor, "inst")
    sync = env.sync("g", 1, impostor, "inst")
    await settle()
    assert join.result().error == 82 and sync.result().error == 82
    assert env.coordinator.heartbeat("g", impostor, 1, "inst") == 82
    assert env.coordinator.leave_group("g", [(impostor, "inst")]).members[0].error == 82
    assert await env.coordinator.commit_offsets("g", impostor, 1, "inst", {TP: (1, -1, "")}) == {TP: 82}
    assert env.coordinator.heartbeat("g", results[0].member_id, 1, "inst") == 0


async def test_member_of_an_emptied_group_gets_unknown_member_id(env):
    results, _ = await stable_group(env, 1)
    env.coordinator.leave_group("g", [results[0].member_id])
    assert env.coordinator.describe_group("g").state == "Empty"
    assert env.coordinator.heartbeat("g", results[0].member_id, 2) == 25
    assert await env.coordinator.commit_offsets("g", results[0].member_id, 2, None, {TP: (1, -1, "")}) == {TP: 25}
    join = env.join("g", results[0].member_id)
    await settle()
    assert join.result().error == 25


async def test_simple_commit_to_a_group_with_members_is_refused(env):
    await stable_group(env, 1)
    assert await env.coordinator.commit_offsets("g", "", -1, None, {TP: (1, -1, "")}) == {TP: 25}


async def test_offset_metadata_too_large_per_partition():
    env = Env(offset_metadata_max_bytes=8)
    result = await env.coordinator.commit_offsets("g", "", -1, None, {
        ("t", 0): (1, -1, "12345678"), ("t", 1): (2, -1, "123456789"), ("t", 2): (3, -1, None)})
    assert result == {("t", 0): 0, ("t", 1): 12, ("t", 2): 0}
    assert env.coordinator.fetch_offsets("g", [("t", 1), ("t", 2)]) == {("t", 1): (-1, -1, "", 0),
                                                                         ("t", 2): (3, -1, "", 0)}
    only_bad = await env.coordinator.commit_offsets("g", "", -1, None, {("t", 1): (2, -1, "x" * 9)})
    assert only_bad == {("t", 1): 12}


async def test_delete_groups_errors(env):
    await stable_group(env, 1)
    await env.coordinator.commit_offsets("simple", "", -1, None, {TP: (1, -1, "")})
    result = await env.coordinator.delete_groups(["g", "simple", "missing", ""])
    assert result == {"g": 68, "simple": 0, "missing": 69, "": 69}
    assert await env.coordinator.delete_groups(["simple"]) == {"simple": 69}


def _foreign_group(num_partitions: int, mine: int) -> str:
    return next(f"grp-{i}" for i in range(1000) if partition_for(f"grp-{i}", num_partitions) != mine)


async def test_not_coordinator_for_groups_of_partitions_we_do_not_lead():
    timer = ManualTimer()
    coordinator = GroupCoordinator(GroupConfig(offsets_topic_num_partitions=4), clock=timer.clock, timer=timer,
                                   active_partitions=[0])
    group = _foreign_group(4, 0)
    join = await coordinator.join_group(group, "", client_id="c", client_host="h", session_timeout_ms=10_000,
                                        protocol_type="consumer", protocols=[("range", b"")])
    assert join.error == 16
    assert (await coordinator.sync_group(group, 1, "m")).error == 16
    assert coordinator.heartbeat(group, "m", 1) == 16
    assert coordinator.leave_group(group, ["m"]).error == 16
    assert await coordinator.commit_offsets(group, "", -1, None, {TP: (1, -1, "")}) == {TP: 16}
    with pytest.raises(errors.NotCoordinatorError):
        coordinator.fetch_offsets(group, [TP])
    assert coordinator.describe_group(group).error == 16
    assert await coordinator.delete_groups([group]) == {group: 16}


async def test_coordinator_load_in_progress():
    timer = ManualTimer()
    coordinator = GroupCoordinator(GroupConfig(offsets_topic_num_partitions=4), clock=timer.clock, timer=timer)
    group = "loading-group"
    coordinator.begin_loading(partition_for(group, 4))
    join = await coordinator.join_group(group, "", client_id="c", client_host="h", session_timeout_ms=10_000,
                                        protocol_type="consumer", protocols=[("range", b"")])
    assert join.error == 14
    assert (await coordinator.sync_group(group, 1, "m")).error == 27  # re-join rather than wait
    assert coordinator.heartbeat(group, "m", 1) == 0  # answered blindly, as Kafka does
    assert await coordinator.commit_offsets(group, "", -1, None, {TP: (1, -1, "")}) == {TP: 14}
    with pytest.raises(errors.CoordinatorLoadInProgressError):
        coordinator.fetch_offsets(group, None)
    assert coordinator.list_groups() == (14, [])
    coordinator.load_partition(partition_for(group, 4), [])
    assert coordinator.list_groups() == (0, [])
    assert await coordinator.commit_offsets(group, "", -1, None, {TP: (1, -1, "")}) == {TP: 0}


async def test_coordinator_not_available_after_shutdown(env):
    results = await form_group(env, 2)
    held = env.sync("g", 1, results[1].member_id)
    await settle()
    env.coordinator.shutdown()
    await settle()
    assert held.result().error == 16  # held requests: go find the new coordinator
    assert env.coordinator.heartbeat("g", results[0].member_id, 1) == 15
    assert env.coordinator.list_groups() == (15, [])
    join = env.join("g")
    await settle()
    assert join.result().error == 15


async def test_unloading_a_partition_answers_held_requests_not_coordinator(env):
    results = await form_group(env, 2)
    held_sync = env.sync("g", 1, results[1].member_id)
    await settle()
    env.coordinator.unload_partition(env.coordinator.partition_for("g"))
    await settle()
    assert held_sync.result().error == 16
    assert env.coordinator.heartbeat("g", results[1].member_id, 1) == 16


@pytest.mark.parametrize("exc, code", [
    (errors.NotLeaderOrFollowerError(), 16),
    (errors.KafkaStorageError(), 16),
    (errors.NotEnoughReplicasError(), 15),
    (errors.UnknownTopicOrPartitionError(), 15),
    (errors.MessageTooLargeError(), 28),
    (errors.RecordListTooLargeError(), 28),
    (RuntimeError("disk on fire"), -1),
])
async def test_offset_store_failures_map_to_kafkas_codes(env, exc, code):
    env.log.fail_with = exc
    assert await env.coordinator.commit_offsets("g", "", -1, None, {TP: (1, -1, "")}) == {TP: code}
    env.log.fail_with = None
    assert env.coordinator.fetch_offsets("g", [TP]) == {TP: (-1, -1, "", 0)}  # nothing applied


async def test_failed_assignment_store_fails_the_sync_and_rebalances(env):
    results = await form_group(env, 2)
    follower = env.sync("g", 1, results[1].member_id)
    await settle()
    env.log.fail_with = errors.NotLeaderOrFollowerError()
    leader = env.sync("g", 1, results[0].member_id, assignments={results[0].member_id: b"a"})
    await settle()
    assert leader.result().error == 16 and follower.result().error == 16
    assert env.coordinator.describe_group("g").state == "PreparingRebalance"
