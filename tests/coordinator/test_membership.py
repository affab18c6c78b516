"""Group membership: join, sync, heartbeat, leave, expiry, static members, the two-step join and
protocol selection, all on a manual clock."""
from __future__ import annotations

import re
import uuid

from kbroker.coordinator.group import GroupState

from .conftest import Env, settle
from .helpers import form_group, stable_group, sync_all

UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def state(env: Env, group: str = "g") -> str:
    return env.coordinator.describe_group(group).state


async def test_three_members_join_leader_gets_members_followers_get_none(env):
    results = await form_group(env, 3)
    leader = results[0]
    assert [r.error for r in results] == [0, 0, 0]
    assert {r.generation_id for r in results} == {1}
    assert {r.leader_id for r in results} == {leader.member_id}
    assert {r.protocol_name for r in results} == {"range"}
    assert {r.protocol_type for r in results} == {"consumer"}
    assert [m.member_id for m in leader.members] == [r.member_id for r in results]
    assert all(m.metadata == b"range-meta" and m.group_instance_id is None for m in leader.members)
    assert results[1].members == () and results[2].members == ()
    for i, r in enumerate(results):
        prefix = f"client{i}-"
        assert r.member_id.startswith(prefix) and UUID_RE.match(r.member_id[len(prefix):])
        uuid.UUID(r.member_id[len(prefix):])
    assert state(env) == "CompletingRebalance"


async def test_initial_rebalance_delay_is_extended_while_members_arrive():
    env = Env(group_initial_rebalance_delay_ms=3000)
    first = env.join(client_id="a")
    await settle()
    env.advance(1000)
    second = env.join(client_id="b")
    await settle()
    env.advance(2000)  # first delay over, but a member arrived during it: wait another delay
    await settle()
    assert not first.done() and state(env) == "PreparingRebalance"
    env.advance(2999)
    await settle()
    assert not first.done()
    env.advance(1)
    await settle()
    assert first.result().generation_id == second.result().generation_id == 1
    assert len(first.result().members) == 2


async def test_initial_delay_is_bounded_by_the_rebalance_timeout():
    env = Env(group_initial_rebalance_delay_ms=3000)
    tasks = [env.join(client_id="c0", rebalance_ms=7000)]
    await settle()
    for i in range(1, 7):  # a new member every second keeps extending the delay ...
        env.advance(1000)
        tasks.append(env.join(client_id=f"c{i}", rebalance_ms=7000))
        await settle()
    env.advance(999)
    await settle()
    assert not tasks[0].done()
    env.advance(1)  # ... but never past 3000 + min(3000, 4000) + min(3000, 1000) = 7000 ms
    await settle()
    assert all(t.done() for t in tasks)
    assert len(tasks[0].result().members) == 7


async def test_single_member_with_delay_zero_completes_at_once():
    env = Env(group_initial_rebalance_delay_ms=0)
    task = env.join()
    await settle()
    result = task.result()
    assert result.error == 0 and result.leader_id == result.member_id and result.generation_id == 1


async def test_sync_holds_followers_until_the_leader_assigns(env):
    results = await form_group(env, 3)
    f1 = env.sync("g", 1, results[1].member_id)
    f2 = env.sync("g", 1, results[2].member_id)
    await settle()
    assert not f1.done() and not f2.done()
    written = sum(len(v) for v in env.log.partitions.values())
    leader = env.sync("g", 1, results[0].member_id, assignments={
        results[0].member_id: b"A0", results[1].member_id: b"A1", results[2].member_id: b"A2",
        "not-a-member": b"ignored"})
    await settle()
    assert (leader.result().assignment, f1.result().assignment, f2.result().assignment) == (b"A0", b"A1", b"A2")
    assert {leader.result().error, f1.result().error, f2.result().error} == {0}
    assert f1.result().protocol_name == "range" and f1.result().protocol_type == "consumer"
    assert state(env) == "Stable"
    assert sum(len(v) for v in env.log.partitions.values()) == written + 1  # the group metadata record
    # a late sync in Stable gets the stored assignment straight away
    again = env.sync("g", 1, results[2].member_id)
    await settle()
    assert again.result().assignment == b"A2"


async def test_members_the_leader_left_out_get_an_empty_assignment(env):
    results = await form_group(env, 2)
    follower = env.sync("g", 1, results[1].member_id)
    env.sync("g", 1, results[0].member_id, assignments={results[0].member_id: b"all"})
    await settle()
    assert follower.result().error == 0 and follower.result().assignment == b""


