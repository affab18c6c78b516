"""The one clock of the ZooKeeper layer: wall-clock milliseconds, what Kafka writes into znodes
(registration timestamps, notification and reassignment times) and what the embedded store stamps
as ctime/mtime, as a ZooKeeper server does. zk_compat imports nothing of the broker, so it keeps
its own (``kbroker.clock.wall_ms`` is the broker's, with the same meaning)."""
from __future__ import annotations

import time


def wall_ms() -> int:
    return time.time_ns() // 1_000_000
