"""Host mode's plan (kbroker/host/plan.py) on topologies handed in: a 64-core, 2-node server, a 4-node one, this
machine; ids, ports, log dirs, cores, ``auto`` and the refusals."""
from __future__ import annotations

import itertools
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from kbroker.config.broker import build_config, parse_properties
from kbroker.host.plan import HostPlanError, Topology, format_cpulist, parse_cpulist, plan_host, split_cpus

TWO_NODES_64 = Topology.build(range(64), {0: range(32), 1: range(32, 64)})
FOUR_NODES_64 = Topology.build(range(64), {n: range(16 * n, 16 * n + 16) for n in range(4)})
TWELVE_DIRS = ",".join(f"/data/d{i:02}" for i in range(12))


def host(**settings: str) -> dict[str, str]:
    base = {"broker.id": "1", "zookeeper.connect": "127.0.0.1:2181/kb", "log.dirs": TWELVE_DIRS,
            "listeners": "PLAINTEXT://10.0.0.5:9092"}
    return {**base, **{key.replace("_", "."): value for key, value in settings.items()}}


def assert_partition_of(sets: list[tuple[int, ...]], cpus: tuple[int, ...]) -> None:
    for a, b in itertools.combinations(sets, 2):
        assert not set(a) & set(b), (a, b)
    assert sorted(c for s in sets for c in s) == sorted(cpus)
    assert all(sets)


@pytest.mark.parametrize("count", [2, 3, 4, 5, 8, 12])
def test_64_cores_2_nodes_no_set_spans_a_node(count: int) -> None:
    plan = plan_host(host(broker_processes=str(count)), TWO_NODES_64)
    sets = [p.cpus for p in plan.processes]
    assert_partition_of(sets, TWO_NODES_64.cpus)
    for p in plan.processes:
        assert len(p.numa_nodes) == 1
        node = p.numa_nodes[0]
        assert all(32 * node <= c < 32 * node + 32 for c in p.cpus), p
    # both nodes carry processes in proportion to their cores (equal nodes: shares differ by at most one)
    per_node = [sum(1 for p in plan.processes if p.numa_nodes == (n,)) for n in (0, 1)]
    assert abs(per_node[0] - per_node[1]) <= 1 and sum(per_node) == count
    for n in (0, 1):  # within a node, the sets differ by at most one core
        sizes = [len(p.cpus) for p in plan.processes if p.numa_nodes == (n,)]
        assert max(sizes) - min(sizes) <= 1


def test_64_cores_2_nodes_exact_sets() -> None:
    plan = plan_host(host(broker_processes="4"), TWO_NODES_64)
    assert [format_cpulist(p.cpus) for p in plan.processes] == ["0-15", "16-31", "32-47", "48-63"]
    assert [p.numa_nodes for p in plan.processes] == [(0,), (0,), (1,), (1,)]
    assert [p.broker_id for p in plan.processes] == [1, 2, 3, 4]
    assert [p.log_dirs for p in plan.processes] == [
        ("/data/d00", "/data/d01", "/data/d02"), ("/data/d03", "/data/d04", "/data/d05"),
        ("/data/d06", "/data/d07", "/data/d08"), ("/data/d09", "/data/d10", "/data/d11")]


def test_uneven_nodes_get_processes_in_proportion() -> None:
    topology = Topology.build(range(48), {0: range(32), 1: range(32, 48)})
    plan = plan_host(host(broker_processes="3"), topology)
    assert [(format_cpulist(p.cpus), p.numa_nodes) for p in plan.processes] == [
        ("0-15", (0,)), ("16-31", (0,)), ("32-47", (1,))]


def test_fewer_processes_than_nodes_get_whole_nodes() -> None:
    plan = plan_host(host(broker_processes="2"), FOUR_NODES_64)
    assert [(format_cpulist(p.cpus), p.numa_nodes) for p in plan.processes] == [
        ("0-31", (0, 1)), ("32-63", (2, 3))]
    one = plan_host(host(broker_processes="1"), FOUR_NODES_64).processes[0]
    assert one.cpus == tuple(range(64)) and one.numa_nodes == (0, 1, 2, 3)


