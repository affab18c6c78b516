"""The floor under an acks=all round trip on this machine: the same hops with no broker in them.

Four processes on loopback, as a 3-broker cluster and its producer: the client sends a ``--size``-byte request at
``--rate`` per second; the "leader" hands a copy to each of two "followers" the moment it arrives (as an append
wakes their parked fetches), each follower answers at once (its next fetch), and the leader answers the client
once both have (the high watermark). Every process is a plain asyncio protocol doing nothing else: what is left
is the event loops, the sockets and the scheduling of four processes on this machine's cores. Compare its
percentiles with ``bench.experiments.replication_hops``' (run them one after the other: timings drift) to see
how much of kbroker's round trip is kbroker.

    python -m bench.experiments.replication_floor [--rate 1000] [--seconds 5] [--size 1024]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import select
import socket
import struct
import sys
import time

from bench.harness import latency
from bench.harness.results_meta import provenance

_SIZE = struct.Struct(">i")


class _Frames(asyncio.Protocol):
    """Size-prefixed frames in; ``on_frame(self, frame)`` for each."""

    def __init__(self, on_frame) -> None:  # type: ignore[no-untyped-def]
        self.on_frame = on_frame
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:  # type: ignore[no-untyped-def]
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while len(self.buf) >= 4:
            n = _SIZE.unpack_from(self.buf)[0]
            if len(self.buf) < 4 + n:
                return
            frame = bytes(self.buf[4:4 + n])
            del self.buf[:4 + n]
            self.on_frame(self, frame)

    def send(self, frame: bytes) -> None:
        assert self.transport is not None
        self.transport.write(_SIZE.pack(len(frame)) + frame)


def _follower(port: int) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        _, proto = await loop.create_connection(lambda: _Frames(lambda p, f: p.send(f[:8])), "127.0.0.1", port)
        proto.connection_lost = lambda exc: done.done() or done.set_result(None)  # type: ignore[method-assign]
        await done
    asyncio.run(main())


def _leader(port_clients: int, port_followers: int, ready: multiprocessing.synchronize.Event) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        followers: list[_Frames] = []
        waiting: dict[bytes, list] = {}  # request id -> [acks still due, client]

        def from_follower(_: _Frames, frame: bytes) -> None:
            entry = waiting.get(frame)
            if entry is not None:
                entry[0] -= 1
                if entry[0] == 0:
                    del waiting[frame]
                    entry[1].send(frame)

        def from_client(client: _Frames, frame: bytes) -> None:
            waiting[frame[:8]] = [len(followers), client]
            for f in followers:
                f.send(frame)

        def follower_protocol() -> _Frames:
            p = _Frames(from_follower)
            followers.append(p)
            return p
        fs = await loop.create_server(follower_protocol, "127.0.0.1", port_followers)
        cs = await loop.create_server(lambda: _Frames(from_client), "127.0.0.1", port_clients)
        ready.set()
        async with fs, cs:
            await asyncio.sleep(3600)
    asyncio.run(main())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(rate: float, seconds: float, size: int) -> dict[str, object]:
    pc, pf = _free_port(), _free_port()
    ready = multiprocessing.Event()
    leader = multiprocessing.Process(target=_leader, args=(pc, pf, ready), daemon=True)
    leader.start()
    ready.wait(30)
    followers = [multiprocessing.Process(target=_follower, args=(pf,), daemon=True) for _ in range(2)]
    for f in followers:
        f.start()
    time.sleep(1.0)  # both followers connected
    sock = socket.create_connection(("127.0.0.1", pc))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setblocking(False)
    pad = b"\0" * max(0, size - 8)
    sent: dict[bytes, float] = {}
    lat: list[float] = []
    buf = bytearray()
    n = int(rate * seconds)
    pids = [leader.pid] + [f.pid for f in followers]
    cpu0 = sum(_cpu(p) for p in pids if p)
    start = time.perf_counter()
    i = 0
    deadline = start + seconds + 10
    while (i < n or sent) and time.perf_counter() < deadline:
        now = time.perf_counter()
        while i < n and now >= start + i / rate:
            rid = struct.pack(">q", i)
            sent[rid] = time.perf_counter()
            sock.sendall(_SIZE.pack(size) + rid + pad)
            i += 1
        wait = max(0.0, start + i / rate - time.perf_counter()) if i < n else 0.05
        if not select.select([sock], [], [], wait)[0]:
            continue
        buf += sock.recv(65536)
        while len(buf) >= 12:
            rid = bytes(buf[4:12])
            del buf[:12]
            lat.append(time.perf_counter() - sent.pop(rid))
    cpu = sum(_cpu(p) for p in pids if p) - cpu0
    sock.close()
    for p in (leader, *followers):
        p.terminate()
    return {"kind": "floor", "rate": rate, "seconds": seconds, "size": size, "acknowledged": len(lat),
            "lost": len(sent), "cpu_s_per_k_records": round(cpu / max(1, len(lat)) * 1000, 3),
            **latency.percentiles(lat)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rate", type=float, default=1000.0)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--size", type=int, default=1024)
    args = p.parse_args(argv)
    print(json.dumps({**run(args.rate, args.seconds, args.size), **provenance(sys.argv)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
