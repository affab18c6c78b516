"""Hostile sockets against a real broker: does it keep serving others, and does its memory stay bounded?

    python -m bench.reliability.abuse [--scenario NAME ...] [--idle-connections 4000] [--seconds 10]

Each scenario starts its own ``kbroker serve`` on a free loopback port and prints one JSON line:
the broker's resident memory before (``baseline_rss_mb``) and its peak during the abuse
(``peak_rss_mb``: the kernel's high-water mark, reset through /proc/PID/clear_refs just before the
abuse starts, so it is this scenario's peak), the connections the broker held open at the end of
the abuse (``broker_fds``), and what a well-behaved client (``Prober``: a Produce acks=1 and a
Fetch of it back, one round trip after the other, on its own connection) got meanwhile:
``served`` round trips, latency ``p50_ms``/``p99_ms``/``max_ms`` and ``errors``.

Scenarios:
- ``frames``: frame sizes around ``socket.request.max.bytes`` (max-1, max, max+1, 2^31-1, -1,
  -2^31) with nothing after the size, then ``--claimers`` connections that each claim max-1 bytes
  and send only 64 KiB of them: refused sizes must close the connection, accepted ones must not
  cost memory the peer has not sent.
- ``slowloris``: ``--loris`` connections each sending a valid Metadata request one byte a second.
- ``idle``: ``--idle-connections`` connections that connect and say nothing.
- ``never_reads``: one client pipelines ``--fetches`` Fetch requests of a 60 KiB record and never
  reads a response; ``fetches_sent`` below ``fetches_wanted`` means the broker stopped reading it.
The tests (tests/network/test_abuse.py) run the same scenarios smaller and assert the bounds.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.harness.broker_process import HOST, free_port, launch, python_serve, serve_argv, terminate, wait_serving
from bench.harness.results_meta import header
from kbroker.log.batches import build_batch
from kbroker.protocol import encode_request
from kbroker.tools.client import AdminClient, Connection

TOPIC = "abuse"
MiB = 1 << 20


def raise_nofile(want: int) -> int:
    """Raise this process's RLIMIT_NOFILE soft limit toward ``want`` (up to the hard limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


