"""The Ansible deployment (ansible/) applied for real on this machine.

One ZooKeeper and three kbroker "hosts", all ``ansible_connection=local`` on 127.0.0.1 with their own
install roots, ports and two directory "disks" each, run by the supervised service backend (pid file and
a control script: this container has no systemd). No privilege escalation, no package installs, no
sysctl: the zookeeper role points at the Debian package already installed (`make debs`).

Host kb1 runs host mode (issue 24 item 4: kbroker_processes=2): `kbroker host-plan` on it renders brokers 11
and 12, each its own service (a control script here, a kbroker@<id> unit under systemd) pinned to its own core
with its own disk and ports; kb2 is a single broker (id 2) as before; no kb3, so three broker processes run, as
without host mode.

The test: site.yml brings the cluster up; ZooKeeper holds brokers 2, 11 and 12, kb1's two run on disjoint
cores and serve produce and consume through their own ports; a replication-factor-3 topic gets 3 ISR members
on every partition; rolling-restart.yml runs while an idempotent acks=all producer writes
(min.insync.replicas=2), one broker process at a time (kb1's two in turn, each behind the /health gate), and
every acknowledged message is read back; site.yml again reports changed=0 for every host; the processes are
stopped at the end. ansible-lint (production profile) and --syntax-check run separately.
With KBROKER_DEPLOY_CONFIG_CHANGE=1 it then also changes server.properties through site.yml with
kbroker_serial=1 and kbroker_restart_wait_in_sync=true and checks each broker restarted and waited in turn.
"""
from __future__ import annotations

import getpass
import grp
import json
import os
import random
import re
import socket
import subprocess
import sys
import threading
import time
import tomllib
import uuid
from pathlib import Path

import pytest

from kazoo_bridge.local_server import ZooKeeperUnavailable, free_port, java_executable, zookeeper_classpath

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_DIR = REPO / "ansible"
BIN = Path(sys.executable).parent
PLAYBOOK = BIN / "ansible-playbook"
DEPS_WHEELHOUSE = REPO / "build" / "deploy-wheelhouse"   # pyproject's dependencies (liburing from source)
LIBURING = "liburing==2024.5.3"
HOST_MODE = "kb1"                 # the host-mode host: brokers HOST_MODE_IDS, one per disk and core
HOST_MODE_IDS = (11, 12)



@pytest.fixture(autouse=True, scope="module")
def _ansible_installed() -> None:
    assert PLAYBOOK.exists(), "ansible-core is not in .venv (make deps installs it)"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(ANSIBLE_CONFIG=str(ANSIBLE_DIR / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_RETRY_FILES_ENABLED="0", ANSIBLE_HOST_KEY_CHECKING="0",
               PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}")
    return env


def _run(args: list[str], *, timeout: float, cwd: Path = ANSIBLE_DIR) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout)


def test_syntax_check() -> None:
    result = _run([str(PLAYBOOK), "--syntax-check", "site.yml", "rolling-restart.yml"], timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_ansible_lint_production_profile() -> None:
    lint = BIN / "ansible-lint"
    assert lint.exists(), "ansible-lint is not in .venv (make deps installs it)"
    result = _run([str(lint), "--offline", "--profile", "production", "."], timeout=300)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]


# ------------------------------------------------------------------------------------------------ helpers

def _runtime_requirements() -> list[str]:
    """kbroker's runtime dependencies as pyproject.toml lists them (liburing pinned there)."""
    with open(REPO / "pyproject.toml", "rb") as f:
        return list(tomllib.load(f)["project"]["dependencies"])


def _dependency_wheelhouse() -> Path:
    """Wheels of kbroker's runtime dependencies, built once (again when pyproject's list changes) and kept
    under build/, so the playbook's pip installs with --no-index (no network while the test runs)."""
    requirements = _runtime_requirements()
    assert LIBURING in requirements, f"pyproject.toml no longer pins {LIBURING}: update this test"
    stamp = DEPS_WHEELHOUSE / ".complete"
    if not stamp.exists() or stamp.read_text() != "\n".join(requirements):
        DEPS_WHEELHOUSE.mkdir(parents=True, exist_ok=True)
        # the 2026.x liburing wheels die with SIGILL here (see the Makefile): from source, as `make deps` does
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-binary", "liburing",
                        "-w", str(DEPS_WHEELHOUSE), *requirements], check=True, timeout=900)
        stamp.write_text("\n".join(requirements))
    return DEPS_WHEELHOUSE


