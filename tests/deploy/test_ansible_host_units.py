"""The kbroker role's host-mode systemd units (issue 24 item 4), as systemd itself reads them.

This container runs no systemd, so the deploy test (tests/deploy/test_ansible.py) uses the role's supervised
backend. Here the role's own tasks/host_mode.yml runs with kbroker_service_manager=systemd into a scratch unit
directory (kbroker_systemd_dir), after `kbroker host-plan` has planned two brokers, and `systemd-analyze verify`
loads each instance kbroker@<broker id>.service with its drop-in and the kbroker.slice: no unknown key, no value
systemd cannot parse, CPUAffinity= the plan's cores, ExecStart= the broker's rendered server.properties. The play
ends before its handlers (daemon-reload, restarts), which need a running systemd.
"""
from __future__ import annotations

import getpass
import grp
import json
import os
import shutil
import subprocess
from pathlib import Path

from tests.deploy.test_ansible import BIN, PLAYBOOK, REPO, _run


def test_host_mode_units_load_in_systemd(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is missing (Debian's systemd package)"
    units, conf = tmp_path / "systemd", tmp_path / "etc"
    units.mkdir()
    conf.mkdir()
    dirs = [tmp_path / "disk1", tmp_path / "disk2"]
    (conf / "server.properties").write_text(
        "broker.id=11\nbroker.processes=2\nbroker.processes.port.step=10\nzookeeper.connect=127.0.0.1:2181/kb\n"
        f"log.dirs={','.join(map(str, dirs))}\nlisteners=PLAINTEXT://127.0.0.1:9092\n"
        "status.listener=http://127.0.0.1:9093\n")
    # extra vars: above every variable of the role, so nothing goes to /etc
    extra = {"kbroker_processes": 2, "kbroker_service_manager": "systemd", "kbroker_systemd_dir": str(units),
             "kbroker_conf_dir": str(conf), "kbroker_venv": str(BIN.parent), "kbroker_root": str(tmp_path / "opt"),
             "kbroker_log_dir": str(tmp_path / "log"), "kbroker_user": getpass.getuser(),
             "kbroker_group": grp.getgrgid(os.getgid()).gr_name, "kbroker_memory_max": "80%",
             "ansible_python_interpreter": str(BIN / "python")}
    play = [{"name": "Host mode's units", "hosts": "localhost", "gather_facts": False,
             "tasks": [{"name": "The role's host-mode tasks", "ansible.builtin.include_role": {
                            "name": "kbroker", "tasks_from": "host_mode.yml"}},
                       {"name": "Stop before the handlers (no systemd here)", "ansible.builtin.meta": "end_play"}]}]
    playbook = tmp_path / "units.yml"
    playbook.write_text(json.dumps(play))
    result = _run([str(PLAYBOOK), "-i", "localhost,", "-c", "local", "-e", json.dumps(extra), str(playbook)],
                  timeout=180)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]

    plan = json.loads(subprocess.run([str(BIN / "kbroker"), "host-plan", str(conf / "server.properties"), "--json"],
                                     capture_output=True, text=True, check=True).stdout)
    ids = [p["broker.id"] for p in plan["processes"]]
    assert ids == [11, 12]
    assert sorted(p.name for p in units.iterdir()) == ["kbroker.slice", "kbroker@.service", "kbroker@11.service.d",
                                                       "kbroker@12.service.d"]
    template = (units / "kbroker@.service").read_text()
    assert f"ExecStart={BIN}/kbroker serve {conf}/brokers/%i.properties\n" in template
    assert "Slice=kbroker.slice\n" in template and "LimitNOFILE=1048576\n" in template
    assert "MemoryMax=80%\n" in (units / "kbroker.slice").read_text()
    for process in plan["processes"]:
        drop_in = (units / f"kbroker@{process['broker.id']}.service.d" / "host-plan.conf").read_text()
        assert f"CPUAffinity={process['cpus']}\n" in drop_in
        rendered = (conf / "brokers" / f"{process['broker.id']}.properties").read_text()
        assert f"listeners={process['listeners']}\n" in rendered

    verify = subprocess.run([analyze, "verify", "--man=no", *(f"kbroker@{i}.service" for i in ids)],
                            env={**os.environ, "SYSTEMD_UNIT_PATH": f"{units}:"}, capture_output=True, text=True,
                            timeout=60, cwd=REPO)
    complaints = [line for line in verify.stderr.splitlines() if str(units) in line]
    assert verify.returncode == 0 and not complaints, verify.stderr


def _role_tasks(tmp_path: Path, tasks_from: str, extra: dict[str, object]) -> str:
    play = [{"name": f"The role's {tasks_from}", "hosts": "localhost", "gather_facts": False,
             "tasks": [{"name": "Run them",
                        "ansible.builtin.include_role": {"name": "kbroker", "tasks_from": tasks_from}},
                       {"name": "Stop before the handlers (they would start brokers)",
                        "ansible.builtin.meta": "end_play"}]}]
    playbook = tmp_path / f"{tasks_from}.play.yml"
    playbook.write_text(json.dumps(play))
    result = _run([str(PLAYBOOK), "-i", "localhost,", "-c", "local", "-e",
                   json.dumps({**extra, "ansible_python_interpreter": str(BIN / "python")}), str(playbook)],
                  timeout=180)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    return result.stdout


def test_brokers_of_an_earlier_plan_are_removed(tmp_path: Path) -> None:
    """Two brokers installed (supervised backend: a control script each), then host mode off: stale_brokers.yml
    stops both and removes their scripts; the single broker's script is not among them."""
    conf, root = tmp_path / "etc", tmp_path / "opt"
    for path in (conf, root / "bin", tmp_path / "run"):
        path.mkdir(parents=True)
    dirs = [tmp_path / "disk1", tmp_path / "disk2"]
    (conf / "server.properties").write_text(
        "broker.id=11\nbroker.processes=2\nzookeeper.connect=127.0.0.1:2181/kb\n"
        f"log.dirs={','.join(map(str, dirs))}\nlisteners=PLAINTEXT://127.0.0.1:9092\n")
    extra = {"kbroker_service_manager": "supervised", "kbroker_conf_dir": str(conf), "kbroker_venv": str(BIN.parent),
             "kbroker_root": str(root), "kbroker_log_dir": str(tmp_path / "log"),
             "kbroker_run_dir": str(tmp_path / "run"), "kbroker_user": getpass.getuser(),
             "kbroker_group": grp.getgrgid(os.getgid()).gr_name}
    _role_tasks(tmp_path, "host_mode.yml", {**extra, "kbroker_processes": 2})
    assert sorted(p.name for p in (root / "bin").iterdir()) == ["kbroker-11-ctl", "kbroker-12-ctl"]
    (root / "bin" / "kbroker-ctl").write_text("#!/bin/sh\n")   # the single broker's, kept
    out = _role_tasks(tmp_path, "stale_brokers.yml", {**extra, "kbroker_processes": 1})
    assert "(item=11)" in out and "(item=12)" in out, out[-3000:]
    assert sorted(p.name for p in (root / "bin").iterdir()) == ["kbroker-ctl"]
