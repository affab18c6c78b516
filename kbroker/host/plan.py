"""Host mode's plan: how one server.properties becomes N complete brokers on one server (issue 24).

Pure data: ``plan_host(properties, topology)`` reads the properties as written and a CPU/NUMA topology handed in
(``Topology.of_this_host()`` reads this machine's), and returns a ``HostPlan`` whose ``render(i)`` is process i's
own server.properties. Nothing here starts, binds or reads ZooKeeper, so ``kbroker host-plan`` and the
deployment's templates (another caller) get the same answer from the same inputs.

kbroker's own keys, not Kafka's (Kafka 2.8 has no equivalent; a Kafka broker would log them as unknown):

``broker.processes``  ``auto`` or N >= 1 (default 1: one broker, exactly as without host mode). ``auto`` is
    min(cores this process may use, log dirs): one broker per core, never more brokers than disks, since every
    broker needs a log dir of its own.
``broker.processes.ids``  explicit broker ids, comma-separated; N is their count. Default: ``broker.id``,
    ``broker.id`` + 1, ... (consecutive).
``broker.processes.port.step``  process i listens on every listener's port + i x step (default 1), and so
    does its ``status.listener``. Raise it when listeners sit on consecutive ports.

``broker.rack`` unset in host mode defaults to the server's host name: the host the inter-broker listener
advertises (``advertised.listeners``, else ``listeners``), or ``socket.gethostname()`` when that host is empty or a
wildcard. Tools that only know racks (kafka-reassign-partitions.sh, Cruise Control) then keep a partition's replicas
on different servers as kbroker's own placement does.

What each process gets: the ``log.dirs`` in order, split into N contiguous groups of near-equal size (N > dirs is
refused); the cores of ``os.sched_getaffinity(0)`` split into N disjoint sets that follow the NUMA nodes
(/sys/devices/system/node/node*/cpulist): when N >= nodes, each node holds a share of the processes in proportion
to its cores and a set never spans two nodes; when N < nodes, each process gets whole nodes.
"""
from __future__ import annotations

import re
import socket
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kbroker.config.broker import key_definition

PROCESSES = "broker.processes"
PROCESS_IDS = "broker.processes.ids"
PORT_STEP = "broker.processes.port.step"
HOST_KEYS = (PROCESSES, PROCESS_IDS, PORT_STEP)
MAX_PORT = 65535
NUMA_SYSFS = Path("/sys/devices/system/node")


class HostPlanError(ValueError):
    """The properties cannot be planned onto this server; the message names the key and the numbers."""


def uses_host_mode(properties: Mapping[str, str]) -> bool:
    """Whether any of host mode's keys is set (without them ``kbroker serve`` is exactly one broker)."""
    return any(key in properties for key in HOST_KEYS)


# -- CPU topology ---------------------------------------------------------------------------------------------


def parse_cpulist(text: str) -> list[int]:
    """The kernel's cpulist format (``0-3,8,10-11``) as sorted cpu numbers."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        first, dash, last = part.partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            raise ValueError(f"not a cpu list: {text!r}")
        cpus.update(range(int(first), int(last if dash else first) + 1))
    return sorted(cpus)


def format_cpulist(cpus: Iterable[int]) -> str:
    """Sorted cpu numbers in the kernel's cpulist format, ranges collapsed (as /proc/<pid>/status shows them)."""
    runs: list[list[int]] = []
    for cpu in sorted(cpus):
        if runs and cpu == runs[-1][1] + 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)


@dataclass(frozen=True)
class Topology:
    """The cores a host's brokers may use, grouped by NUMA node: ``nodes`` holds (node id, its usable cores), in
    node order, only nodes with at least one usable core."""

    nodes: tuple[tuple[int, tuple[int, ...]], ...]

    @property
    def cpus(self) -> tuple[int, ...]:
        return tuple(sorted(cpu for _, cpus in self.nodes for cpu in cpus))

    @classmethod
    def build(cls, allowed: Iterable[int], nodes: Mapping[int, Iterable[int]] | None = None) -> Topology:
        """``allowed`` cores grouped by ``nodes`` (node id -> its cores); cores no node lists form a node of their
        own (as on a kernel without NUMA, where there is no node directory at all)."""
        allowed_set = set(allowed)
        if not allowed_set:
            raise HostPlanError("no cpu to run brokers on")
        grouped: list[tuple[int, tuple[int, ...]]] = []
        seen: set[int] = set()
        for node, cpus in sorted((nodes or {}).items()):
            mine = tuple(sorted((set(cpus) & allowed_set) - seen))
            seen.update(mine)
            if mine:
                grouped.append((node, mine))
        rest = tuple(sorted(allowed_set - seen))
        if rest:
            grouped.append((max((n for n, _ in grouped), default=-1) + 1, rest))
        return cls(tuple(grouped))

    @classmethod
    def of_this_host(cls, sysfs: Path = NUMA_SYSFS) -> Topology:
        """This process's allowed cores (``os.sched_getaffinity(0)``, which honours taskset and cgroup cpusets)
        grouped by the kernel's NUMA nodes."""
        import os

        nodes: dict[int, list[int]] = {}
        for path in sysfs.glob("node[0-9]*/cpulist"):
            try:
                nodes[int(path.parent.name[4:])] = parse_cpulist(path.read_text())
            except (OSError, ValueError):
                continue
        return cls.build(os.sched_getaffinity(0), nodes)


