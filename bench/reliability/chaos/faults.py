"""The faults, one at a time: each injects, holds, heals, and returns what it did (a timeline entry).

Every random choice (which kind, which broker, how long, which net mode) comes from the schedule's seeded
``random.Random``, so a seed replays the same schedule (the cluster's own timing still varies)."""
from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient

from bench.reliability.chaos.cluster import CHROOT, SESSION_TIMEOUT_MS, Broker, ChaosCluster

KINDS = ("kill9", "sigstop", "zk_expire", "zk_restart", "net", "disk_full")
# host mode (bench.reliability.chaos.hosts): no proxies, no per-broker session file or tmpfs, so net, zk_expire and
# disk_full do not apply; a process killed alone is started again by its supervisor
HOST_KINDS = ("host_down", "kill9", "sigstop", "zk_restart")
OFFLINE_DIR_LOG = "is offline after"  # LogManager.mark_dir_offline's message

Fault = Callable[[ChaosCluster, random.Random], dict[str, Any]]


def _pick(cluster: ChaosCluster, rng: random.Random) -> Broker:
    return cluster.brokers[rng.randrange(len(cluster.brokers))]


def _ensure_running(broker: Broker, record: dict[str, Any]) -> None:
    """A broker that exited during a fault (e.g. it halted on a failed log dir) is started again, and said so."""
    if not broker.alive():
        record["exited"] = broker.proc.returncode if broker.proc is not None else None
        broker.start()


def kill9(cluster: ChaosCluster, rng: random.Random) -> dict[str, Any]:
    broker = _pick(cluster, rng)
    down_s = rng.uniform(0.5, 3.0)
    record = {"broker": broker.id, "was_controller": cluster.controller() == broker.id, "down_s": round(down_s, 2)}
    broker.kill()
    time.sleep(down_s)
    broker.start()
    return record


def sigstop(cluster: ChaosCluster, rng: random.Random) -> dict[str, Any]:
    """Frozen past its ZooKeeper session: the session expires, the broker wakes up into a cluster that moved on."""
    broker = _pick(cluster, rng)
    hold_s = SESSION_TIMEOUT_MS / 1000 + rng.uniform(1.0, 4.0)
    record = {"broker": broker.id, "was_controller": cluster.controller() == broker.id, "hold_s": round(hold_s, 2)}
    broker.signal(signal.SIGSTOP)
    broker.stopped = True
    time.sleep(hold_s)
    broker.signal(signal.SIGCONT)
    broker.stopped = False
    return record


def zk_expire(cluster: ChaosCluster, rng: random.Random) -> dict[str, Any]:
    """kazoo's trick: a second client joins the broker's session (id + password) and closes it."""
    broker = _pick(cluster, rng)
    record: dict[str, Any] = {"broker": broker.id, "was_controller": cluster.controller() == broker.id}
    session = broker.session()
    if session is None:
        record["skipped"] = "no session file"
        return record
    record["session"] = f"{session[0]:#x}"
    other = KazooClient(hosts=cluster.zookeeper.hosts + CHROOT, client_id=session, timeout=SESSION_TIMEOUT_MS / 1000)
    try:
        other.start(timeout=15)
        other.stop()
    finally:
        other.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # the broker opens a new session and publishes it
        current = broker.session()
        if current is not None and current[0] != session[0]:
            record["new_session"] = f"{current[0]:#x}"
            break
        time.sleep(0.2)
    return record


def zk_restart(cluster: ChaosCluster, rng: random.Random) -> dict[str, Any]:
    """Stop and start the ZooKeeper server (same port, same data dir): sessions survive a short outage."""
    down_s = rng.uniform(0.5, 3.0)
    cluster.zookeeper.stop()
    time.sleep(down_s)
    cluster.zookeeper.start(timeout=60)
    return {"down_s": round(down_s, 2)}