async def test_fourth_member_triggers_a_rebalance_and_a_new_generation(env):
    results, _ = await stable_group(env, 3)
    newcomer = env.join(client_id="late")
    await settle()
    assert state(env) == "PreparingRebalance"
    assert [env.coordinator.heartbeat("g", r.member_id, 1) for r in results] == [27, 27, 27]
    rejoins = [env.join("g", r.member_id, client_id=f"client{i}") for i, r in enumerate(results)]
    await settle()
    new_results = [t.result() for t in rejoins] + [newcomer.result()]
    assert {r.generation_id for r in new_results} == {2}
    assert {r.error for r in new_results} == {0}
    assert new_results[0].leader_id == results[0].member_id  # the leader stays the leader
    assert len(new_results[0].members) == 4 and all(r.members == () for r in new_results[1:])
    syncs = await sync_all(env, new_results)
    assert [s.assignment for s in syncs] == [b"assign-0", b"assign-1", b"assign-2", b"assign-3"]
    assert [env.coordinator.heartbeat("g", r.member_id, 2) for r in new_results] == [0, 0, 0, 0]
    assert env.coordinator.heartbeat("g", results[0].member_id, 1) == 22


async def test_rebalance_during_sync_phase_answers_waiting_syncs_rebalance_in_progress(env):
    results = await form_group(env, 3)
    waiting = env.sync("g", 1, results[1].member_id)
    await settle()
    env.join(client_id="late")
    await settle()
    assert waiting.result().error == 27 and waiting.result().assignment == b""
    assert state(env) == "PreparingRebalance"


async def test_member_that_stops_heartbeating_is_evicted_and_the_group_rebalances(env):
    results, _ = await stable_group(env, 3)
    assert all(env.coordinator.heartbeat("g", r.member_id, 1) == 0 for r in results)
    env.advance(6000)
    assert env.coordinator.heartbeat("g", results[0].member_id, 1) == 0
    assert env.coordinator.heartbeat("g", results[1].member_id, 1) == 0
    env.advance(3999)
    assert state(env) == "Stable"
    env.advance(1)  # 10 s since member 2's last heartbeat
    assert state(env) == "PreparingRebalance"
    assert env.coordinator.heartbeat("g", results[2].member_id, 1) == 25
    assert env.coordinator.heartbeat("g", results[0].member_id, 1) == 27
    rejoins = [env.join("g", r.member_id) for r in results[:2]]
    await settle()
    assert [t.result().generation_id for t in rejoins] == [2, 2]
    assert len(rejoins[0].result().members) == 2


async def test_members_that_do_not_rejoin_are_removed_at_the_rebalance_timeout(env):
    results, _ = await stable_group(env, 3)
    newcomer = env.join(client_id="late", rebalance_ms=30_000)
    await settle()
    held = [env.join("g", r.member_id) for r in results[:2]]  # member 2 never re-joins ...
    await settle()
    for _ in range(5):  # ... but keeps heartbeating; held members need no heartbeats
        env.advance(5000)
        assert env.coordinator.heartbeat("g", results[2].member_id, 1) == 27
    await settle()
    assert not newcomer.done()
    env.advance(5000)  # 30 s rebalance timeout
    await settle()
    assert {t.result().generation_id for t in held + [newcomer]} == {2}
    assert {m.member_id for m in held[0].result().members} == {results[0].member_id, results[1].member_id,
                                                                newcomer.result().member_id}
    assert env.coordinator.heartbeat("g", results[2].member_id, 2) == 25


async def test_silent_static_leader_is_replaced_by_a_joined_member_at_the_rebalance_timeout(env):
    results, _ = await stable_group(env, 2, instance_ids=["inst-a", None])
    rejoin = env.join("g", results[1].member_id, protocols=(("range", b"changed"),))
    await settle()
    for _ in range(6):  # the static leader heartbeats but never re-joins
        env.advance(5000)
        env.coordinator.heartbeat("g", results[0].member_id, 1, "inst-a")
    await settle()
    result = rejoin.result()
    assert result.generation_id == 2 and result.leader_id == results[1].member_id
    assert [m.member_id for m in result.members] == [results[0].member_id, results[1].member_id]


async def test_leave_group_single_member_triggers_a_rebalance(env):
    results, _ = await stable_group(env, 3)
    left = env.coordinator.leave_group("g", [results[1].member_id])
    assert left.error == 0 and left.legacy_error == 0
    assert [(m.member_id, m.error) for m in left.members] == [(results[1].member_id, 0)]
    assert state(env) == "PreparingRebalance"
    rejoins = [env.join("g", r.member_id) for r in (results[0], results[2])]
    await settle()
    assert [len(t.result().members) for t in rejoins] == [2, 0]