class Broker:
    """``kbroker serve`` on a free port; ``nofile`` sets its RLIMIT_NOFILE (soft, or (soft, hard))."""

    def __init__(self, workdir: Path, overrides: dict[str, str] | None = None,
                 nofile: int | tuple[int, int] | None = None) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.log_path = workdir / f"broker-{self.port}.log"
        self.overrides = {"listeners": f"PLAINTEXT://{HOST}:{self.port}",
                          "log.dirs": str(workdir / f"logs-{self.port}"),
                          "group.initial.rebalance.delay.ms": "0", **(overrides or {})}
        self.nofile = nofile
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = 60.0) -> None:
        cmd = serve_argv(python_serve(), self.overrides)
        nofile = self.nofile

        def limit() -> None:
            if isinstance(nofile, tuple):
                resource.setrlimit(resource.RLIMIT_NOFILE, nofile)
            elif nofile is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, max(nofile, resource.getrlimit(
                    resource.RLIMIT_NOFILE)[1])))
        self.proc = launch(cmd, self.log_path, env=dict(os.environ, PYTHONUNBUFFERED="1"), preexec_fn=limit)
        outcome = wait_serving(self.proc, self._answers, timeout, 0.1)
        if outcome == "serving":
            return
        if outcome == "exited":
            raise RuntimeError(f"broker exited with {self.proc.returncode} at start:\n{self.log()[-3000:]}")
        self.stop()
        raise RuntimeError(f"broker did not serve within {timeout}s:\n{self.log()[-3000:]}")

    def _answers(self) -> bool:
        if b"serving on" not in self.log_path.read_bytes():
            return False
        try:
            with AdminClient(self.bootstrap, timeout=5.0) as admin:
                admin.metadata([])
            return True
        except Exception:  # noqa: BLE001 - not up yet
            return False

    def stop(self, timeout: float = 30.0) -> int | None:
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        try:
            return terminate(proc, timeout)
        except subprocess.TimeoutExpired:
            return proc.returncode

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    # -- what the kernel says about it -------------------------------------------------------

    def status_kb(self, field: str) -> int:
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        raise RuntimeError(f"no {field} for {self.pid}")

    def rss_mb(self) -> float:
        return self.status_kb("VmRSS") / 1024

    def reset_peak(self) -> None:
        """Start VmHWM afresh at the current RSS (Linux 4.0+); falls back to the lifetime peak."""
        try:
            with open(f"/proc/{self.pid}/clear_refs", "w") as f:
                f.write("5")
        except OSError:
            pass

    def peak_mb(self) -> float:
        return self.status_kb("VmHWM") / 1024

    def open_fds(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def fd_limit(self) -> int:
        """The broker's soft RLIMIT_NOFILE."""
        return resource.prlimit(self.pid, resource.RLIMIT_NOFILE)[0]


@contextmanager
def running_broker(overrides: dict[str, str] | None = None,
                   nofile: int | tuple[int, int] | None = None) -> Iterator[Broker]:
    with tempfile.TemporaryDirectory(prefix="kbroker-abuse-") as tmp:
        broker = Broker(Path(tmp), overrides, nofile)
        broker.start()
        try:
            yield broker
        finally:
            broker.stop()


# -- the well-behaved client --------------------------------------------------------------------


def create_topic(bootstrap: str, name: str = TOPIC, partitions: int = 1) -> None:
    with AdminClient(bootstrap, timeout=30.0) as admin:
        admin.create_topics([{"name": name, "num_partitions": partitions, "replication_factor": 1, "configs": []}])


def produce_body(records: bytes, acks: int = 1, topic: str = TOPIC, partitions: int = 1) -> dict[str, Any]:
    return {"transactional_id": None, "acks": acks, "timeout_ms": 10000, "topic_data": [
        {"name": topic, "partition_data": [{"index": p, "records": records} for p in range(partitions)]}]}


def fetch_body(offset: int, max_bytes: int = 64 * 1024, topic: str = TOPIC, partitions: int = 1,
               max_wait_ms: int = 0, min_bytes: int = 0) -> dict[str, Any]:
    return {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes, "max_bytes": max_bytes * partitions,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [{"topic": topic, "partitions": [
                {"partition": p, "fetch_offset": offset, "partition_max_bytes": max_bytes}
                for p in range(partitions)]}],
            "forgotten_topics_data": [], "rack_id": ""}


class Prober:
    """Produce one record (acks=1), fetch it back, repeat: the client the abuse must not starve."""

    def __init__(self, bootstrap: str, timeout: float = 10.0) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.conn = Connection(host, int(port), client_id="prober", timeout=timeout)
        self.latencies: list[float] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="prober")

    def __enter__(self) -> Prober:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)
        self.conn.close()

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            n += 1
            value = b"probe-%d" % n
            start = time.monotonic()
            try:
                produced = self.conn.send(0, produce_body(bytes(build_batch([(None, value, int(time.time() * 1000))]))),
                                          version=7)
                part = produced.responses[0].partition_responses[0]
                if part.error_code:
                    raise RuntimeError(f"produce error {part.error_code}")
                fetched = self.conn.send(1, fetch_body(part.base_offset), version=11)
                data = fetched.responses[0].partitions[0]
                records = data.records
                raw = bytes(records) if records is not None else b""
                if data.error_code or value not in raw:
                    raise RuntimeError(f"fetch of offset {part.base_offset}: error {data.error_code}, "
                                       f"{len(raw)} bytes without the value")
            except Exception as exc:  # noqa: BLE001 - reported, and the probe goes on
                self.errors.append(f"{type(exc).__name__}: {exc}")
                if self.conn.closed or len(self.errors) > 20:
                    return
                continue
            self.latencies.append(time.monotonic() - start)
            self._stop.wait(0.01)

    def wait_served(self, n: int, timeout: float = 60.0) -> bool:
        target = len(self.latencies) + n
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and len(self.latencies) < target and self._thread.is_alive():
            time.sleep(0.02)
        return len(self.latencies) >= target

    def summary(self) -> dict[str, Any]:
        lat = sorted(self.latencies)

        def pct(p: float) -> float | None:
            return round(lat[min(len(lat) - 1, int(p * len(lat)))] * 1000, 2) if lat else None
        return {"served": len(lat), "p50_ms": pct(0.5), "p99_ms": pct(0.99),
                "max_ms": round(lat[-1] * 1000, 2) if lat else None,
                "mean_ms": round(statistics.fmean(lat) * 1000, 2) if lat else None,
                "errors": len(self.errors), "first_error": self.errors[0] if self.errors else None}