def net(cluster: ChaosCluster, rng: random.Random) -> dict[str, Any]:
    broker = _pick(cluster, rng)
    mode = rng.choice(("drop", "delay", "stall"))
    hold_s = rng.uniform(2.0, 8.0)
    delay_s = rng.uniform(0.05, 0.5) if mode == "delay" else 0.0
    record = {"broker": broker.id, "was_controller": cluster.controller() == broker.id, "mode": mode,
              "hold_s": round(hold_s, 2)}
    if mode == "delay":
        record["delay_s"] = round(delay_s, 3)
    cluster.proxies.set_fault(broker.id, mode, delay_s)
    try:
        time.sleep(hold_s)
    finally:
        cluster.proxies.restore()
    return record


def disk_full(cluster: ChaosCluster, rng: random.Random) -> dict[str, Any]:
    """Fill the broker's log dir (its own tmpfs) to the last byte, hold, free it. A broker whose only log dir
    failed halts (as Kafka's does); it is started again once the space is free (an operator's step)."""
    broker = _pick(cluster, rng)
    hold_s = rng.uniform(2.0, 5.0)
    record: dict[str, Any] = {"broker": broker.id, "hold_s": round(hold_s, 2)}
    if not broker.mounted:
        record["skipped"] = "log dir is not on its own mount (not root?)"
        return record
    mark = broker.output_size()
    filler = broker.log_dir / "chaos-filler"
    try:
        with open(filler, "wb") as f:
            chunk = b"\0" * (1 << 20)
            try:
                while True:
                    f.write(chunk)
            except OSError:
                pass
            try:  # the last partial MiB
                while True:
                    f.write(b"\0" * 4096)
            except OSError:
                pass
    except OSError:
        pass
    record["filled_bytes"] = filler.stat().st_size if filler.exists() else 0
    time.sleep(hold_s)
    try:
        os.remove(filler)
    except OSError:
        pass
    offline = OFFLINE_DIR_LOG in broker.output_since(mark)
    record["dir_went_offline"] = offline
    if offline and broker.alive():  # it should have halted: say so, and restart it to go on
        record["alive_with_offline_dir"] = True
        broker.stop()
    _ensure_running(broker, record)
    return record


def host_down(cluster: ChaosCluster, rng: random.Random) -> dict[str, Any]:
    """A whole server lost at once (host mode): its supervisor and every broker process SIGKILLed together,
    down for a moment, then the server started again; its brokers come back under their ids once their old
    ZooKeeper sessions have expired."""
    servers = getattr(cluster, "servers", None)
    if not servers:
        return {"skipped": "not host mode (--host-mode)"}
    server = servers[rng.randrange(len(servers))]
    down_s = rng.uniform(0.5, 3.0)
    ids = [p.id for p in server.processes]
    record: dict[str, Any] = {"server": server.host, "brokers": ids, "was_controller": cluster.controller() in ids,
                              "down_s": round(down_s, 2)}
    record["killed"] = len(server.kill())
    time.sleep(down_s)
    t0 = time.monotonic()
    server.start()
    record["back_s"] = round(time.monotonic() - t0, 1)
    return record


FAULTS: dict[str, Fault] = {"kill9": kill9, "sigstop": sigstop, "zk_expire": zk_expire, "zk_restart": zk_restart,
                            "net": net, "disk_full": disk_full, "host_down": host_down}


class Schedule:
    """Kinds in shuffled rounds (every kind once per round, so a short run still sees each), gaps of
    0.5-1.5x ``interval`` seconds."""

    def __init__(self, kinds: list[str], interval: float, seed: int) -> None:
        self.kinds = kinds
        self.interval = interval
        self.rng = random.Random(seed)
        self._round: list[str] = []

    def next_gap(self) -> float:
        return self.rng.uniform(0.5, 1.5) * self.interval

    def next_kind(self) -> str:
        if not self._round:
            self._round = list(self.kinds)
            self.rng.shuffle(self._round)
        return self._round.pop(0)
