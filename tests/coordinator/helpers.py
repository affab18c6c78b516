"""Scenario helpers shared by the coordinator tests."""
from __future__ import annotations

from kbroker.coordinator.group import JoinResult, SyncResult

from .conftest import Env, settle

RANGE = (("range", b"range-meta"),)


async def form_group(env: Env, n: int, group: str = "g", instance_ids=None, protocols=None) -> list[JoinResult]:
    """n fresh members join an empty group within the initial rebalance delay; the join phase
    completes once the (extended) delay has passed."""
    instance_ids = instance_ids or [None] * n
    protocols = protocols or [RANGE] * n
    tasks = [env.join(group, "", instance_ids[i], client_id=f"client{i}", protocols=protocols[i]) for i in range(n)]
    await settle()
    env.advance(2 * env.config.group_initial_rebalance_delay_ms)
    await settle()
    assert all(t.done() for t in tasks)
    return [t.result() for t in tasks]


async def sync_all(env: Env, results: list[JoinResult], group: str = "g", assignments=None,
                   instance_ids=None) -> list[SyncResult]:
    """Followers sync first, then the leader with ``assignments`` (default: b"assign-<i>")."""
    instance_ids = instance_ids or [None] * len(results)
    leader = results[0].leader_id
    if assignments is None:
        assignments = {r.member_id: f"assign-{i}".encode() for i, r in enumerate(results)}
    order = [i for i, r in enumerate(results) if r.member_id != leader] + \
            [i for i, r in enumerate(results) if r.member_id == leader]
    tasks = {}
    for i in order:
        r = results[i]
        tasks[i] = env.sync(group, r.generation_id, r.member_id, instance_ids[i],
                            assignments if r.member_id == leader else {})
        await settle()
    return [tasks[i].result() for i in range(len(results))]


async def stable_group(env: Env, n: int, group: str = "g", instance_ids=None, protocols=None):
    results = await form_group(env, n, group, instance_ids, protocols)
    syncs = await sync_all(env, results, group, instance_ids=instance_ids)
    assert [s.error for s in syncs] == [0] * n
    return results, syncs