async def test_batched_leave_reports_each_member(env):
    results, _ = await stable_group(env, 3)
    left = env.coordinator.leave_group("g", [(results[0].member_id, None), ("nobody", None),
                                             (results[2].member_id, None)])
    assert [m.error for m in left.members] == [0, 25, 0]
    assert left.error == 0 and left.legacy_error == 25
    unknown_group = env.coordinator.leave_group("nope", [("x", None)])
    assert unknown_group.error == 0 and [m.error for m in unknown_group.members] == [25]


async def test_last_member_leaving_empties_the_group_and_stores_it(env):
    results, _ = await stable_group(env, 2)
    env.coordinator.leave_group("g", [results[0].member_id, results[1].member_id])
    group = env.coordinator.get_group("g")
    assert group.state is GroupState.EMPTY and group.generation_id == 2 and group.protocol_name is None
    assert group.protocol_type == "consumer" and group.leader_id is None
    description = env.coordinator.describe_group("g")
    assert description.state == "Empty" and description.members == ()


async def test_held_join_of_a_leaving_member_is_answered(env):
    results, _ = await stable_group(env, 2)
    env.join(client_id="late")
    held = env.join("g", results[0].member_id)
    await settle()
    env.coordinator.leave_group("g", [results[0].member_id])
    await settle()
    assert held.result().error == 25 and held.result().member_id == ""


async def test_rejoin_in_stable_by_follower_with_same_metadata_changes_nothing(env):
    results, _ = await stable_group(env, 2)
    again = env.join("g", results[1].member_id)
    await settle()
    r = again.result()
    assert (r.error, r.generation_id, r.leader_id, r.members) == (0, 1, results[0].member_id, ())
    assert state(env) == "Stable"


async def test_rejoin_in_stable_by_leader_or_with_new_metadata_rebalances(env):
    results, _ = await stable_group(env, 2)
    env.join("g", results[0].member_id)
    await settle()
    assert state(env) == "PreparingRebalance"
    env2 = Env()
    results2, _ = await stable_group(env2, 2)
    env2.join("g", results2[1].member_id, protocols=(("range", b"new-subscription"),))
    await settle()
    assert state(env2) == "PreparingRebalance"


async def test_rejoin_while_completing_with_same_metadata_gets_the_same_answer(env):
    results = await form_group(env, 2)
    again = [env.join("g", r.member_id, client_id=f"client{i}") for i, r in enumerate(results)]
    await settle()
    assert [t.result().generation_id for t in again] == [1, 1]
    assert len(again[0].result().members) == 2 and again[1].result().members == ()
    assert state(env) == "CompletingRebalance"


async def test_a_commit_counts_as_a_heartbeat(env):
    results, _ = await stable_group(env, 1)
    env.advance(9000)
    assert await env.coordinator.commit_offsets("g", results[0].member_id, 1, None, {("t", 0): (1, -1, "")}) \
        == {("t", 0): 0}
    env.advance(9000)
    assert state(env) == "Stable"
    env.advance(1000)
    assert state(env) == "Empty"  # expired: the last member gone


# --- static membership (KIP-345) -----------------------------------------------------------

async def test_static_member_restart_keeps_its_assignment_without_a_rebalance(env):
    instances = [None, "inst-b", None]
    results, syncs = await stable_group(env, 3, instance_ids=instances)
    old_id = results[1].member_id
    assert old_id.startswith("inst-b-")
    restarted = env.join("g", "", "inst-b", client_id="client1")
    await settle()
    r = restarted.result()
    assert r.error == 0 and r.generation_id == 1 and r.member_id != old_id and r.member_id.startswith("inst-b-")
    assert r.leader_id == results[0].member_id and r.members == ()
    assert state(env) == "Stable"
    assert env.coordinator.heartbeat("g", results[0].member_id, 1) == 0  # nobody rebalances
    assert env.coordinator.heartbeat("g", results[2].member_id, 1) == 0
    sync = env.sync("g", 1, r.member_id, "inst-b")
    await settle()
    assert sync.result().error == 0 and sync.result().assignment == syncs[1].assignment
    # the old instance is fenced everywhere
    assert env.coordinator.heartbeat("g", old_id, 1, "inst-b") == 82
    old_sync = env.sync("g", 1, old_id, "inst-b")
    old_join = env.join("g", old_id, "inst-b")
    await settle()
    assert old_sync.result().error == 82 and old_join.result().error == 82
    assert await env.coordinator.commit_offsets("g", old_id, 1, "inst-b", {("t", 0): (5, -1, "")}) == {("t", 0): 82}
    assert env.coordinator.leave_group("g", [(old_id, "inst-b")]).members[0].error == 82
    assert env.coordinator.heartbeat("g", old_id, 1) == 25  # without its instance id it is just unknown
    assert env.coordinator.heartbeat("g", r.member_id, 1, "inst-b") == 0


