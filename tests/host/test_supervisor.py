"""Host mode's supervisor (kbroker/host/supervisor.py) with real ``kbroker serve`` children that cannot run: a broker
whose port another program holds dies at every start (a crash loop: every broker is stopped, exit 1), a broker
that refuses its configuration is not started again (exit 2). The restart policy is handed in, so the test does not
depend on how long a start takes on a loaded machine."""
from __future__ import annotations

import io
import logging
import socket
import uuid
from pathlib import Path

import pytest

from bench.harness.broker_process import HOST, neighbouring_free_ports
from kazoo_bridge.local_server import ZooKeeperServer
from kbroker.host.plan import HostPlan, Topology, plan_host
from kbroker.host.supervisor import RestartPolicy, Supervisor

FAST = RestartPolicy(first_backoff_s=0.1, max_backoff_s=0.2, crash_loop_deaths=3, crash_loop_window_s=600.0,
                     stop_timeout_s=60.0)


def two_brokers(zookeeper: ZooKeeperServer, base: Path, listener: str, port: int) -> HostPlan:
    return plan_host({
        "broker.processes": "2", "broker.id": "1",
        "zookeeper.connect": f"{zookeeper.hosts}/kbsup-{uuid.uuid4().hex[:12]}",
        "zookeeper.session.timeout.ms": "6000",
        "listeners": f"{listener}://{HOST}:{port}",
        "log.dirs": f"{base / 'd0'},{base / 'd1'}",
    }, Topology.of_this_host())


def test_a_crash_loop_stops_every_broker_and_exits_1(zookeeper_server: ZooKeeperServer, tmp_path: Path,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    port = neighbouring_free_ports(HOST, 2)
    plan = two_brokers(zookeeper_server, tmp_path, "PLAINTEXT", port)
    out = io.BytesIO()
    with socket.socket() as squatter, caplog.at_level(logging.INFO, logger="kbroker.host.supervisor"):
        squatter.bind((HOST, port + 1))  # broker 2's port
        squatter.listen()
        status = Supervisor(plan, out=out, policy=FAST).run()
    lines = out.getvalue().decode(errors="replace").splitlines()
    assert status == 1
    refusals = [line for line in lines if line.startswith("[broker 2] kbroker: cannot start: [Errno 98]")]
    assert len(refusals) == 3, "\n".join(lines)
    messages = [r.getMessage() for r in caplog.records]
    assert sum(m.startswith("broker 2 died (exit status 1): starting it again") for m in messages) == 2
    assert any(m.startswith("broker 2 died 3 times within 600 s") for m in messages), messages
    assert "broker 1 exited (exit status 0)" in messages  # stopped with SIGTERM, not left running
    assert any(line.startswith("[broker 1] ") and "stopped cleanly" in line for line in lines)


def test_a_refused_configuration_is_not_restarted(zookeeper_server: ZooKeeperServer, tmp_path: Path,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    # an SSL listener alone (no inter-broker listener, a JKS keystore): the broker checks it as it starts, exit 2
    plan = two_brokers(zookeeper_server, tmp_path, "SSL", neighbouring_free_ports(HOST, 2))
    out = io.BytesIO()
    with caplog.at_level(logging.INFO, logger="kbroker.host.supervisor"):
        status = Supervisor(plan, out=out, policy=FAST).run()
    assert status == 2
    text = out.getvalue().decode(errors="replace")
    starts = [r.getMessage() for r in caplog.records if " started: pid " in r.getMessage()]
    assert len(starts) == 2, starts  # each broker once
    assert "\n[broker 1] kbroker: " in "\n" + text or "\n[broker 2] kbroker: " in "\n" + text, text
    assert any("refused its configuration (exit 2): stopping every broker" in r.getMessage()
               for r in caplog.records)
