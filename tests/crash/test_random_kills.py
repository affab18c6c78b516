"""SIGKILL from outside at random moments of a heavy workload (appends rolling segments every few
hundred milliseconds, a compacted topic cleaned continuously, transactions, checkpoints and
producer snapshots), each kill followed by a restart and the data checks; then the final checks.

Seeded: ``KBROKER_CRASH_SEED`` (default 14) picks the moments; ``KBROKER_CRASH_KILLS`` the
number of kills (default 8).
"""
from __future__ import annotations

import os
import random
import time

from .harness import Journal, Workload, acked_count, check_data, create_topics, final_checks, wait_until

SEED = int(os.environ.get("KBROKER_CRASH_SEED", "14"))
KILLS = int(os.environ.get("KBROKER_CRASH_KILLS", "8"))


def test_random_sigkill_loop(crash_broker):
    broker = crash_broker
    rng = random.Random(SEED)
    journal = Journal()
    broker.start()
    create_topics(broker.bootstrap)
    workload = Workload(broker.bootstrap, journal)
    workload.start()
    kills = 0
    try:
        wait_until(lambda: acked_count(journal) >= 200, 60, "the first acknowledgements")
        for _ in range(KILLS):
            time.sleep(rng.uniform(0.1, 1.2))
            broker.kill()
            kills += 1
            broker.start()
            counts = check_data(broker.bootstrap, journal)
        counts = final_checks(broker, journal, workload)
    finally:
        workload.stop(check=False)
    assert kills == KILLS
    assert counts["acked"] > 1000 * KILLS // 4, f"too little was acknowledged to mean anything: {counts}"
    print(f"random kills: {kills}, seed {SEED}: {counts}")