async def test_static_leader_restart_is_told_the_old_leader_id(env):
    results, _ = await stable_group(env, 2, instance_ids=["inst-a", "inst-b"])
    restarted = env.join("g", "", "inst-a")
    await settle()
    r = restarted.result()
    assert r.leader_id == results[0].member_id != r.member_id  # so it does not compute an assignment
    assert env.coordinator.get_group("g").leader_id == r.member_id


async def test_held_join_of_the_old_static_instance_is_fenced(env):
    results, _ = await stable_group(env, 3, instance_ids=[None, "inst-b", None])
    env.join("g", results[0].member_id)  # leader rejoin: rebalance
    old = env.join("g", results[1].member_id, "inst-b")
    await settle()
    assert not old.done()
    new = env.join("g", "", "inst-b")
    await settle()
    assert old.result().error == 82 and not new.done()
    env.join("g", results[2].member_id)
    await settle()
    result = new.result()
    assert result.error == 0 and result.generation_id == 2


async def test_static_member_that_does_not_rejoin_stays_until_its_session_expires(env):
    results, _ = await stable_group(env, 2, instance_ids=[None, "inst-b"])
    rejoin = env.join("g", results[0].member_id)  # the static member stays silent
    await settle()
    env.advance(10_000)  # its session expires before the rebalance timeout
    await settle()
    result = rejoin.result()
    assert result.generation_id == 2 and [m.member_id for m in result.members] == [results[0].member_id]


async def test_static_member_kept_through_rebalance_timeout_when_its_session_is_long():
    env = Env()
    results, _ = await stable_group(env, 2, instance_ids=[None, "inst-b"])
    group = env.coordinator.get_group("g")
    group.members[results[1].member_id].session_timeout_ms = 60_000
    env.coordinator.heartbeat("g", results[1].member_id, 1)  # re-arms with the long session
    rejoin = env.join("g", results[0].member_id)
    await settle()
    env.advance(30_000)
    await settle()
    result = rejoin.result()
    assert result.generation_id == 2
    assert [(m.member_id, m.group_instance_id) for m in result.members] == [
        (results[0].member_id, None), (results[1].member_id, "inst-b")]


async def test_static_rejoin_changing_the_protocol_rebalances(env):
    await stable_group(env, 1, instance_ids=["inst-a"])
    restarted = env.join("g", "", "inst-a", protocols=(("roundrobin", b"rr"),))
    await settle()
    result = restarted.result()
    assert (result.error, result.generation_id, result.protocol_name) == (0, 2, "roundrobin")
    assert state(env) == "CompletingRebalance"


async def test_admin_removal_of_a_static_member_by_instance_id(env):
    results, _ = await stable_group(env, 2, instance_ids=[None, "inst-b"])
    left = env.coordinator.leave_group("g", [("", "inst-b"), ("", "inst-zzz")])
    assert [m.error for m in left.members] == [0, 25]
    assert state(env) == "PreparingRebalance"


# --- two-step join (KIP-394) -------------------------------------------------------------------

async def test_member_id_required_two_step_join():
    env = Env(group_initial_rebalance_delay_ms=0)
    first = env.join(client_id="rdkafka", require_known_member_id=True)
    await settle()
    r = first.result()
    assert r.error == 79 and r.member_id.startswith("rdkafka-") and r.generation_id == -1
    assert env.coordinator.get_group("g").pending_members
    assert env.coordinator.describe_group("g").members == ()
    second = env.join("g", r.member_id, client_id="rdkafka", require_known_member_id=True)
    await settle()
    r2 = second.result()
    assert (r2.error, r2.member_id, r2.generation_id, r2.leader_id) == (0, r.member_id, 1, r.member_id)
    assert not env.coordinator.get_group("g").pending_members