def _build_wheel(dest: Path) -> Path:
    """The kbroker wheel with its compiled extensions, from this tree."""
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(dest), str(REPO)], check=True, timeout=600, cwd=REPO)
    wheels = sorted(dest.glob("kbroker-*.whl"))
    assert wheels, f"no kbroker wheel in {dest}"
    return wheels[-1]


def _free_ports(count: int) -> int:
    """The first of ``count`` consecutive ports free on 127.0.0.1 (host mode moves each broker's ports by its index),
    below the kernel's ephemeral range, where a client's outgoing connection cannot take one before the broker binds."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(200):
        base = random.randint(min(20000, low // 2), low - count)
        sockets = []
        try:
            for port in range(base, base + count):
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sockets.append(sock)
                sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
    raise AssertionError(f"no {count} consecutive free ports")


def _inventory(base: Path, wheel: Path, wheelhouse: Path, *, host_mode: bool = False) -> dict:
    user = getpass.getuser()
    group = grp.getgrgid(os.getgid()).gr_name
    local = {"ansible_connection": "local", "ansible_host": "127.0.0.1",
             "ansible_python_interpreter": sys.executable}
    zk_root = base / "zk1"
    zookeeper_hosts = {"zk1": {
        **local,
        "zookeeper_id": 1,
        "zookeeper_host": "127.0.0.1",
        "zookeeper_client_address": "127.0.0.1",
        "zookeeper_client_port": free_port(),
        "zookeeper_install_package": False,
        "zookeeper_manage_user": False,
        "zookeeper_user": user,
        "zookeeper_group": group,
        "zookeeper_service_manager": "supervised",
        "zookeeper_conf_dir": str(zk_root / "etc"),
        "zookeeper_data_dir": str(zk_root / "data"),
        "zookeeper_log_dir": str(zk_root / "log"),
        "zookeeper_run_dir": str(zk_root / "run"),
        "zookeeper_bin_dir": str(zk_root / "bin"),
        "zookeeper_heap": "256m",
        "zookeeper_tick_time": 500,
        "zookeeper_force_sync": False,
        "zookeeper_java": java_executable(),
        "zookeeper_classpath": zookeeper_classpath().split(os.pathsep),
    }}
    chroot = f"/kbdeploy-{uuid.uuid4().hex[:10]}"
    broker_hosts = {}
    for broker_id in (1, 2, 3):
        root = base / f"kb{broker_id}"
        broker_hosts[f"kb{broker_id}"] = {
            **local,
            "kbroker_broker_id": broker_id,
            "kbroker_rack": f"rack{broker_id}",
            "kbroker_root": str(root / "opt"),
            "kbroker_conf_dir": str(root / "etc"),
            "kbroker_log_dir": str(root / "log"),
            "kbroker_run_dir": str(root / "run"),
            "kbroker_disks": [{"path": str(root / "disk1")}, {"path": str(root / "disk2")}],
            "kbroker_listen_host": "127.0.0.1",
            "kbroker_advertised_host": "127.0.0.1",
            "kbroker_port": free_port(),
            "kbroker_status_host": "127.0.0.1",
            "kbroker_status_check_host": "127.0.0.1",
            "kbroker_status_port": free_port(),
        }
    if host_mode:   # kb1: 2 broker processes; broker i listens on port + i and answers /health on status + i
        del broker_hosts["kb3"]
        first = _free_ports(4)
        broker_hosts[HOST_MODE].update(kbroker_processes=2, kbroker_broker_id=HOST_MODE_IDS[0],
                                       kbroker_processes_port_step=1, kbroker_port=first,
                                       kbroker_status_port=first + 2)
    return {"all": {
        "vars": {
            "deploy_become": False,
            "kbroker_manage_user": False,
            "kbroker_user": user,
            "kbroker_group": group,
            "kbroker_service_manager": "supervised",
            "kbroker_sysctl_apply": False,
            "kbroker_limits_apply": False,
            "kbroker_wheel": str(wheel),
            "kbroker_python": getattr(sys, "_base_executable", sys.executable),
            "kbroker_pip_extra_args": f"--no-index --find-links {wheelhouse}",
            "kbroker_zookeeper_chroot": chroot,
            "kbroker_stop_timeout": 60,
            "kbroker_health_delay": 1,
            "kbroker_health_retries": 90,
            "kbroker_extra_properties": {"zookeeper.session.timeout.ms": 6000,
                                         "group.initial.rebalance.delay.ms": 0},
        },
        "children": {"zookeeper": {"hosts": zookeeper_hosts}, "kbroker": {"hosts": broker_hosts}},
    }}


def _recap(output: str) -> dict[str, dict[str, int]]:
    recap = {}
    for match in re.finditer(r"^(\S+)\s+:\s+((?:\w+=\d+\s*)+)$", output, re.M):
        recap[match.group(1)] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", match.group(2))}
    return recap


def _playbook(inventory: Path, playbook: str, *extra: str, timeout: float = 240) -> str:
    started = time.monotonic()
    result = _run([str(PLAYBOOK), "-i", str(inventory), playbook, *extra], timeout=timeout)
    output = result.stdout + result.stderr
    print(f"{playbook}: {time.monotonic() - started:.1f} s\n{output[-3000:]}")
    assert result.returncode == 0, f"{playbook} failed:\n{output[-8000:]}"
    return output


def _stop_all(inventory_data: dict) -> None:
    groups = inventory_data["all"]["children"]
    scripts = [script for h in groups["kbroker"]["hosts"].values()
               for script in sorted(Path(h["kbroker_root"], "bin").glob("kbroker*-ctl"))]   # host mode: one a broker
    scripts += [Path(h["zookeeper_bin_dir"]) / "zookeeper-ensemble" for h in groups["zookeeper"]["hosts"].values()]
    for script in scripts:
        if script.exists():
            subprocess.run([str(script), "stop"], capture_output=True, timeout=90)
    # whatever a failed script left behind, by its pid file only
    pid_files = [pid for h in groups["kbroker"]["hosts"].values()
                 for pid in Path(h["kbroker_run_dir"]).glob("kbroker*.pid")]
    pid_files += [Path(h["zookeeper_run_dir"]) / "zookeeper.pid" for h in groups["zookeeper"]["hosts"].values()]
    for pid_file in pid_files:
        try:
            os.kill(int(pid_file.read_text().strip()), 9)
        except (OSError, ValueError):
            pass


def _topics(bootstrap: str, *args: str) -> str:
    result = subprocess.run([str(BIN / "kbroker"), "topics", "--bootstrap-server", bootstrap, *args],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def _wait_full_isr(bootstrap: str, topic: str, partitions: int, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    out = ""
    while time.monotonic() < deadline:
        out = _topics(bootstrap, "--describe", "--topic", topic)
        isrs = re.findall(r"Isr: ([\d,]+)", out)
        if len(isrs) == partitions and all(len(set(i.split(","))) == 3 for i in isrs):
            return out
        time.sleep(0.5)
    raise AssertionError(f"{topic} did not reach 3 ISR members on every partition:\n{out}")


class Producer(threading.Thread):
    """Idempotent acks=all producer writing numbered messages until stopped; records what was acked."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Producer as KafkaProducer
        self.topic = topic
        self.producer = KafkaProducer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                       "linger.ms": 5, "message.timeout.ms": 120_000, "retries": 1_000_000,
                                       "retry.backoff.ms": 100})
        self.acked: set[str] = set()
        self.errors: list[str] = []
        self.sent = 0
        self.stopping = threading.Event()

    def _delivered(self, err, msg) -> None:
        if err is None:
            self.acked.add(msg.value().decode())
        else:
            self.errors.append(str(err))

    def run(self) -> None:
        n = 0
        while not self.stopping.is_set():
            try:
                self.producer.produce(self.topic, value=str(n).encode(), key=str(n % 17).encode(),
                                      on_delivery=self._delivered)
                n += 1
            except BufferError:
                pass
            self.producer.poll(0.002)
        self.sent = n
        self.producer.flush(120)