def test_allowed_cores_only() -> None:
    """A taskset or cgroup cpuset narrows what the plan hands out; a node with no allowed core carries none."""
    topology = Topology.build([2, 3, 4, 5, 40, 41], {0: range(32), 1: range(32, 64), 2: range(64, 96)})
    assert topology.nodes == ((0, (2, 3, 4, 5)), (1, (40, 41)))
    assert [c for c, _ in split_cpus(topology, 3)] == [(2, 3), (4, 5), (40, 41)]


def test_more_processes_than_dirs_is_refused() -> None:
    with pytest.raises(HostPlanError, match=r"broker.processes=13 needs at least 13 log dirs .* log.dirs has 12"):
        plan_host(host(broker_processes="13"), TWO_NODES_64)
    with pytest.raises(HostPlanError, match=r"broker.processes=2 needs at least 2 log dirs .* log.dirs has 1"):
        plan_host(host(broker_processes="2", log_dirs="", log_dir="/var/kb"), TWO_NODES_64)


def test_more_processes_than_cores_is_refused() -> None:
    with pytest.raises(HostPlanError, match=r"broker.processes=3 needs at least 3 cores .* may run on 2"):
        plan_host(host(broker_processes="3"), Topology.build([0, 1]))


def test_auto_is_min_of_cores_and_dirs() -> None:
    auto = plan_host(host(broker_processes="auto"), TWO_NODES_64)
    assert len(auto.processes) == 12 and auto.rule == "auto: min(64 cores, 12 log dirs)"
    assert_partition_of([p.cpus for p in auto.processes], TWO_NODES_64.cpus)
    assert [len(p.log_dirs) for p in auto.processes] == [1] * 12
    small = plan_host(host(broker_processes="auto", log_dirs="/a,/b,/c,/d"), Topology.build([0, 1]))
    assert [(p.cpus, p.log_dirs) for p in small.processes] == [((0,), ("/a", "/b")), ((1,), ("/c", "/d"))]


def test_ports_move_by_index_times_step() -> None:
    plan = plan_host(host(broker_processes="3", listeners="PLAINTEXT://:9092,SSL://10.0.0.5:9192",
                          advertised_listeners="PLAINTEXT://kb1.example:9092,SSL://kb1.example:9192",
                          status_listener="http://0.0.0.0:8080"), TWO_NODES_64)
    assert [p.listeners for p in plan.processes] == [
        "PLAINTEXT://:9092,SSL://10.0.0.5:9192", "PLAINTEXT://:9093,SSL://10.0.0.5:9193",
        "PLAINTEXT://:9094,SSL://10.0.0.5:9194"]
    assert plan.processes[2].advertised_listeners == "PLAINTEXT://kb1.example:9094,SSL://kb1.example:9194"
    assert [p.status_listener for p in plan.processes] == [f"http://0.0.0.0:{8080 + i}" for i in range(3)]
    stepped = plan_host(host(broker_processes="2", broker_processes_port_step="10"), TWO_NODES_64)
    assert [p.listeners for p in stepped.processes] == ["PLAINTEXT://10.0.0.5:9092", "PLAINTEXT://10.0.0.5:9102"]
    default_listener = plan_host({**host(broker_processes="2"), "listeners": ""}, TWO_NODES_64)
    assert default_listener.processes[1].listeners == "PLAINTEXT://127.0.0.1:9093"


def test_clashing_ports_are_refused_with_the_step_to_use() -> None:
    with pytest.raises(HostPlanError, match=r"port 9093 of broker process 1 \(PLAINTEXT://:9093\) is also broker "
                                            r"process 0's \(SSL://:9093\); set broker.processes.port.step to at "
                                            r"least 2"):
        plan_host(host(broker_processes="2", listeners="PLAINTEXT://:9092,SSL://:9093"), TWO_NODES_64)
    with pytest.raises(HostPlanError, match="past 65535"):
        plan_host(host(broker_processes="2", listeners="PLAINTEXT://:65535"), TWO_NODES_64)
    ephemeral = plan_host(host(broker_processes="2", listeners="PLAINTEXT://127.0.0.1:0"), TWO_NODES_64)
    assert [p.listeners for p in ephemeral.processes] == ["PLAINTEXT://127.0.0.1:0"] * 2


