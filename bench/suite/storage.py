"""Storage benchmark: the partition log against the disk it writes to, in one run.

    python -m bench.suite.storage [--dir DIR] [--mib 512] [--rounds 3]

Prints one JSON line per measurement, then a summary JSON object as the last line. Every figure is
compared only with figures from the same run (timings here drift up to 2x within half an hour).

Raw disk speed is a pwrite loop of the same buffer sizes into a fresh file on the same filesystem,
with the same flush policy as the log (none: the page cache decides, Kafka's default). Each
measurement is repeated ``--rounds`` times, interleaved, and the best round is reported.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.harness.batches import client_batch
from bench.harness.results_meta import header
from kbroker._core import index as core_index, sendfile as core_sendfile, timewheel as core_timewheel
from kbroker._core.appender import io_uring_available, open_appender
from kbroker.log import LogConfig, LogManager, TopicPartition, appenders

MIB = 1 << 20


def emit(record: dict) -> None:
    print(json.dumps(record), flush=True)


def raw_write(directory: Path, total: int, size: int, files: int = 1) -> float:
    """MB/s of a plain sequential pwrite loop into new files (round-robin over ``files``), the
    physical limit the log's appends are compared with."""
    paths = [directory / f"raw-{i}.bin" for i in range(files)]
    bufs = [os.urandom(size) for _ in range(files)]
    fds = [os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644) for path in paths]
    positions = [0] * files
    try:
        written = 0
        i = 0
        start = time.perf_counter()
        while written < total:
            f = i % files
            n = os.pwrite(fds[f], bufs[f], positions[f])
            positions[f] += n
            written += n
            i += 1
        elapsed = time.perf_counter() - start
    finally:
        for fd, path in zip(fds, paths):
            os.close(fd)
            path.unlink()
    return written / elapsed / 1e6


def log_append(directory: Path, total: int, size: int, backend: str, partitions: int) -> float:
    """MB/s of the produce path's log append (validate with CRC-32C, assign offsets in place,
    index, write) round-robin over ``partitions`` logs, each write done before the next batch is
    validated, as the broker's appends are."""
    root = directory / f"log-{backend}-{partitions}"
    config = LogConfig(segment_bytes=1 << 30)
    with open_appender(backend) as appender:
        manager = LogManager([root], config, appender=appender)
        manager.startup()
        logs = [manager.get_or_create_log(TopicPartition("bench", p)) for p in range(partitions)]
        batches = [client_batch(size) for _ in range(min(partitions, 8))]
        written = 0
        i = 0
        start = time.perf_counter()
        while written < total:
            written += logs[i % partitions].append(batches[i % len(batches)]).size
            i += 1
        elapsed = time.perf_counter() - start
        manager.shutdown()
    shutil.rmtree(root)
    return written / elapsed / 1e6