def _read_back(bootstrap: str, topic: str, expected: set[str], timeout: float = 90) -> set[str]:
    from confluent_kafka import Consumer
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"deploy-{uuid.uuid4().hex[:8]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    consumer.subscribe([topic])
    seen: set[str] = set()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and not expected <= seen:
            for msg in consumer.consume(1000, 1.0):
                if msg.error() is None:
                    seen.add(msg.value().decode())
    finally:
        consumer.close()
    return seen


def _host_mode_pids(host: dict) -> dict[int, int]:
    """Host mode's brokers by id -> their pid (the control scripts' pid files)."""
    return {broker_id: int(Path(host["kbroker_run_dir"], f"kbroker-{broker_id}.pid").read_text())
            for broker_id in HOST_MODE_IDS}


def _check_host_mode(inventory_data: dict, ports: list[int]) -> None:
    """kb1's two brokers: rendered by the plan (own id, port, disk), each its own service pinned to its own cores,
    both registered in ZooKeeper with kb2's, and each serving produce and consume on its own port."""
    from confluent_kafka import Consumer, Producer as KafkaProducer, TopicPartition
    from confluent_kafka.admin import AdminClient
    from kazoo.client import KazooClient

    host = inventory_data["all"]["children"]["kbroker"]["hosts"][HOST_MODE]
    root, conf = Path(host["kbroker_root"]), Path(host["kbroker_conf_dir"])
    assert not (root / "bin" / "kbroker-ctl").exists(), "the single broker's service is still installed"
    cpu_sets = []
    for i, broker_id in enumerate(HOST_MODE_IDS):
        rendered = (conf / "brokers" / f"{broker_id}.properties").read_text()
        assert f"broker.id={broker_id}\n" in rendered
        assert f"listeners=PLAINTEXT://127.0.0.1:{ports[i]}\n" in rendered
        assert f"status.listener=http://127.0.0.1:{host['kbroker_status_port'] + i}\n" in rendered
        assert f"log.dirs={host['kbroker_disks'][i]['path']}/kafka-logs\n" in rendered   # a disk each
        assert "broker.processes" not in rendered
        assert (root / "bin" / f"kbroker-{broker_id}-ctl").exists()
    for broker_id, pid in _host_mode_pids(host).items():
        status = Path(f"/proc/{pid}/status").read_text()
        cpus = re.search(r"^Cpus_allowed_list:\s*(\S+)$", status, re.M)
        assert cpus and "kbroker" in Path(f"/proc/{pid}/cmdline").read_text(), (broker_id, status[:200])
        cpu_sets.append(cpus.group(1))
    expected = subprocess.run([str(BIN / "kbroker"), "host-plan", str(conf / "server.properties"), "--json"],
                              capture_output=True, text=True, check=True).stdout
    assert cpu_sets == [p["cpus"] for p in json.loads(expected)["processes"]]
    assert len(set(cpu_sets)) == len(cpu_sets) or len(os.sched_getaffinity(0)) < len(cpu_sets), cpu_sets

    zookeeper = inventory_data["all"]["children"]["zookeeper"]["hosts"]["zk1"]
    zk = KazooClient(hosts=f"127.0.0.1:{zookeeper['zookeeper_client_port']}"
                           f"{inventory_data['all']['vars']['kbroker_zookeeper_chroot']}")
    zk.start(timeout=30)
    try:
        deadline = time.monotonic() + 60
        while sorted(map(int, zk.get_children("/brokers/ids"))) != [2, *HOST_MODE_IDS]:
            assert time.monotonic() < deadline, zk.get_children("/brokers/ids")
            time.sleep(0.5)
        for broker_id, port in zip(HOST_MODE_IDS, ports):
            registration = json.loads(zk.get(f"/brokers/ids/{broker_id}")[0])
            assert registration["port"] == port, registration
    finally:
        zk.stop()
        zk.close()

    # a partition led by each of kb1's brokers; produce through the first's port, consume through the second's
    topic = "deploy-host-mode"
    bootstrap = f"127.0.0.1:{ports[0]}"
    _topics(bootstrap, "--create", "--topic", topic, "--replica-assignment",
            f"{HOST_MODE_IDS[0]}:2,{HOST_MODE_IDS[1]}:2")
    metadata = AdminClient({"bootstrap.servers": f"127.0.0.1:{ports[1]}"}).list_topics(topic, timeout=30)
    deadline = time.monotonic() + 30
    while any(p.leader < 0 for p in metadata.topics[topic].partitions.values()):
        assert time.monotonic() < deadline, metadata.topics[topic].partitions
        time.sleep(0.5)
        metadata = AdminClient({"bootstrap.servers": f"127.0.0.1:{ports[1]}"}).list_topics(topic, timeout=30)
    assert {p: metadata.topics[topic].partitions[p].leader for p in (0, 1)} == dict(enumerate(HOST_MODE_IDS))
    assert [metadata.brokers[b].port for b in HOST_MODE_IDS] == ports
    producer = KafkaProducer({"bootstrap.servers": bootstrap, "acks": "all"})
    sent = {(p, f"{p}-{n}") for p in (0, 1) for n in range(50)}
    for partition, value in sorted(sent):
        producer.produce(topic, value=value.encode(), partition=partition)
    assert producer.flush(60) == 0
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{ports[1]}", "group.id": f"deploy-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in (0, 1)])
    seen: set[tuple[int, str]] = set()
    deadline = time.monotonic() + 60
    try:
        while seen != sent and time.monotonic() < deadline:
            seen.update((m.partition(), m.value().decode()) for m in consumer.consume(200, 1.0) if m.error() is None)
    finally:
        consumer.close()
    assert seen == sent, f"{len(sent - seen)} of {len(sent)} not read back through port {ports[1]}"