def test_ids() -> None:
    assert [p.broker_id for p in plan_host(host(broker_processes="3", broker_id="0"), TWO_NODES_64).processes] \
        == [0, 1, 2]
    explicit = plan_host(host(broker_processes_ids="7, 3,11"), TWO_NODES_64)
    assert [p.broker_id for p in explicit.processes] == [7, 3, 11]
    auto = plan_host(host(broker_processes="auto", broker_processes_ids="7,3"), TWO_NODES_64)
    assert [p.broker_id for p in auto.processes] == [7, 3]
    with pytest.raises(HostPlanError, match="broker.processes=4 but broker.processes.ids lists 3 ids"):
        plan_host(host(broker_processes="4", broker_processes_ids="7,3,11"), TWO_NODES_64)
    with pytest.raises(HostPlanError, match="every broker id must differ"):
        plan_host(host(broker_processes_ids="1,1"), TWO_NODES_64)
    with pytest.raises(HostPlanError, match=r"needs broker.id >= 0 .* not broker.id=-1"):
        plan_host(host(broker_processes="2", broker_id="-1"), TWO_NODES_64)
    with pytest.raises(HostPlanError, match="broker.processes: expected auto or an int >= 1, got 'two'"):
        plan_host(host(broker_processes="two"), TWO_NODES_64)


def test_several_processes_need_zookeeper() -> None:
    with pytest.raises(HostPlanError, match="broker.processes=2 needs zookeeper.connect"):
        plan_host({**host(broker_processes="2"), "zookeeper.connect": ""}, TWO_NODES_64)


def test_render_is_a_server_properties_each_broker_reads() -> None:
    props = host(broker_processes="2", num_partitions="6", log_dir="/ignored", status_listener="http://127.0.0.1:8080",
                 broker_processes_port_step="1")
    plan = plan_host(props, TWO_NODES_64)
    for process in plan.processes:
        text = plan.render(process.index)
        raw = parse_properties(text, "rendered")
        assert not [key for key in raw if key.startswith("broker.processes")]
        assert "log.dir" not in raw
        config = build_config(raw)
        assert not config.unknown_keys
        assert config.broker_id == process.broker_id
        assert [str(d) for d in config.log_dirs] == list(process.log_dirs)
        assert [lst.port for lst in config.listeners] == [9092 + process.index]
        assert config.status_listener == f"http://127.0.0.1:{8080 + process.index}"
        assert config.num_partitions == 6 and config.zookeeper_connect == "127.0.0.1:2181/kb"
    assert json.loads(json.dumps(plan.to_json()))["processes"][1] == {
        "index": 1, "broker.id": 2, "listeners": "PLAINTEXT://10.0.0.5:9093", "advertised.listeners": "",
        "status.listener": "http://127.0.0.1:8081", "log.dirs": [f"/data/d{i:02}" for i in range(6, 12)],
        "cpus": "32-63", "numa.nodes": [1], "broker.rack": "10.0.0.5"}


