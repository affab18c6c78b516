"""The machine's limits, measured in the same run as the brokers: sequential disk write (bench.suite.storage.raw_write:
page cache, no fsync, as the log writes), loopback TCP throughput (one connection, 1 MiB sends, the reader
discards) and loopback TCP round trip (64-byte ping-pong, TCP_NODELAY)."""
from __future__ import annotations

import os
import socket
import statistics
import threading
import time
from pathlib import Path

from bench.suite import storage

MIB = 1 << 20


def tcp_throughput(total: int) -> float:
    """MB/s through one loopback TCP connection."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    got = [0]

    def drain() -> None:
        conn, _ = srv.accept()
        with conn:
            while True:
                n = len(conn.recv(4 * MIB))
                if not n:
                    return
                got[0] += n

    t = threading.Thread(target=drain)
    t.start()
    buf = os.urandom(MIB)
    with socket.create_connection(srv.getsockname()) as c:
        start = time.perf_counter()
        sent = 0
        while sent < total:
            c.sendall(buf)
            sent += len(buf)
        c.shutdown(socket.SHUT_WR)
        t.join()
        elapsed = time.perf_counter() - start
    srv.close()
    return got[0] / elapsed / 1e6


def tcp_round_trip(n: int) -> float:
    """Median µs of a 64-byte loopback ping-pong."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def echo() -> None:
        conn, _ = srv.accept()
        with conn:
            while True:
                data = conn.recv(64)
                if not data:
                    return
                conn.sendall(data)

    t = threading.Thread(target=echo)
    t.start()
    times = []
    with socket.create_connection(srv.getsockname()) as c:
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        msg = b"x" * 64
        for _ in range(n):
            start = time.perf_counter()
            c.sendall(msg)
            got = 0
            while got < 64:
                got += len(c.recv(64 - got))
            times.append(time.perf_counter() - start)
    t.join()
    srv.close()
    return statistics.median(times) * 1e6


def measure(workdir: Path, limit_bytes: int, round_trips: int) -> dict:
    return {"kind": "limits",
            "disk_write_mb_s": round(storage.raw_write(workdir, limit_bytes, MIB), 1),
            "tcp_mb_s": round(tcp_throughput(limit_bytes * 2), 1),
            "tcp_rtt_us": round(tcp_round_trip(round_trips), 1)}
