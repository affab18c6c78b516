"""The cluster under test: a real ZooKeeper and N kbroker processes, each with a client listener (PLAINTEXT) and
an inter-broker listener (REPLICATION) advertised at a proxy (bench.reliability.chaos.proxy), and its log dir on its own
small tmpfs (so the disk_full fault can fill it without touching the host's disks)."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient
from kazoo.client import KazooClient

from bench.harness.broker_process import (
    accepts,
    launch,
    output_since,
    output_size,
    serve_argv,
    stop_or_kill,
    terminate,
    wait_serving,
)
from bench.reliability.chaos.proxy import ProxyHub
from kazoo_bridge.local_server import ZooKeeperServer, free_port

CHROOT = "/chaos"
SESSION_TIMEOUT_MS = 6000  # low, so a SIGSTOP or an expiry costs seconds, not the default 18
TMPFS_SIZE = "256m"


def broker_settings(broker_id: int, port: int, replication_port: int, proxy_port: int, log_dir: Path,
                    zookeeper: str) -> dict[str, str]:
    return {
        "broker.id": str(broker_id),
        "listeners": f"PLAINTEXT://127.0.0.1:{port},REPLICATION://127.0.0.1:{replication_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port},REPLICATION://127.0.0.1:{proxy_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,REPLICATION:PLAINTEXT",
        "inter.broker.listener.name": "REPLICATION",
        "log.dirs": str(log_dir),
        **cluster_settings(zookeeper),
    }


def cluster_settings(zookeeper: str) -> dict[str, str]:
    """What every broker of a chaos run shares, whatever runs it: ZooKeeper under the chroot with a short session,
    replication factor 3 and min.insync.replicas 2 for user and internal topics, no unclean election."""
    return {
        "zookeeper.connect": zookeeper + CHROOT,
        "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
        "default.replication.factor": "3",
        "min.insync.replicas": "2",
        "unclean.leader.election.enable": "false",
        "offsets.topic.replication.factor": "3",
        "offsets.topic.num.partitions": "10",
        "transaction.state.log.replication.factor": "3",
        "transaction.state.log.min.isr": "2",
        "transaction.state.log.num.partitions": "10",
        "group.initial.rebalance.delay.ms": "0",
    }


class Broker:
    """One kbroker process; restartable with the same settings and log dir."""

    def __init__(self, broker_id: int, workdir: Path, zookeeper: str) -> None:
        self.id = broker_id
        self.port = free_port()
        self.replication_port = free_port()
        self.proxy_port = free_port()
        self.log_dir = workdir / f"broker-{broker_id}"
        self.out_path = workdir / f"broker-{broker_id}.out"
        self.session_file = workdir / f"broker-{broker_id}.zk-session"
        self.settings = broker_settings(broker_id, self.port, self.replication_port, self.proxy_port,
                                        self.log_dir, zookeeper)
        self.proc: subprocess.Popen[bytes] | None = None
        self.stopped = False  # SIGSTOPped
        self.mounted = False

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def mount(self, size: str = TMPFS_SIZE) -> None:
        """Its own tmpfs (root only; without it the log dir is a plain directory and disk_full is unavailable)."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        if os.geteuid() != 0:
            return
        result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(self.log_dir)],
                                capture_output=True, text=True)
        self.mounted = result.returncode == 0

    def unmount(self) -> None:
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.log_dir)], capture_output=True)
            self.mounted = False

    def start(self, timeout: float = 60.0) -> None:
        argv = serve_argv([str(Path(sys.executable).parent / "kbroker"), "serve"], self.settings)
        env = dict(os.environ, KBROKER_LOG_LEVEL=os.environ.get("KBROKER_LOG_LEVEL", "WARNING"),
                   KBROKER_CHAOS_SESSION_FILE=str(self.session_file))
        self.proc = launch(argv, self.out_path, env=env, append=True, cwd=None, start_new_session=True,
                           banner=f"\n=== start {time.strftime('%H:%M:%S')} ===\n")
        self.stopped = False
        outcome = wait_serving(self.proc, lambda: accepts("127.0.0.1", self.port), timeout, 0.1)
        if outcome == "exited":
            raise RuntimeError(f"broker {self.id} exited with {self.proc.returncode} at start: {self.tail()}")
        if outcome == "timeout":
            raise RuntimeError(f"broker {self.id} did not listen within {timeout}s: {self.tail()}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(sig)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self, timeout: float = 30.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        if self.stopped:
            self.proc.send_signal(signal.SIGCONT)
            self.stopped = False
        try:
            terminate(self.proc, timeout)
        except subprocess.TimeoutExpired:
            pass  # killed and reaped

    def tail(self, lines: int = 8) -> str:
        try:
            return " | ".join(self.out_path.read_text(errors="replace").strip().splitlines()[-lines:])
        except OSError:
            return ""

    def output_since(self, offset: int) -> str:
        return output_since(self.out_path, offset)

    def output_size(self) -> int:
        return output_size(self.out_path)

    def session(self) -> tuple[int, bytes] | None:
        """The broker's current ZooKeeper session (id, password), published through KBROKER_CHAOS_SESSION_FILE."""
        try:
            session_hex, password_hex = self.session_file.read_text().split()
        except (OSError, ValueError):
            return None
        return int(session_hex, 16), bytes.fromhex(password_hex)


class ChaosCluster:
    def __init__(self, workdir: Path, size: int = 3) -> None:
        self.workdir = workdir
        self.zookeeper = ZooKeeperServer(workdir / "zookeeper")
        self.brokers = [Broker(i, workdir, self.zookeeper.hosts) for i in range(1, size + 1)]
        self.proxies = ProxyHub()

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers)

    def broker(self, broker_id: int) -> Broker:
        return next(b for b in self.brokers if b.id == broker_id)

    def start(self) -> None:
        self.zookeeper.start()
        for broker in self.brokers:
            broker.mount()
            self.proxies.add(broker.id, broker.proxy_port, broker.replication_port)
        for broker in self.brokers:
            broker.start()
        self.wait_registered()

    def wait_registered(self) -> None:
        deadline = time.monotonic() + 60
        while True:  # every broker registered, as the controller sees it (topics need all three)
            try:
                md = self.admin().list_topics(timeout=10)
                if len(md.brokers) == len(self.brokers) and md.controller_id >= 0:
                    return
            except Exception:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"not every broker registered within 60 s: {self.brokers[0].tail()}")
            time.sleep(0.2)

    def stop(self, keep_logs: bool = False) -> None:
        """Stop everything; ``keep_logs`` copies each broker's log dir out of its tmpfs first (for a failed run)."""
        stop_or_kill(self.brokers)
        self.proxies.close()
        self.zookeeper.stop()
        for broker in self.brokers:
            if keep_logs and broker.mounted:
                shutil.copytree(broker.log_dir, self.workdir / f"broker-{broker.id}-kept", dirs_exist_ok=True,
                                ignore=shutil.ignore_patterns("chaos-filler"))
            broker.unmount()

    def zk(self) -> KazooClient:
        client = KazooClient(hosts=self.zookeeper.hosts + CHROOT, timeout=10.0)
        client.start(timeout=30)
        return client

    def controller(self) -> int | None:
        import json
        client = self.zk()
        try:
            data, _ = client.get("/controller")
            return int(json.loads(data)["brokerid"])
        except Exception:
            return None
        finally:
            client.stop()
            client.close()

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap})

    def healthy(self, topics: list[str]) -> tuple[bool, str]:
        """Every partition of ``topics`` led, with every replica in its ISR (and every broker process alive)."""
        for broker in self.brokers:
            if not broker.alive():
                return False, f"broker {broker.id} is not running"
        try:
            md = self.admin().list_topics(timeout=10)
        except Exception as exc:
            return False, f"metadata: {exc}"
        for topic in topics:
            t = md.topics.get(topic)
            if t is None or t.error is not None or not t.partitions:
                return False, f"{topic}: {t.error if t is not None else 'missing'}"
            for p in t.partitions.values():
                if p.leader < 0 or len(p.isrs) < len(p.replicas):
                    return False, f"{topic}-{p.id}: leader {p.leader}, isr {p.isrs}"
        return True, ""

    def wait_healthy(self, topics: list[str], timeout: float) -> tuple[float | None, str]:
        """Seconds until healthy, or (None, why not) after ``timeout``."""
        start = time.monotonic()
        why = ""
        while time.monotonic() - start < timeout:
            ok, why = self.healthy(topics)
            if ok:
                return time.monotonic() - start, ""
            time.sleep(0.5)
        return None, why