async def test_pending_member_holds_the_rebalance_until_it_expires():
    env = Env(group_initial_rebalance_delay_ms=0)
    results, _ = await stable_group(env, 1)
    pending = env.join(client_id="slow", require_known_member_id=True)
    await settle()
    assert pending.result().error == 79
    rejoin = env.join("g", results[0].member_id)  # the leader re-joins: rebalance begins
    await settle()
    env.advance(9999)
    await settle()
    assert not rejoin.done()
    env.advance(1)  # the pending id was never used within the session timeout
    await settle()
    assert rejoin.result().generation_id == 2 and len(rejoin.result().members) == 1


async def test_static_members_skip_the_member_id_required_step():
    env = Env(group_initial_rebalance_delay_ms=0)
    task = env.join("g", "", "inst-1", require_known_member_id=True)
    await settle()
    assert task.result().error == 0 and task.result().member_id.startswith("inst-1-")


# --- protocol selection ------------------------------------------------------------------------

async def test_protocol_is_chosen_by_member_votes(env):
    protocols = [(("roundrobin", b"rr0"), ("range", b"r0")),
                 (("range", b"r1"), ("roundrobin", b"rr1")),
                 (("range", b"r2"), ("roundrobin", b"rr2"), ("sticky", b"s2"))]
    results = await form_group(env, 3, protocols=protocols)
    assert {r.protocol_name for r in results} == {"range"}
    assert [m.metadata for m in results[0].members] == [b"r0", b"r1", b"r2"]


async def test_only_protocols_supported_by_everyone_are_candidates(env):
    protocols = [(("a", b"a0"), ("b", b"b0")), (("a", b"a1"), ("b", b"b1")), (("b", b"b2"),)]
    results = await form_group(env, 3, protocols=protocols)
    assert {r.protocol_name for r in results} == {"b"}


async def test_inconsistent_group_protocol(env):
    results, _ = await stable_group(env, 2)
    no_common = env.join(protocols=(("roundrobin", b""),))
    other_type = env.join(protocol_type="connect")
    member_switch = env.join("g", results[1].member_id, protocols=(("roundrobin", b""),))
    await settle()
    assert [t.result().error for t in (no_common, other_type, member_switch)] == [23, 23, 23]
    assert no_common.result().member_id == "" and member_switch.result().member_id == results[1].member_id
    assert state(env) == "Stable"
    fresh = Env()
    no_protocols = fresh.join("h", protocols=())
    no_type = fresh.join("h", protocol_type="")
    await settle()
    assert [t.result().error for t in (no_protocols, no_type)] == [23, 23]
    assert fresh.coordinator.get_group("h") is None  # a failed first join leaves nothing behind


async def test_sole_member_may_switch_protocols(env):
    results, _ = await stable_group(env, 1)
    switch = env.join("g", results[0].member_id, protocols=(("roundrobin", b"rr"),))
    await settle()
    assert switch.result().error == 0 and switch.result().protocol_name == "roundrobin"


async def test_sync_rejects_a_mismatched_protocol_type_or_name(env):
    results = await form_group(env, 1)
    wrong_type = env.sync("g", 1, results[0].member_id, protocol_type="connect")
    wrong_name = env.sync("g", 1, results[0].member_id, protocol_name="roundrobin")
    await settle()
    assert wrong_type.result().error == 23 and wrong_name.result().error == 23
    ok = env.sync("g", 1, results[0].member_id, protocol_type="consumer", protocol_name="range",
                  assignments={results[0].member_id: b"x"})
    await settle()
    assert ok.result().error == 0 and ok.result().assignment == b"x"


async def test_v0_join_uses_the_session_timeout_as_rebalance_timeout(env):
    task = env.join(rebalance_ms=-1, session_ms=7000)
    await settle()
    env.advance(6000)
    await settle()
    group = env.coordinator.get_group("g")
    assert group.members[task.result().member_id].rebalance_timeout_ms == 7000


async def test_new_member_held_too_long_is_dropped(env):
    """A brand-new member's held join is bounded by the 5-minute new-member timeout."""
    results, _ = await stable_group(env, 1)
    env.coordinator.get_group("g").members[results[0].member_id].session_timeout_ms = 600_000
    env.coordinator.heartbeat("g", results[0].member_id, 1)
    newcomer = env.join(client_id="late", rebalance_ms=900_000, session_ms=600_000)
    await settle()
    for _ in range(5):
        env.advance(60_000)
        env.coordinator.heartbeat("g", results[0].member_id, 1)
    await settle()
    assert newcomer.result().error == 25 and newcomer.result().member_id == ""
