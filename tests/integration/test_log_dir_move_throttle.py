"""``kbroker reassign --replica-alter-log-dirs-throttle`` against a real broker with two log dirs: the tool sets
``replica.alter.log.dirs.io.max.bytes.per.second`` on the broker (a dynamic broker config, read back with
DescribeConfigs), the move of a 12 MB partition keeps to it (a ceiling: it takes at least the time the bound
allows for what may not go at once), and ``--verify`` clears it once the move is done (not with
``--preserve-throttles``)."""
from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource

from tests.integration.conftest import BrokerProcess
from tests.integration.helpers import create_topic
from tests.integration.test_alter_replica_log_dirs import dirs_of, placement, reassign_cli, wait_moved

RATE = 2 << 20
KEY = "replica.alter.log.dirs.io.max.bytes.per.second"


@pytest.fixture
def jbod(tmp_path: Path) -> Iterator[BrokerProcess]:
    bp = BrokerProcess(tmp_path, {"log.dirs": f"{tmp_path / 'a'},{tmp_path / 'b'}", "num.partitions": "1"})
    bp.start()
    try:
        yield bp
    finally:
        bp.kill()


def dynamic_value(bp: BrokerProcess) -> str | None:
    """The broker's own dynamic value of KEY (None when unset there)."""
    resource = ConfigResource("broker", "0")
    admin = AdminClient({"bootstrap.servers": bp.bootstrap})
    entries = admin.describe_configs([resource])[resource].result(15)
    entry = entries[KEY]
    return entry.value if entry.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value else None


def test_the_move_keeps_to_the_log_dir_throttle_and_verify_clears_it(jbod: BrokerProcess, tmp_path: Path) -> None:
    a, b = dirs_of(jbod)
    create_topic(jbod.bootstrap, "bulk")
    producer = Producer({"bootstrap.servers": jbod.bootstrap, "linger.ms": 20, "batch.size": 64 << 10})
    for i in range(1200):
        producer.produce("bulk", value=bytes([i % 256]) * 10_000)
        producer.poll(0)
    assert producer.flush(60) == 0
    source = placement(jbod, "bulk")[(0, False)]
    target = b if source == a else a
    size = sum(f.stat().st_size for f in (Path(source) / "bulk-0").glob("*.log"))
    assert size >= 12_000_000

    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "bulk", "partition": 0, "replicas": [0], "log_dirs": [target]}]}))
    started = time.monotonic()
    done = reassign_cli(jbod, "--execute", "--reassignment-json-file", str(plan),
                        "--replica-alter-log-dirs-throttle", str(RATE))
    assert done.returncode == 0 and not done.stderr, done
    lines = done.stdout.splitlines()
    assert "Warning: You must run --verify periodically, until the reassignment completes, to ensure the " \
           "throttle is removed." in lines
    assert f"The replica-alter-dir throttle limit was set to {RATE} B/s" in lines
    assert lines.index(f"The replica-alter-dir throttle limit was set to {RATE} B/s") < lines.index(
        "Successfully started log directory move for: bulk-0-0")
    assert dynamic_value(jbod) == str(RATE)
    wait_moved(jbod, "bulk", target)
    elapsed = time.monotonic() - started
    # what may go at once: the first second's worth, one throttled round over it, the last MiB before the swap
    allowance = RATE + RATE + (1 << 20)
    assert elapsed >= (size - allowance) / RATE > 2, (size, elapsed)

    kept = reassign_cli(jbod, "--verify", "--reassignment-json-file", str(plan), "--preserve-throttles")
    assert kept.returncode == 0 and not kept.stderr, kept
    assert not any(line.startswith("Clearing") for line in kept.stdout.splitlines())
    assert dynamic_value(jbod) == str(RATE)
    verify = reassign_cli(jbod, "--verify", "--reassignment-json-file", str(plan))
    assert verify.returncode == 0 and not verify.stderr, verify
    assert verify.stdout.splitlines() == [
        "Status of partition reassignment:", "Reassignment of partition bulk-0 is complete.",
        "Reassignment of replica bulk-0-0 completed successfully.",
        "Clearing broker-level throttles on broker 0", "Clearing topic-level throttles on topic bulk"]
    assert dynamic_value(jbod) is None