def appender_submit(directory: Path, total: int, size: int, partitions: int) -> float:
    """MB/s of io_uring submissions carrying one write per partition file (many partitions in
    one submission), the shape of a multi-partition produce request."""
    files = [os.open(directory / f"multi-{p}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
             for p in range(partitions)]
    buf = os.urandom(size)
    positions = [0] * partitions
    written = 0
    try:
        with open_appender("io_uring") as appender:
            start = time.perf_counter()
            while written < total:
                writes = [(fd, positions[p], (buf,)) for p, fd in enumerate(files)]
                written += appender.submit(writes)
                positions = [pos + size for pos in positions]
            elapsed = time.perf_counter() - start
    finally:
        for p, fd in enumerate(files):
            os.close(fd)
            os.unlink(directory / f"multi-{p}")
    return written / elapsed / 1e6


def index_lookups(directory: Path, entries: int = 100_000, lookups: int = 1_000_000) -> float:
    idx = core_index.OffsetIndex(str(directory / "bench.index"), 0, entries * 8 + 8)
    for i in range(entries):
        idx.append(i * 10 + 5, i * 4096)
    targets = [random.randrange(entries * 10) for _ in range(lookups)]
    lookup = idx.lookup
    start = time.perf_counter()
    for t in targets:
        lookup(t)
    elapsed = time.perf_counter() - start
    idx.close()
    return lookups / elapsed


def timewheel_ops(n: int = 1_000_000) -> float:
    """add + cancel pairs per second from Python, with a populated wheel."""
    wheel = core_timewheel.TimingWheel(1, 20, 0)
    for i in range(10_000):
        wheel.add(random.randrange(1, 600_000), i)
    expiries = [random.randrange(1, 600_000) for _ in range(n)]
    add, cancel = wheel.add, wheel.cancel
    item = object()
    start = time.perf_counter()
    for e in expiries:
        cancel(add(e, item))
    elapsed = time.perf_counter() - start
    return n / elapsed


def socket_send(directory: Path, total: int, use_sendfile: bool) -> float:
    """MB/s moving ``total`` bytes of a file to a loopback TCP socket drained by a thread."""
    path = directory / "send.bin"
    chunk = os.urandom(MIB)
    with open(path, "wb") as f:
        for _ in range(total // MIB):
            f.write(chunk)
    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    received = [0]

    def drain() -> None:
        buf = bytearray(4 * MIB)
        view = memoryview(buf)
        while True:
            n = client.recv_into(view)
            if not n:
                return
            received[0] += n

    reader = threading.Thread(target=drain)
    reader.start()
    fd = os.open(path, os.O_RDONLY)
    bounce = bytearray(MIB)
    try:
        start = time.perf_counter()
        offset = 0
        sock_fd = server.fileno()
        while offset < total:
            if use_sendfile:
                offset += core_sendfile.send_range(sock_fd, fd, offset, min(MIB, total - offset))
            else:
                offset += core_sendfile.copy_range(sock_fd, fd, offset, min(MIB, total - offset), bounce)
        server.shutdown(socket.SHUT_WR)
        reader.join()
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        server.close()
        client.close()
        listener.close()
        path.unlink()
    assert received[0] == total, (received[0], total)
    return total / elapsed / 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir on the repo's disk)")
    parser.add_argument("--mib", type=int, default=512, help="MiB written per append measurement")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    print(json.dumps(header(__file__, argv)), flush=True)
    base = Path(args.dir or ".").resolve()
    directory = Path(tempfile.mkdtemp(prefix="kbroker-bench-", dir=base))
    total = args.mib * MIB
    backends = ["io_uring", "pwritev"] if io_uring_available() else ["pwritev"]
    best: dict[str, float] = {}
    default_backend = appenders.choose(directory).backend  # what a broker's log dir here would use

    def keep(name: str, value: float, **extra: object) -> None:
        emit({"measure": name, "value": round(value, 1), **extra})
        best[name] = max(best.get(name, 0.0), value)

    try:
        raw_write(directory, total, MIB)  # warm-up: first touch of page-cache memory is slow here
        for round_no in range(args.rounds):
            for size, label in ((MIB, "1mib"), (16 * 1024, "16kib")):
                keep(f"disk_seq_write_{label}_mb_s", raw_write(directory, total, size), round=round_no)
                keep(f"disk_seq_write_{label}_100f_mb_s", raw_write(directory, total, size, 100), round=round_no)
                for backend in backends:
                    for partitions in (1, 100):
                        suffix = "" if partitions == 1 else "_100p"
                        keep(f"{backend}_{label}{suffix}_mb_s",
                             log_append(directory, total, size, backend, partitions), round=round_no)
                if "io_uring" in backends:
                    keep(f"io_uring_submit_100p_{label}_mb_s", appender_submit(directory, total, size, 100),
                         round=round_no)
        keep("index_lookups_s", index_lookups(directory))
        keep("timewheel_ops_s", timewheel_ops())
        keep("sendfile_mb_s", socket_send(directory, 1024 * MIB, True))
        keep("read_send_copy_mb_s", socket_send(directory, 1024 * MIB, False))
    finally:
        shutil.rmtree(directory, ignore_errors=True)

    summary = {k: round(v, 1) for k, v in sorted(best.items())}
    summary["append_1mib_mb_s"] = summary[f"{default_backend}_1mib_mb_s"]
    summary["disk_seq_write_mb_s"] = summary["disk_seq_write_1mib_mb_s"]
    summary["append_vs_disk_pct"] = round(100 * summary["append_1mib_mb_s"] / summary["disk_seq_write_mb_s"], 1)
    summary["default_backend"] = default_backend
    summary["mib_per_measurement"] = args.mib
    summary["python"] = sys.version.split()[0]
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