# -- socket helpers -------------------------------------------------------------------------------


def connect(port: int, rcvbuf: int | None = None, timeout: float = 10.0) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(timeout)
    s.connect((HOST, port))
    return s


def closed_by_peer(s: socket.socket, timeout: float = 10.0) -> bool:
    """True if the broker closes ``s`` within ``timeout`` (EOF or reset), False if it stays open."""
    s.settimeout(timeout)
    try:
        while True:
            data = s.recv(65536)
            if not data:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def still_open(s: socket.socket) -> bool:
    """Not closed by the broker, as far as a non-blocking peek tells (unread data counts as open)."""
    timeout = s.gettimeout()
    s.setblocking(False)  # with a timeout set, Python would wait out EAGAIN
    try:
        return bool(s.recv(1, socket.MSG_PEEK))
    except (BlockingIOError, InterruptedError):
        return True
    except OSError:
        return False
    finally:
        s.settimeout(timeout)


def metadata_request(correlation_id: int) -> bytes:
    return encode_request(3, 1, correlation_id, "loris", {"topics": []})


def wait_until(check: Callable[[], bool], timeout: float, step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(step)
    return check()


# -- scenarios ------------------------------------------------------------------------------------


def frames(broker: Broker, max_bytes: int, claimers: int = 20, sent_each: int = 64 * 1024) -> dict[str, Any]:
    """Sizes around socket.request.max.bytes: refused ones close the connection; accepted ones cost
    only what the peer actually sent."""
    outcomes: dict[str, str] = {}
    for name, size in (("max-1", max_bytes - 1), ("max", max_bytes), ("max+1", max_bytes + 1),
                       ("2^31-1", 2**31 - 1), ("-1", -1), ("-2^31", -2**31)):
        s = connect(broker.port)
        try:
            s.sendall(struct.pack(">i", size))
            outcomes[name] = "closed" if closed_by_peer(s, 2.0) else "open"
        finally:
            s.close()
    socks = []
    try:
        for _ in range(claimers):
            s = connect(broker.port)
            s.sendall(struct.pack(">i", max_bytes - 1) + b"\0" * sent_each)
            socks.append(s)
        time.sleep(1.0)  # let the broker receive all of it
        held_open = sum(still_open(s) for s in socks)
    finally:
        for s in socks:
            s.close()
    return {"outcomes": outcomes, "claimers": claimers, "claimed_mb_each": round((max_bytes - 1) / MiB, 1),
            "sent_kb_each": sent_each // 1024, "claimers_open": held_open}


def slowloris(broker: Broker, connections: int, seconds: float) -> dict[str, Any]:
    """Each connection sends a valid Metadata request one byte a second."""
    request = metadata_request(1)
    socks = [connect(broker.port) for _ in range(connections)]
    sent = 0
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and sent < len(request):
            tick = time.monotonic()
            for s in socks:
                try:
                    s.send(request[sent:sent + 1])
                except OSError:
                    pass
            sent += 1
            time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
        open_now = sum(still_open(s) for s in socks)
    finally:
        for s in socks:
            s.close()
    return {"loris": connections, "bytes_sent_each": sent, "request_bytes": len(request), "loris_open": open_now}


def idle(broker: Broker, connections: int, hold_s: float) -> dict[str, Any]:
    """Connections that connect and never say a word."""
    raise_nofile(connections + 1024)
    socks: list[socket.socket] = []
    refused = 0
    try:
        for _ in range(connections):
            try:
                socks.append(connect(broker.port, timeout=5.0))
            except OSError:
                refused += 1
        time.sleep(hold_s)
        fds = broker.open_fds()
        # a new client can still connect and be answered
        with AdminClient(broker.bootstrap, timeout=30.0) as admin:
            admin.metadata([])
        open_now = sum(still_open(s) for s in socks[-50:])
    finally:
        for s in socks:
            s.close()
    return {"idle": connections, "connect_failed": refused, "broker_fds": fds, "broker_fd_limit": broker.fd_limit(),
            "last_50_open": open_now}


WIDE = "abuse-wide"


def never_reads(broker: Broker, fetches: int, partitions: int = 1, record_bytes: int = 60 * 1024) -> dict[str, Any]:
    """Pipelines Fetch requests, each for a 60 KiB record of every partition of a topic, and reads
    no response. (A segment range up to 64 KiB is copied into the response, so a response over 50
    partitions is 3 MB in memory.)"""
    create_topic(broker.bootstrap, WIDE, partitions)
    host, port = broker.bootstrap.rsplit(":", 1)
    conn = Connection(host, int(port), client_id="seed", timeout=30.0)
    try:
        records = bytes(build_batch([(None, os.urandom(record_bytes), int(time.time() * 1000))]))
        conn.send(0, produce_body(records, topic=WIDE, partitions=partitions), version=7)
    finally:
        conn.close()
    request = encode_request(1, 11, 1, "hoarder", fetch_body(0, topic=WIDE, partitions=partitions))
    s = connect(broker.port, rcvbuf=4096)
    sent = 0
    try:
        s.settimeout(0.5)
        deadline = time.monotonic() + 30
        chunk = request * 100
        while sent < fetches and time.monotonic() < deadline:
            try:
                s.sendall(chunk)
                sent += 100
            except TimeoutError:
                break  # the broker stopped reading us: what it should do
            except OSError:
                break
        time.sleep(1.0)
        hoarder_open = still_open(s)
    finally:
        s.close()
    return {"fetches_sent": sent, "fetches_wanted": fetches, "partitions": partitions,
            "response_kb_each": record_bytes * partitions // 1024, "hoarder_open": hoarder_open}


SCENARIOS = ("frames", "slowloris", "idle", "never_reads")


def run(name: str, args: argparse.Namespace) -> dict[str, Any]:
    overrides: dict[str, str] = {}
    if name == "frames":
        overrides["socket.request.max.bytes"] = str(args.max_bytes)
    with running_broker(overrides, nofile=args.broker_nofile) as broker:
        create_topic(broker.bootstrap)
        with Prober(broker.bootstrap) as warm:
            warm.wait_served(20)
        baseline = broker.rss_mb()
        broker.reset_peak()
        started = time.monotonic()
        with Prober(broker.bootstrap) as prober:
            if name == "frames":
                result = frames(broker, args.max_bytes, args.claimers)
            elif name == "slowloris":
                result = slowloris(broker, args.loris, args.seconds)
            elif name == "idle":
                result = idle(broker, args.idle_connections, args.seconds)
            else:
                result = never_reads(broker, args.fetches, args.partitions)
            peak = broker.peak_mb()
            fds = broker.open_fds()
        probe = prober.summary()
        alive = broker.alive()
    return {"scenario": name, "baseline_rss_mb": round(baseline, 1), "peak_rss_mb": round(peak, 1),
            "peak_over_baseline_mb": round(peak - baseline, 1), "broker_fds": fds, "broker_alive": alive,
            "seconds": round(time.monotonic() - started, 1), **result, **probe}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.reliability.abuse", description=__doc__.split("\n\n")[0])
    p.add_argument("--scenario", action="append", choices=SCENARIOS, help="run only these (repeatable)")
    p.add_argument("--max-bytes", type=int, default=104857600, help="socket.request.max.bytes for 'frames'")
    p.add_argument("--claimers", type=int, default=20, help="'frames': connections claiming max-1 bytes")
    p.add_argument("--loris", type=int, default=500, help="'slowloris' connections")
    p.add_argument("--idle-connections", type=int, default=4000, help="'idle' connections")
    p.add_argument("--fetches", type=int, default=100000, help="'never_reads': Fetch requests pipelined")
    p.add_argument("--partitions", type=int, default=50, help="'never_reads': partitions each Fetch reads")
    p.add_argument("--seconds", type=float, default=10.0, help="how long 'slowloris' and 'idle' last")
    p.add_argument("--broker-nofile", type=int, default=None, help="the broker's RLIMIT_NOFILE (default: ours)")
    args = p.parse_args(argv)
    print(json.dumps(header(__file__, argv)), flush=True)
    raise_nofile(args.idle_connections + 4096)
    failed = 0
    for name in args.scenario or SCENARIOS:
        try:
            line = run(name, args)
        except Exception as exc:  # noqa: BLE001 - one failed scenario does not hide the others
            line = {"scenario": name, "failed": f"{type(exc).__name__}: {exc}"}
            failed += 1
        print(json.dumps(line), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