def _check_rolling_host_mode(output: str, host: dict, pids_before: dict[int, int]) -> None:
    """The rolling restart took kb1's brokers one at a time, each behind the /health gate, which asked both."""
    assert all(pid != pids_before[b] for b, pid in _host_mode_pids(host).items()), "a host-mode broker kept running"
    batch = output.split("PLAY [Rolling restart of the brokers]")[1]   # serial 1: kb1's batch comes first
    assert "[kb1]" in batch and "[kb2]" not in batch, batch[:3000]
    steps = re.findall(r"TASK \[kbroker : (Restart the broker \(supervised\)|Wait until every partition is back "
                       r"in sync)\]", batch)
    gate, restart = "Wait until every partition is back in sync", "Restart the broker (supervised)"
    assert steps == [gate, restart, gate, restart, gate, gate], steps
    for i in range(len(HOST_MODE_IDS)):
        assert f"http://127.0.0.1:{host['kbroker_status_port'] + i}/health" in output


# ------------------------------------------------------------------------------------------------ the test

@pytest.mark.slow  # a ZooKeeper and three brokers, started by the playbooks rather than a fixture
def test_deploy_cluster_rolling_restart_idempotent(tmp_path: Path) -> None:
    try:
        java_executable()
        zookeeper_classpath()
    except ZooKeeperUnavailable as exc:
        pytest.fail(f"the deployment test needs Debian's zookeeper package (make debs): {exc}", pytrace=False)
    started = time.monotonic()
    wheelhouse = _dependency_wheelhouse()
    wheel = _build_wheel(tmp_path / "dist")
    inventory_data = _inventory(tmp_path / "hosts", wheel, wheelhouse, host_mode=True)
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(json.dumps(inventory_data, indent=1))   # JSON is YAML
    brokers = inventory_data["all"]["children"]["kbroker"]["hosts"]
    bootstrap = ",".join(f"127.0.0.1:{h['kbroker_port']}" for h in brokers.values())
    host_mode_ports = [brokers[HOST_MODE]["kbroker_port"] + i for i in range(len(HOST_MODE_IDS))]
    try:
        # 1. bring the cluster up
        first = _playbook(inventory, "site.yml")
        assert set(_recap(first)) == {"zk1", *brokers}
        for name, host in brokers.items():
            properties = (Path(host["kbroker_conf_dir"]) / "server.properties").read_text()
            disks = [d["path"] + "/kafka-logs" for d in host["kbroker_disks"]]
            assert f"log.dirs={','.join(disks)}\n" in properties
            assert ("broker.processes=2\n" in properties) == (name == HOST_MODE), name
            assert f"broker.rack={host['kbroker_rack']}\n" in properties
            assert inventory_data["all"]["vars"]["kbroker_zookeeper_chroot"] in properties
            assert Path(host["kbroker_root"], "venv", "bin", "kbroker").exists(), name

        _check_host_mode(inventory_data, host_mode_ports)

        # 2. the brokers form one cluster: replication factor 3, 3 ISR members everywhere
        topic = "deploy-load"
        _topics(bootstrap, "--create", "--topic", topic, "--partitions", "6", "--replication-factor", "3",
                "--config", "min.insync.replicas=2")
        description = _wait_full_isr(bootstrap, topic, 6)
        print(description)
        for name, host in brokers.items():   # one log dir per disk, and both disks hold partitions
            used = [d for d in host["kbroker_disks"]
                    if list(Path(d["path"], "kafka-logs").glob(f"{topic}-*"))]
            assert len(used) == 2, f"{name}: partitions of {topic} only on {used}"
        print(f"cluster up after {time.monotonic() - started:.1f} s")

        # 3. rolling restart under an idempotent acks=all producer: nothing acknowledged is lost
        pids_before = _host_mode_pids(brokers[HOST_MODE])
        producer = Producer(bootstrap, topic)
        producer.start()
        time.sleep(2)
        rolling = _playbook(inventory, "rolling-restart.yml")
        _check_rolling_host_mode(rolling, brokers[HOST_MODE], pids_before)
        time.sleep(2)
        producer.stopping.set()
        producer.join(150)
        assert not producer.is_alive()
        producer.producer = None   # its connections go now, not at teardown
        print(f"produced {producer.sent}, acknowledged {len(producer.acked)}, errors {producer.errors[:5]}")
        assert len(producer.acked) > 100
        seen = _read_back(bootstrap, topic, producer.acked)
        missing = producer.acked - seen
        assert not missing, f"{len(missing)} acknowledged messages were not read back, e.g. {sorted(missing)[:10]}"
        _wait_full_isr(bootstrap, topic, 6)

        # 4. idempotence: a second run changes nothing
        second = _playbook(inventory, "site.yml")
        recap = _recap(second)
        assert set(recap) == {"zk1", *brokers}
        assert all(r["changed"] == 0 and r["failed"] == 0 for r in recap.values()), recap

        # 5. a configuration change on the running cluster, one broker at a time, each back in sync first
        # (about 60 s more: only with KBROKER_DEPLOY_CONFIG_CHANGE=1, to keep `make test` short)
        if os.environ.get("KBROKER_DEPLOY_CONFIG_CHANGE") != "1":
            print(f"whole test {time.monotonic() - started:.1f} s")
            return
        properties = dict(inventory_data["all"]["vars"]["kbroker_extra_properties"],
                          **{"log.retention.check.interval.ms": 60000})
        third = _playbook(inventory, "site.yml", "-e", "kbroker_serial=1", "-e", "kbroker_restart_wait_in_sync=true",
                          "-e", json.dumps({"kbroker_extra_properties": properties}))
        recap = _recap(third)
        assert all(recap[name]["changed"] >= 1 for name in brokers) and recap["zk1"]["changed"] == 0, recap
        # handlers' included tasks print as RUNNING HANDLER [...]; kb1's two brokers each wait, then its handler
        assert len(re.findall(r"\[kbroker : Wait until every partition is back in sync\]", third)) == 4, third[-6000:]
        for host in brokers.values():
            assert "log.retention.check.interval.ms=60000\n" in \
                (Path(host["kbroker_conf_dir"]) / "server.properties").read_text()
        _wait_full_isr(bootstrap, topic, 6)
        print(f"whole test {time.monotonic() - started:.1f} s")
    finally:
        _stop_all(inventory_data)