# -- the plan -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcessPlan:
    """One broker process of the host: what it is, where it listens, which disks and cores are its own."""

    index: int
    broker_id: int
    listeners: str
    advertised_listeners: str  # "" when the host's properties do not set it (Kafka then advertises listeners)
    status_listener: str  # "" when off
    log_dirs: tuple[str, ...]
    cpus: tuple[int, ...]
    numa_nodes: tuple[int, ...]
    rack: str  # broker.rack as written, else the server's host name (every process of a host shares it)

    def settings(self) -> dict[str, str]:
        """The keys this process's server.properties sets differently from the host's."""
        out = {"broker.id": str(self.broker_id), "listeners": self.listeners, "log.dirs": ",".join(self.log_dirs),
               "broker.rack": self.rack}
        if self.advertised_listeners:
            out["advertised.listeners"] = self.advertised_listeners
        if self.status_listener:
            out["status.listener"] = self.status_listener
        return out

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "broker.id": self.broker_id, "listeners": self.listeners,
                "advertised.listeners": self.advertised_listeners, "status.listener": self.status_listener,
                "log.dirs": list(self.log_dirs), "cpus": format_cpulist(self.cpus), "numa.nodes": list(self.numa_nodes),
                "broker.rack": self.rack}


@dataclass(frozen=True)
class HostPlan:
    """N brokers of one server; ``properties`` are the host's as written (host keys removed), in their order."""

    processes: tuple[ProcessPlan, ...]
    properties: tuple[tuple[str, str], ...]
    rule: str  # how N was chosen, for people

    def process_properties(self, index: int) -> dict[str, str]:
        """Process ``index``'s properties: the host's, with its own id, ports and dirs (``log.dir`` dropped, as
        ``log.dirs`` wins over it in Kafka anyway)."""
        settings = self.processes[index].settings()
        out = {key: settings.get(key, value) for key, value in self.properties if key != "log.dir"}
        out.update(settings)
        return out

    def render(self, index: int) -> str:
        """Process ``index``'s server.properties, ready for ``kbroker serve``."""
        process = self.processes[index]
        head = (f"# broker process {index} of {len(self.processes)} (broker.id {process.broker_id}, "
                f"cpus {format_cpulist(process.cpus)}), rendered by kbroker's host mode\n")
        return head + "".join(f"{key}={value}\n" for key, value in self.process_properties(index).items())

    def to_json(self) -> dict[str, Any]:
        return {"broker.processes": len(self.processes), "rule": self.rule,
                "processes": [p.to_json() for p in self.processes]}

    def describe(self) -> str:
        """The plan for people (``kbroker host-plan``)."""
        lines = [f"broker.processes={len(self.processes)} ({self.rule})"]
        for p in self.processes:
            lines.append(f"process {p.index}: broker.id={p.broker_id}")
            lines.append(f"  listeners={p.listeners}")
            if p.advertised_listeners:
                lines.append(f"  advertised.listeners={p.advertised_listeners}")
            if p.status_listener:
                lines.append(f"  status.listener={p.status_listener}")
            lines.append(f"  log.dirs={','.join(p.log_dirs)}")
            lines.append(f"  broker.rack={p.rack}")
            nodes = ",".join(str(n) for n in p.numa_nodes)
            lines.append(f"  cpus={format_cpulist(p.cpus)} (numa node{'s' if len(p.numa_nodes) > 1 else ''} {nodes})")
        return "\n".join(lines) + "\n"


