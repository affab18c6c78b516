"""bench.experiments.replication_hops lines the brokers' hop traces up by offset; kbroker.metrics.hops writes them."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bench.experiments.replication_hops import breakdown, read_traces

MS = 1_000_000  # ns


def _write(directory: Path, broker: int, lines: list[tuple[int, str, int, int]]) -> None:
    with (directory / f"hops-{broker}-{1000 + broker}.txt").open("a") as f:
        for ns, step, offset, peer in lines:
            f.write(f"{ns} {step} hops 0 {offset} {peer}\n")


def test_each_hop_is_timed_on_the_follower_that_moved_the_high_watermark(tmp_path: Path) -> None:
    # broker 1 leads; a write ends at offset 5; follower 3 is the slower one and gates the high watermark
    _write(tmp_path, 1, [(100 * MS, "append", 5, -1), (101 * MS, "answer", 5, 2), (102 * MS, "answer", 5, 3),
                         (110 * MS, "fetch_in", 5, 2), (120 * MS, "fetch_in", 5, 3), (121 * MS, "hw", 5, -1),
                         (123 * MS, "acked", 5, -1)])
    _write(tmp_path, 2, [(104 * MS, "recv", 4, 1), (105 * MS, "appended", 5, 1), (106 * MS, "fetch_out", 5, 1)])
    _write(tmp_path, 3, [(108 * MS, "recv", 4, 1), (112 * MS, "appended", 5, 1), (115 * MS, "fetch_out", 5, 1)])
    _write(tmp_path, 1, [(0, "append", 9, -1)])  # another topic's line is ignored below
    (tmp_path / "hops-1-1001.txt").write_text((tmp_path / "hops-1-1001.txt").read_text().replace(
        "append hops 0 9", "append other 0 9"))
    hops, whole = breakdown(read_traces(tmp_path))
    assert whole == 1
    assert hops == {"append->answer": [2.0], "answer->recv": [6.0], "recv->appended": [4.0],
                    "appended->fetch_out": [3.0], "fetch_out->fetch_in": [5.0], "fetch_in->hw": [1.0],
                    "hw->acked": [2.0], "append->acked": [23.0]}


def test_a_write_not_traced_whole_is_left_out(tmp_path: Path) -> None:
    _write(tmp_path, 1, [(100 * MS, "append", 5, -1), (101 * MS, "answer", 5, 2), (110 * MS, "fetch_in", 5, 2)])
    _write(tmp_path, 2, [(104 * MS, "recv", 4, 1), (105 * MS, "appended", 5, 1), (106 * MS, "fetch_out", 5, 1)])
    hops, whole = breakdown(read_traces(tmp_path))  # no hw, no acked: the write never completed
    assert whole == 0 and all(not v for v in hops.values())


def test_the_trace_is_off_unless_the_environment_names_a_directory(tmp_path: Path) -> None:
    script = ("from kbroker.metrics.hops import HOPS\n"
              "HOPS.start(7)\nprint(HOPS.on)\nHOPS.mark('append', 't', 0, 5)\n")
    env = {k: v for k, v in os.environ.items() if k != "KBROKER_TRACE_HOPS"}
    off = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert off.stdout.strip() == "False"
    on = subprocess.run([sys.executable, "-c", script], env={**env, "KBROKER_TRACE_HOPS": str(tmp_path)},
                        capture_output=True, text=True, check=True)
    assert on.stdout.strip() == "True"
    [trace] = tmp_path.glob("hops-7-*.txt")
    ns, step, topic, partition, offset, peer = trace.read_text().split()
    assert (step, topic, partition, offset, peer) == ("append", "t", "0", "5", "-1") and int(ns) > 0


def test_inter_broker_connections_send_without_delay() -> None:
    """Nagle's algorithm would hold a follower's small Fetch behind the unacknowledged end of its last one."""
    import asyncio
    import socket

    from kbroker.interbroker.client import BrokerConnection

    async def check() -> int:
        accepted: list[asyncio.StreamWriter] = []
        server = await asyncio.start_server(lambda r, w: accepted.append(w), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        conn = BrokerConnection("127.0.0.1", port, "test", 5.0)
        await conn.connect()
        sock = conn.socket()
        assert sock is not None
        nodelay = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        conn.close()
        server.close()
        await server.wait_closed()
        return int(nodelay)
    assert asyncio.run(check()) != 0


def test_the_floor_bench_answers_every_request_through_both_followers() -> None:
    """bench.experiments.replication_floor: four bare asyncio processes in the shape of an acks=all round trip."""
    from bench.experiments.replication_floor import run
    out = run(rate=200, seconds=1, size=1024)
    assert out["acknowledged"] == 200 and out["lost"] == 0
    assert 0 < out["p50_ms"] <= out["p99_ms"]  # type: ignore[operator]
