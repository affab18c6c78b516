"""The Ansible deployment (ansible/) applied for real on this machine.

One ZooKeeper and three kbroker "hosts", all ``ansible_connection=local`` on 127.0.0.1 with their own
install roots, ports and two directory "disks" each, run by the supervised service backend (pid file and
a control script: this container has no systemd). No privilege escalation, no package installs, no
sysctl: the zookeeper role points at the Debian package already installed (`make debs`).

The test: site.yml brings the cluster up; a replication-factor-3 topic gets 3 ISR members on every
partition; rolling-restart.yml runs while an idempotent acks=all producer writes (min.insync.replicas=2)
and every acknowledged message is read back; site.yml again reports changed=0 for every host; the
processes are stopped at the end. ansible-lint (production profile) and --syntax-check run separately.
With KBROKER_DEPLOY_CONFIG_CHANGE=1 it then also changes server.properties through site.yml with
kbroker_serial=1 and kbroker_restart_wait_in_sync=true and checks each broker restarted and waited in turn.
"""
from __future__ import annotations

import getpass
import grp
import json
import os
import re
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


def _inventory(base: Path, wheel: Path, wheelhouse: Path) -> dict:
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
    scripts = [Path(h["kbroker_root"]) / "bin" / "kbroker-ctl" for h in groups["kbroker"]["hosts"].values()]
    scripts += [Path(h["zookeeper_bin_dir"]) / "zookeeper-ensemble" for h in groups["zookeeper"]["hosts"].values()]
    for script in scripts:
        if script.exists():
            subprocess.run([str(script), "stop"], capture_output=True, timeout=90)
    # whatever a failed script left behind, by its pid file only
    pid_files = [Path(h["kbroker_run_dir"]) / "kbroker.pid" for h in groups["kbroker"]["hosts"].values()]
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


# ------------------------------------------------------------------------------------------------ the test

def test_deploy_cluster_rolling_restart_idempotent(tmp_path: Path) -> None:
    try:
        java_executable()
        zookeeper_classpath()
    except ZooKeeperUnavailable as exc:
        pytest.fail(f"the deployment test needs Debian's zookeeper package (make debs): {exc}", pytrace=False)
    started = time.monotonic()
    wheelhouse = _dependency_wheelhouse()
    wheel = _build_wheel(tmp_path / "dist")
    inventory_data = _inventory(tmp_path / "hosts", wheel, wheelhouse)
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(json.dumps(inventory_data, indent=1))   # JSON is YAML
    brokers = inventory_data["all"]["children"]["kbroker"]["hosts"]
    bootstrap = ",".join(f"127.0.0.1:{h['kbroker_port']}" for h in brokers.values())
    try:
        # 1. bring the cluster up
        first = _playbook(inventory, "site.yml")
        assert set(_recap(first)) == {"zk1", "kb1", "kb2", "kb3"}
        for name, host in brokers.items():
            properties = (Path(host["kbroker_conf_dir"]) / "server.properties").read_text()
            disks = [d["path"] + "/kafka-logs" for d in host["kbroker_disks"]]
            assert f"log.dirs={','.join(disks)}\n" in properties
            assert f"broker.rack=rack{host['kbroker_broker_id']}\n" in properties
            assert inventory_data["all"]["vars"]["kbroker_zookeeper_chroot"] in properties
            assert Path(host["kbroker_root"], "venv", "bin", "kbroker").exists(), name

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
        producer = Producer(bootstrap, topic)
        producer.start()
        time.sleep(2)
        _playbook(inventory, "rolling-restart.yml")
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
        assert set(recap) == {"zk1", "kb1", "kb2", "kb3"}
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
        assert all(recap[f"kb{i}"]["changed"] >= 1 for i in (1, 2, 3)) and recap["zk1"]["changed"] == 0, recap
        # handlers' included tasks print as RUNNING HANDLER [...]
        assert len(re.findall(r"\[kbroker : Wait until every partition is back in sync\]", third)) == 3, third[-6000:]
        for host in brokers.values():
            assert "log.retention.check.interval.ms=60000\n" in \
                (Path(host["kbroker_conf_dir"]) / "server.properties").read_text()
        _wait_full_isr(bootstrap, topic, 6)
        print(f"whole test {time.monotonic() - started:.1f} s")
    finally:
        _stop_all(inventory_data)