def plan_host(properties: Mapping[str, str], topology: Topology) -> HostPlan:
    """The brokers ``properties`` describe on a server of ``topology``; raises HostPlanError with a clear message
    when they do not fit (N > log dirs, N > cores, clashing ports, host mode without ZooKeeper)."""
    dirs = _log_dirs(properties)
    cores = len(topology.cpus)
    ids_text = properties.get(PROCESS_IDS, "").strip()
    explicit_ids = _parse_ids(ids_text) if ids_text else None
    count, rule = _process_count(properties.get(PROCESSES, "1").strip(), explicit_ids, cores, len(dirs))
    if count > len(dirs):
        raise HostPlanError(f"{PROCESSES}={count} needs at least {count} log dirs (one per broker process), "
                            f"but log.dirs has {len(dirs)}")
    if count > cores:
        raise HostPlanError(f"{PROCESSES}={count} needs at least {count} cores (one per broker process), "
                            f"but this process may run on {cores}")
    if count > 1 and not properties.get("zookeeper.connect", "").strip():
        raise HostPlanError(f"{PROCESSES}={count} needs zookeeper.connect: the brokers of one host form a "
                            "ZooKeeper-mode cluster (without it each would run its own embedded store)")
    ids = explicit_ids if explicit_ids is not None else _consecutive_ids(properties, count)
    step = _port_step(properties.get(PORT_STEP, "1"))
    listeners = properties.get("listeners", "").strip() or str(_default("listeners"))
    advertised = properties.get("advertised.listeners", "").strip()
    status = properties.get("status.listener", "").strip()
    cpu_sets = split_cpus(topology, count)
    rack = properties.get("broker.rack", "").strip() or server_host_name(properties)
    processes = tuple(
        ProcessPlan(index=i, broker_id=ids[i],
                    listeners=_shift_ports(listeners, i * step, "listeners"),
                    advertised_listeners=_shift_ports(advertised, i * step, "advertised.listeners"),
                    status_listener=_shift_ports(status, i * step, "status.listener"),
                    log_dirs=tuple(dirs[len(dirs) * i // count:len(dirs) * (i + 1) // count]),
                    cpus=cpu_sets[i][0], numa_nodes=cpu_sets[i][1], rack=rack)
        for i in range(count))
    _check_ports(processes, step)
    kept = tuple((key, value) for key, value in properties.items() if key not in HOST_KEYS)
    return HostPlan(processes, kept, rule)


_WILDCARD_HOSTS = ("", "0.0.0.0", "::")


def server_host_name(properties: Mapping[str, str]) -> str:
    """The name other brokers know this server by: the host of the inter-broker listener's advertised endpoint
    (Kafka advertises ``listeners`` when ``advertised.listeners`` is unset), or ``socket.gethostname()`` for an
    empty or wildcard host (Kafka then advertises the machine's own name). The inter-broker listener is
    ``inter.broker.listener.name``, else the listener named as ``security.inter.broker.protocol`` (PLAINTEXT)."""
    name = (properties.get("inter.broker.listener.name", "").strip()
            or properties.get("security.inter.broker.protocol", "").strip() or "PLAINTEXT").upper()
    endpoints = (properties.get("advertised.listeners", "").strip() or properties.get("listeners", "").strip()
                 or str(_default("listeners")))
    for endpoint in (e.strip() for e in endpoints.split(",")):
        listener, sep, rest = endpoint.partition("://")
        if sep and listener.strip().upper() == name:
            host = rest.rpartition(":")[0].strip().strip("[]")
            if host not in _WILDCARD_HOSTS:
                return host
            break
    return socket.gethostname()


def split_cpus(topology: Topology, count: int) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """``count`` disjoint, non-empty core sets with the NUMA nodes each touches: with at least as many processes
    as nodes, every node gets processes in proportion to its cores (at least one each) and each set lies within
    one node; with fewer, each process gets whole neighbouring nodes."""
    nodes = topology.nodes
    if count >= len(nodes):
        shares = _apportion(count, [len(cpus) for _, cpus in nodes])
        out: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
        for (node, cpus), share in zip(nodes, shares):
            out.extend((cpus[len(cpus) * j // share:len(cpus) * (j + 1) // share], (node,)) for j in range(share))
        return out
    groups = [nodes[len(nodes) * i // count:len(nodes) * (i + 1) // count] for i in range(count)]
    return [(tuple(sorted(c for _, cpus in group for c in cpus)), tuple(n for n, _ in group)) for group in groups]


def _apportion(count: int, sizes: Sequence[int]) -> list[int]:
    """``count`` processes over nodes of ``sizes`` cores: one each, then one at a time to the node whose processes
    would have the most cores each (ties to the lower node), never more processes than a node has cores."""
    shares = [1] * len(sizes)
    for _ in range(count - len(sizes)):
        best = max((i for i in range(len(sizes)) if shares[i] < sizes[i]), key=lambda i: (sizes[i] / shares[i], -i))
        shares[best] += 1
    return shares


def _process_count(text: str, explicit_ids: list[int] | None, cores: int, dirs: int) -> tuple[int, str]:
    if explicit_ids is not None:
        if text not in ("auto", "1") and text != str(len(explicit_ids)):
            raise HostPlanError(f"{PROCESSES}={text} but {PROCESS_IDS} lists {len(explicit_ids)} ids")
        return len(explicit_ids), f"one per id of {PROCESS_IDS}"
    if text == "auto":
        return min(cores, dirs), f"auto: min({cores} cores, {dirs} log dirs)"
    if not re.fullmatch(r"\d+", text) or int(text) < 1:
        raise HostPlanError(f"{PROCESSES}: expected auto or an int >= 1, got {text!r}")
    return int(text), "as configured"


def _parse_ids(text: str) -> list[int]:
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not all(re.fullmatch(r"\d+", p) for p in parts):
        raise HostPlanError(f"{PROCESS_IDS}: expected broker ids (ints >= 0) separated by commas, got {text!r}")
    ids = [int(p) for p in parts]
    if len(set(ids)) != len(ids):
        raise HostPlanError(f"{PROCESS_IDS}: every broker id must differ, got {text!r}")
    return ids


def _consecutive_ids(properties: Mapping[str, str], count: int) -> list[int]:
    text = properties.get("broker.id", "").strip() or str(_default("broker.id"))
    try:
        first = int(text)
    except ValueError:
        raise HostPlanError(f"broker.id: expected an int >= -1, got {text!r}") from None
    if first < 0 and count > 1:
        raise HostPlanError(f"{PROCESSES}={count} needs broker.id >= 0 (the first of {count} consecutive ids) "
                            f"or {PROCESS_IDS}, not broker.id={first}")
    return [first + i for i in range(count)]


def _port_step(text: str) -> int:
    text = text.strip()
    if not re.fullmatch(r"\d+", text) or int(text) < 1:
        raise HostPlanError(f"{PORT_STEP}: expected an int >= 1, got {text!r}")
    return int(text)


def _log_dirs(properties: Mapping[str, str]) -> list[str]:
    dirs = [d.strip() for d in properties.get("log.dirs", "").split(",") if d.strip()]
    if not dirs:
        dirs = [properties.get("log.dir", "").strip() or str(_default("log.dir"))]
    if len(set(dirs)) != len(dirs):
        raise HostPlanError(f"log.dirs names a directory twice: {','.join(dirs)}")
    return dirs


def _default(key: str) -> Any:
    found = key_definition(key)
    assert found is not None, key
    return found[0]


_ENDPOINT = re.compile(r"^(?P<head>.*:)(?P<port>\d+)$")


def _shift_ports(text: str, offset: int, key: str) -> str:
    """Every ``...:port`` of a comma-separated endpoint list moved by ``offset`` (port 0, "any free port", stays)."""
    if not text:
        return text
    out = []
    for endpoint in (e.strip() for e in text.split(",") if e.strip()):
        match = _ENDPOINT.match(endpoint)
        if match is None or "://" not in endpoint:
            raise HostPlanError(f"{key}: expected NAME://host:port, got {endpoint!r}")
        port = int(match["port"])
        moved = port + offset if port else 0
        if moved > MAX_PORT:
            raise HostPlanError(f"{key}: {endpoint} moved by {offset} for its broker process is port {moved}, "
                                f"past {MAX_PORT}")
        out.append(f"{match['head']}{moved}")
    return ",".join(out)


def _ports(process: ProcessPlan) -> list[tuple[int, str]]:
    endpoints = [e for e in process.listeners.split(",") if e] + ([process.status_listener]
                                                                 if process.status_listener else [])
    return [(int(e.rsplit(":", 1)[1]), e) for e in endpoints if int(e.rsplit(":", 1)[1])]


def _check_ports(processes: Sequence[ProcessPlan], step: int) -> None:
    """No two processes bind the same port (listeners sitting on neighbouring ports need a larger step)."""
    owner: dict[int, tuple[int, str]] = {}
    for process in processes:
        for port, endpoint in _ports(process):
            if port in owner and owner[port][0] != process.index:
                index, other = owner[port]
                raise HostPlanError(
                    f"{PORT_STEP}={step}: port {port} of broker process {process.index} ({endpoint}) is also "
                    f"broker process {index}'s ({other}); set {PORT_STEP} to at least {len(_ports(process))}")
            owner.setdefault(port, (process.index, endpoint))
