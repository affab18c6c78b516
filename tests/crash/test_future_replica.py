"""SIGKILL at each step of moving a partition between log dirs (AlterReplicaLogDirs), then restart.

One broker with two log dirs and an idempotent acks=all producer that lives through the kills. The
steps are chained in one broker life: the broker starts with the next point armed; a move the last
kill interrupted resumes (and may itself reach the armed point), else the test asks for a move to the
other dir; the broker must kill itself there. After every kill the disk holds one current log of the
partition, or a caught-up ``-future`` beside the ``-delete`` of the same move (a swap cut between its
renames, which the start completes); after every start DescribeLogDirs shows exactly one current
replica. At the end, unarmed, the last move completes and every acknowledged message is read back
once, in order, and again after a clean restart.
"""
from __future__ import annotations

import os
import random
import re
import time
from pathlib import Path

from kbroker.log import checkpoint
from kbroker.tools.client import ConnectError
from tests.integration.helpers import create_topic
from tests.integration.test_alter_replica_log_dirs import SteadyProducer, alter, placement, read_back

from .harness import CrashBroker, start, wait_until

TOPIC = "mv"
STEPS = ["future.created", "future.copied", "future.swap.prepared", "future.swap.current_renamed",
         "future.swap.future_renamed", "future.swap.checkpointed", "future.old_deleted"]
REACH_TIMEOUT = 60.0
SEED = int(os.environ.get("KBROKER_CRASH_SEED", "14"))
_MOVING = re.compile(rf"^{TOPIC}-0\.([0-9a-f]{{32}})-(future|delete)$")


def on_disk(dirs: list[Path]) -> tuple[list[Path], list[tuple[str, str, Path]]]:
    currents = [d / f"{TOPIC}-0" for d in dirs if (d / f"{TOPIC}-0").is_dir()]
    moving = [(m[1], m[2], e) for d in dirs for e in d.iterdir() if (m := _MOVING.match(e.name))]
    return currents, moving


def check_resolvable(dirs: list[Path]) -> None:
    """What a kill left: exactly one current log, or none with the future and the replaced log of one move."""
    currents, moving = on_disk(dirs)
    if len(currents) == 1:
        return
    assert not currents, f"two current logs: {currents}"
    kinds = {(uid, kind) for uid, kind, _ in moving}
    assert any((uid, "delete") in kinds for uid, kind in kinds if kind == "future"), \
        f"no current log and no swap to complete: {moving}"


def current_dir(broker: CrashBroker) -> str | None:
    return placement(broker, TOPIC).get((0, False))


def settled(broker: CrashBroker) -> bool:
    found = placement(broker, TOPIC)
    return len(found) == 1 and (0, False) in found


def test_kill_at_each_step_of_a_move(crash_broker: CrashBroker, tmp_path: Path):
    broker = crash_broker
    dirs = [(tmp_path / name).resolve() for name in ("a", "b")]
    broker.overrides["log.dirs"] = ",".join(map(str, dirs))
    broker.start()
    create_topic(broker.bootstrap, TOPIC, configs={"segment.bytes": "65536"})
    producer = SteadyProducer(broker.bootstrap, TOPIC, value_size=2000)
    producer.start()
    try:
        producer.wait_acked(1000)  # about 2 MB in ~30 segments: the copy runs on the worker first
        broker.kill()
        rng = random.Random(SEED)
        for point in STEPS:
            broker.crash_at = f"{point}:{rng.randint(1, 2) if point == 'future.copied' else 1}"
            if start(broker):
                try:
                    assert current_dir(broker) is not None, placement(broker, TOPIC)  # one current replica
                    # a resumed move may reach the point by itself; otherwise ask for one
                    deadline = time.monotonic() + 20
                    while broker.running and not settled(broker) and time.monotonic() < deadline:
                        time.sleep(0.1)
                    if broker.running:
                        here = current_dir(broker)
                        target = next(str(d) for d in dirs if str(d) != here)
                        assert alter(broker, [(target, TOPIC, [0])]) == {(TOPIC, 0): 0}
                except ConnectError:
                    pass  # it died meanwhile: at the armed point, as checked below
                assert broker.wait_dead(REACH_TIMEOUT), f"crash point {point} not reached"
            assert f"KBROKER CRASH POINT {point} #" in broker.log_since_start(), f"died, but not at {point}"
            check_resolvable(dirs)
        broker.crash_at = None
        assert start(broker)
        wait_until(lambda: settled(broker), REACH_TIMEOUT, "the last move to finish")
        producer.wait_acked(len(producer.acked) + 300)
    finally:
        producer.stop.set()
        producer.join(120)
    assert not producer.failed, producer.failed[:3]
    read_back(broker, TOPIC, producer.acked)
    here = current_dir(broker)
    assert here is not None
    for name in (checkpoint.RECOVERY_POINT, checkpoint.LOG_START_OFFSET, checkpoint.HIGH_WATERMARK):
        assert (TOPIC, 0) in checkpoint.read_checkpoint(Path(here) / name), name
    broker.restart()
    assert placement(broker, TOPIC) == {(0, False): here}
    currents, moving = on_disk(dirs)
    assert currents == [Path(here) / f"{TOPIC}-0"] and not moving, (currents, moving)
    read_back(broker, TOPIC, producer.acked)
