"""SIGKILL at named crash points inside the log layer's multi-step writes, then restart.

Each test chains the crash points of one family in one broker's life: the broker starts with one
point armed (``KBROKER_CRASH_AT=<name>:<nth>``, nth drawn from a seeded generator), the workload
runs until the broker kills itself there, the acknowledged data is checked, and the next point is
armed for the restart. A point must be reached (its marker in the broker log) or the test fails.
At the end, unarmed: the idempotent producer continues, compaction runs, data, indexes and files
check out (``harness.final_checks``).

``KBROKER_CRASH_SEED`` changes the seed (default 14).
"""
from __future__ import annotations

import os
import random

import pytest

from .harness import (
    CrashBroker,
    Journal,
    Workload,
    create_topics,
    final_checks,
    start,
    wait_until,
)

SEED = int(os.environ.get("KBROKER_CRASH_SEED", "14"))
REACH_TIMEOUT = 45.0

CHECKPOINTS = ["recovery-point-offset-checkpoint", "log-start-offset-checkpoint", "replication-offset-checkpoint",
               "cleaner-offset-checkpoint", "leader-epoch-checkpoint"]

# family -> [(crash point, largest nth to draw)]; the order is the order of the kills. Families
# share one broker's life each, to keep the run short.
FAMILIES: dict[str, list[tuple[str, int]]] = {
    "append-roll": [("segment.append.torn", 200), ("segment.recover.after_cut", 1),
                    ("segment.append.before_index", 20), ("log.roll.after_old_trimmed", 8),
                    ("log.roll.after_new_segment", 8)],
    "compaction-producer-state": [
        ("cleaner.cleaned.before_fsync", 2), ("swap.cleaned", 2), ("swap.swap-partial", 2), ("swap.swap", 2),
        ("producer_snapshot.tmp_torn", 3), ("swap.deleted-partial", 2), ("swap.deleted", 2),
        ("producer_snapshot.before_rename", 3), ("swap.final-partial", 2), ("swap.final", 2),
        ("producer_snapshot.before_old_removed", 3), ("txnindex.append.torn", 2)],
    "checkpoint": [(f"checkpoint.{name}.{step}", 4 if name == "leader-epoch-checkpoint" else 10)
                   for step in ("before_rename", "before_dir_fsync") for name in CHECKPOINTS]
                  + [("checkpoint.recovery-point-offset-checkpoint.tmp_torn", 6)],
}


def run_family(broker: CrashBroker, family: str) -> dict[str, int]:
    """Kills chain without a clean start in between: each restart recovers from the last kill with
    the next point armed; the acknowledged data is checked once all kills are done (a lost or
    duplicated message stays so)."""
    rng = random.Random(f"{SEED}:{family}")
    journal = Journal()
    broker.start()
    create_topics(broker.bootstrap)
    workload = Workload(broker.bootstrap, journal)
    workload.start()
    try:
        wait_until(lambda: len(journal.acked) >= 200, 60, "the first acknowledgements")
        broker.kill()
        for point, top in FAMILIES[family]:
            broker.crash_at = f"{point}:{rng.randint(1, top)}"
            if start(broker):
                assert broker.wait_dead(REACH_TIMEOUT), f"crash point {broker.crash_at} not reached in {REACH_TIMEOUT}s"
            assert f"KBROKER CRASH POINT {point} #" in broker.log_since_start(), \
                f"the broker died, but not at {broker.crash_at}"
        broker.crash_at = None
        assert start(broker)
        counts = final_checks(broker, journal, workload)
    finally:
        workload.stop(check=False)
    counts["kills"] = len(FAMILIES[family]) + 1
    return counts


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_crash_points(crash_broker, family):
    counts = run_family(crash_broker, family)
    print(f"crash family {family}: {counts}")