def test_rack_defaults_to_the_servers_host_name() -> None:
    """Issue 24 item 2: broker.rack unset in host mode is the host the inter-broker listener advertises, the same
    for every process of the server, so rack-only tools keep replicas on different servers."""
    plan = plan_host(host(broker_processes="3"), TWO_NODES_64)
    assert [p.rack for p in plan.processes] == ["10.0.0.5"] * 3
    for process in plan.processes:
        assert parse_properties(plan.render(process.index), "rendered")["broker.rack"][0] == "10.0.0.5"
        assert build_config(parse_properties(plan.render(process.index), "rendered")).broker_rack == "10.0.0.5"
    assert "  broker.rack=10.0.0.5" in plan.describe().splitlines()
    advertised = host(broker_processes="2", advertised_listeners="PLAINTEXT://kb1.example.net:9092")
    assert {p.rack for p in plan_host(advertised, TWO_NODES_64).processes} == {"kb1.example.net"}
    named = host(broker_processes="2", listeners="CLIENT://0.0.0.0:9092,REPL://10.1.0.5:9192",
                 advertised_listeners="CLIENT://kb1.example.net:9092,REPL://kb1-repl.example.net:9192",
                 listener_security_protocol_map="CLIENT:PLAINTEXT,REPL:PLAINTEXT", inter_broker_listener_name="REPL")
    assert {p.rack for p in plan_host(named, TWO_NODES_64).processes} == {"kb1-repl.example.net"}
    by_protocol = host(broker_processes="2", listeners="PLAINTEXT://10.0.0.5:9092,SSL://[fd00::5]:9093",
                       security_inter_broker_protocol="SSL", broker_processes_port_step="2")
    assert {p.rack for p in plan_host(by_protocol, TWO_NODES_64).processes} == {"fd00::5"}
    wildcard = host(broker_processes="2", listeners="PLAINTEXT://0.0.0.0:9092")
    assert {p.rack for p in plan_host(wildcard, TWO_NODES_64).processes} == {socket.gethostname()}
    assert {p.rack for p in plan_host(host(broker_processes="2", listeners="PLAINTEXT://:9092"),
                                      TWO_NODES_64).processes} == {socket.gethostname()}
    explicit = host(broker_processes="2", broker_rack="rack-7")
    assert {p.rack for p in plan_host(explicit, TWO_NODES_64).processes} == {"rack-7"}


def test_cpulists() -> None:
    assert parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert format_cpulist([11, 10, 8, 3, 2, 1, 0]) == "0-3,8,10-11"
    with pytest.raises(ValueError):
        parse_cpulist("0-x")


def test_this_host_from_sysfs(tmp_path: Path) -> None:
    """Topology.of_this_host groups this process's allowed cores by the node directories it is pointed at."""
    import os
    allowed = sorted(os.sched_getaffinity(0))
    for n, cpu in enumerate(allowed):
        (tmp_path / f"node{n}").mkdir()
        (tmp_path / f"node{n}" / "cpulist").write_text(f"{cpu}\n")
    (tmp_path / "possible").write_text("0\n")
    topology = Topology.of_this_host(tmp_path)
    assert topology.nodes == tuple((n, (cpu,)) for n, cpu in enumerate(allowed))
    assert Topology.of_this_host(tmp_path / "absent").nodes == ((0, tuple(allowed)),)


def test_host_plan_command(tmp_path: Path) -> None:
    dirs = ",".join(str(tmp_path / f"d{i}") for i in range(2))
    props = tmp_path / "server.properties"
    props.write_text(f"broker.id=5\nbroker.processes=auto\nzookeeper.connect=127.0.0.1:1/x\nlog.dirs={dirs}\n"
                     "listeners=PLAINTEXT://127.0.0.1:19092\n")
    kbroker = [sys.executable, "-m", "kbroker.cli", "host-plan"]
    out = subprocess.run([*kbroker, str(props), "--json"], capture_output=True, text=True, check=True).stdout
    plan = json.loads(out)
    cores = len(__import__("os").sched_getaffinity(0))
    assert plan["broker.processes"] == min(cores, 2)
    assert [p["broker.id"] for p in plan["processes"]] == [5, 6][:min(cores, 2)]
    text = subprocess.run([*kbroker, str(props), "--override", "broker.processes=1"], capture_output=True, text=True,
                          check=True).stdout
    assert text.splitlines()[:3] == ["broker.processes=1 (as configured)", "process 0: broker.id=5",
                                     "  listeners=PLAINTEXT://127.0.0.1:19092"]
    refused = subprocess.run([*kbroker, str(props), "--override", "broker.processes=3"], capture_output=True,
                             text=True)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.startswith("kbroker: broker.processes=3 needs at least 3 log dirs")
