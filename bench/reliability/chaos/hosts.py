"""The chaos cluster in host mode (issue 24): three simulated servers, each one ``kbroker serve`` supervisor with
``broker.processes=2``, so six brokers (ids 1-2, 3-4, 5-6) that a server's failure takes down together.

Each server listens on its own loopback address (127.0.0.2, .3, .4: all this machine's loopback on Linux), so
placement (zk_compat/servers.py) sees three servers and host mode's rack default (the advertised host,
kbroker/host/plan.py) gives each server's brokers one rack: replication factor 3 puts a replica on every server.

``HostProcess`` is one broker of a server seen through the same interface as bench.reliability.chaos.cluster's
``Broker``, so the generic faults (kill9, sigstop, zk_restart) and the checks take it unchanged: a process the
harness kills is started again by its supervisor, ``start()`` only waits for that. There is no proxy (the net fault
needs one per listener) and no session file or tmpfs per process (zk_expire and disk_full skip themselves)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench.harness.broker_process import (
    accepts,
    launch,
    neighbouring_free_ports,
    output_since,
    output_size,
    stop_or_kill,
    wait_serving,
)
from bench.reliability.chaos.cluster import ChaosCluster, cluster_settings
from kazoo_bridge.local_server import ZooKeeperServer

SERVER_HOSTS = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
PROCESSES_PER_SERVER = 2
STOP_TIMEOUT_S = 150.0  # the supervisor stops its brokers one at a time, each with a controlled shutdown


def server_settings(first_id: int, host: str, port: int, log_dirs: list[Path], zookeeper: str) -> dict[str, str]:
    """One server's server.properties in host mode; the topic and internal-topic settings are the 3-broker run's."""
    return {
        "broker.processes": str(PROCESSES_PER_SERVER),
        "broker.id": str(first_id),
        "listeners": f"PLAINTEXT://{host}:{port}",
        "log.dirs": ",".join(str(d) for d in log_dirs),
        **cluster_settings(zookeeper),
    }


class Server:
    """One simulated server: its supervisor process and its brokers."""

    def __init__(self, index: int, workdir: Path, zookeeper: str) -> None:
        self.index = index
        self.host = SERVER_HOSTS[index]
        self.port = neighbouring_free_ports(self.host, PROCESSES_PER_SERVER)
        first_id = index * PROCESSES_PER_SERVER + 1
        dirs = [workdir / f"server-{index + 1}" / f"disk{i}" for i in range(PROCESSES_PER_SERVER)]
        self.settings = server_settings(first_id, self.host, self.port, dirs, zookeeper)
        self.out_path = workdir / f"server-{index + 1}.out"
        self.proc: subprocess.Popen[bytes] | None = None
        self.processes = [HostProcess(self, i, first_id + i, dirs[i], self.port + i)
                          for i in range(PROCESSES_PER_SERVER)]

    def start(self, timeout: float = 90.0) -> None:
        """The supervisor, then every broker listening (a restarted one first waits for its old ZooKeeper
        registration to expire, up to the session timeout)."""
        argv = [str(Path(sys.executable).parent / "kbroker"), "serve"]
        for key, value in self.settings.items():
            argv += ["--override", f"{key}={value}"]
        env = dict(os.environ, KBROKER_LOG_LEVEL=os.environ.get("KBROKER_LOG_LEVEL", "WARNING"))
        self.proc = launch(argv, self.out_path, env=env, append=True, cwd=None, start_new_session=True,
                           banner=f"\n=== start {time.strftime('%H:%M:%S')} ===\n")
        deadline = time.monotonic() + timeout
        for process in self.processes:
            outcome = wait_serving(self.proc, lambda p=process: accepts(p.host, p.port),
                                   max(1.0, deadline - time.monotonic()), 0.1)
            if outcome != "serving":
                raise RuntimeError(f"server {self.host}: broker {process.id} {outcome} at start: {self.tail()}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def children(self) -> dict[int, int]:
        """broker id -> pid of the supervisor's running children (their command line names their properties
        file, broker-<id>.properties)."""
        if not self.alive():
            return {}
        assert self.proc is not None
        try:
            pids = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
        except OSError:
            return {}
        out: dict[int, int] = {}
        for pid in map(int, pids):
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            for arg in argv:
                name = Path(arg.decode(errors="replace")).name
                if name.startswith("broker-") and name.endswith(".properties"):
                    out[int(name[len("broker-"):-len(".properties")])] = pid
        return out

    def kill(self) -> list[int]:
        """SIGKILL the whole server at once: the supervisor is stopped first (so it restarts nothing and its
        death does not send its children PR_SET_PDEATHSIG's SIGTERM, a clean shutdown), then every child and the
        supervisor are killed. Returns the pids killed."""
        if self.proc is None or self.proc.poll() is not None:
            return []
        os.kill(self.proc.pid, signal.SIGSTOP)
        pids = list(self.children().values())
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.kill()
        self.proc.wait()
        for pid in pids:  # children of the dead supervisor are reaped by init; wait until they are gone
            deadline = time.monotonic() + 10
            while Path(f"/proc/{pid}").exists() and _state(pid) != "Z" and time.monotonic() < deadline:
                time.sleep(0.01)
        return [*pids, self.proc.pid]

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        for process in self.processes:
            if process.stopped:
                process.signal(signal.SIGCONT)
                process.stopped = False
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def tail(self, lines: int = 8) -> str:
        try:
            return " | ".join(self.out_path.read_text(errors="replace").strip().splitlines()[-lines:])
        except OSError:
            return ""


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


class HostProcess:
    """One broker process of a server, with bench.reliability.chaos.cluster.Broker's interface."""

    mounted = False  # no tmpfs of its own: disk_full skips it

    def __init__(self, server: Server, index: int, broker_id: int, log_dir: Path, port: int) -> None:
        self.server = server
        self.index = index
        self.id = broker_id
        self.log_dir = log_dir
        self.host = server.host
        self.port = port
        self.stopped = False  # SIGSTOPped

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def pid(self) -> int | None:
        return self.server.children().get(self.id)

    def alive(self) -> bool:
        pid = self.pid()
        return pid is not None and _state(pid) not in ("", "Z")

    def kill(self) -> None:
        pid = self.pid()
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while self.pid() == pid and time.monotonic() < deadline:  # until the supervisor has reaped it
                time.sleep(0.01)

    def start(self, timeout: float = 90.0) -> None:
        """Its supervisor starts it again after a death (backoff 1 s, doubling); this waits for that, and starts the
        whole server if the supervisor itself is gone."""
        if not self.server.alive():
            self.server.start(timeout)
            return
        self.stopped = False
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.alive() and accepts(self.host, self.port):
                return
            time.sleep(0.1)
        raise RuntimeError(f"broker {self.id} was not started again by its supervisor within {timeout}s: "
                           f"{self.tail()}")

    def signal(self, sig: int) -> None:
        pid = self.pid()
        if pid is not None:
            os.kill(pid, sig)

    def stop(self, timeout: float = 30.0) -> None:
        """A clean stop of one broker is its supervisor's to do: the harness stops whole servers only."""
        self.server.stop()

    def tail(self, lines: int = 8) -> str:
        return self.server.tail(lines)

    def output_since(self, offset: int) -> str:
        return output_since(self.server.out_path, offset)

    def output_size(self) -> int:
        return output_size(self.server.out_path)

    def session(self) -> tuple[int, bytes] | None:
        return None  # every process of a server shares its environment: no session file per broker


class HostModeCluster(ChaosCluster):
    """Three servers of two broker processes each over one real ZooKeeper."""

    def __init__(self, workdir: Path) -> None:  # no super().__init__: no Broker objects, no proxies
        self.workdir = workdir
        self.zookeeper = ZooKeeperServer(workdir / "zookeeper")
        self.servers = [Server(i, workdir, self.zookeeper.hosts) for i in range(len(SERVER_HOSTS))]
        self.brokers = [p for server in self.servers for p in server.processes]
        self.proxies = None

    def start(self) -> None:
        self.zookeeper.start()
        for server in self.servers:
            server.start()
        self.wait_registered()

    def stop(self, keep_logs: bool = False) -> None:
        """Stop every server (log dirs are plain directories: kept in the work dir as they are)."""
        stop_or_kill(self.servers)
        self.zookeeper.stop()
