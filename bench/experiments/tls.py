"""What TLS costs the broker's receive path, apart from everything else: decryption alone, then the receive path.

A TLS 1.3 session between two ssl.SSLObjects over memory BIOs (the broker's design: kbroker/network reads the
socket into a BIO and the plaintext out of the SSLObject). The client side encrypts 200 MiB in records of each
size once; the clock runs while the server side decrypts them, fed 256 KiB at a time as the socket would. The
record size is the client's choice: librdkafka writes records of about 2.7 KiB when producing 1 KiB messages,
OpenSSL decrypts one record per read call. Printed as JSON lines, one per record size, beside the cipher's raw
speed measured by ``openssl speed`` in the same run (the physical limit of this CPU for that cipher).

Then the broker's own receive path (``kind: receive_path``): kbroker.network's FrameReader, alone for PLAINTEXT
and behind its TlsTransport for SSL, takes 1 MiB frames (a Produce's size) off a loopback TCP socket while a thread
sends them, pre-encrypted in records of each size; the figure is the receiving thread's CPU seconds (what the
event loop would spend), and ``tls_cpu_x`` what TLS multiplies them by.

Last (``kind: worker_thread``), whether that work pays on a thread beside a busy loop: decrypting 2.7 KiB records
and encrypting 128 KiB writes, each timed alone, then done on a worker thread while the main thread runs as long a
spell of Python (the loop parsing and handling requests). OpenSSL releases the GIL inside each call, but the worker
needs it back between calls and waits for the loop to let go of it; ``beside_python_s`` above ``then_python_s``
(the two one after the other) means the thread costs more than it overlaps.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import select
import socket
import ssl
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from bench.harness.results_meta import header
from bench.harness.security import make_pki
from kbroker.network.framing import FrameReader
from kbroker.network.tls_transport import TlsTransport

MIB = 1 << 20
FEED = 256 * 1024


def session(pki: dict[str, Path]) -> tuple[ssl.SSLObject, ssl.MemoryBIO, ssl.SSLObject, ssl.MemoryBIO]:
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(str(pki["keystore"]))
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.load_verify_locations(str(pki["ca"]))
    s_in, s_out, c_in, c_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    server = server_ctx.wrap_bio(s_in, s_out, server_side=True)
    client = client_ctx.wrap_bio(c_in, c_out, server_hostname="localhost")
    for _ in range(10):
        for side in (client, server):
            try:
                side.do_handshake()
            except ssl.SSLWantReadError:
                pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
    return server, s_in, client, c_out


def decrypt_rate(pki: dict[str, Path], record: int, total: int) -> dict:
    server, s_in, client, c_out = session(pki)
    data = os.urandom(record)
    n = total // record
    for _ in range(n):
        client.write(data)
    blob = c_out.read()
    buf = bytearray(FEED)
    view = memoryview(buf)
    got = 0
    # CPU time of this thread: the decryption's cost, not the time other processes of a shared machine took
    started = time.thread_time()
    for pos in range(0, len(blob), FEED):
        s_in.write(blob[pos:pos + FEED])
        while True:
            try:
                got += server.read(FEED, view)
            except ssl.SSLWantReadError:
                break
    elapsed = max(time.thread_time() - started, 1e-9)
    cipher, version, _ = server.cipher()  # type: ignore[misc]
    return {"kind": "tls_decrypt", "record_bytes": record, "cipher": cipher, "version": version,
            "mb_s": round(got / elapsed / 1e6, 1), "records_s": round(n / elapsed),
            "us_per_record": round(elapsed / n * 1e6, 2)}


def _loopback() -> tuple[socket.socket, socket.socket]:
    """(the accepted end, non-blocking, as the broker's; the client end, blocking)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
    server.setblocking(False)
    return server, client


def receive_path_cpu(pki: dict[str, Path], record: int, total: int, tls: bool) -> float:
    """The receiving thread's CPU seconds to take ``total`` bytes of 1 MiB frames through kbroker.network."""
    server, client = _loopback()
    taken = 0

    def take(frame: bytearray) -> None:
        nonlocal taken
        taken += 1
    reader = FrameReader(2 * MIB, take, lambda size, head: None, lambda: True, borrow=not tls)
    frame = MIB.to_bytes(4, "big") + os.urandom(MIB)
    count = total // MIB
    transport = None
    if tls:
        server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server_ctx.load_cert_chain(str(pki["keystore"]))
        client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        client_ctx.load_verify_locations(str(pki["ca"]))
        c_in, c_out = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls_client = client_ctx.wrap_bio(c_in, c_out, server_hostname="localhost")
        transport = TlsTransport(server_ctx)
        client.settimeout(0.05)
        for _ in range(20):  # the handshake, each side in turn
            try:
                tls_client.do_handshake()
                break
            except ssl.SSLWantReadError:
                pass
            client.sendall(c_out.read())
            select.select([server], [], [], 1.0)
            while select.select([server], [], [], 0.05)[0] and transport.receive(server):
                pass
            if transport.handshaking:
                transport.handshake()
            transport.send_cipher(server)
            try:
                c_in.write(client.recv(MIB))
            except TimeoutError:
                pass
        client.sendall(c_out.read())
        client.settimeout(None)
        for _ in range(count):
            for pos in range(0, len(frame), record):
                tls_client.write(frame[pos:pos + record])
        blob = c_out.read()
    else:
        blob = frame * count
    sender = threading.Thread(target=client.sendall, args=(blob,), daemon=True)
    started = time.thread_time()
    sender.start()
    while taken < count:
        select.select([server], [], [])
        try:
            if transport is None:
                n = server.recv_into(reader.room())
                if n:
                    reader.advance(n)
            elif transport.receive(server) and not transport.handshaking:
                transport.decrypt_into(reader)
            elif transport.handshaking and transport.handshake():  # the client's Finished came with the data
                transport.decrypt_into(reader)
        except BlockingIOError:
            pass
    cpu = time.thread_time() - started
    sender.join()
    server.close()
    client.close()
    return cpu


def receive_path(pki: dict[str, Path], record: int, total: int) -> dict:
    plain = min(receive_path_cpu(pki, record, total, False) for _ in range(3))
    secure = min(receive_path_cpu(pki, record, total, True) for _ in range(3))
    return {"kind": "receive_path", "record_bytes": record, "frame_bytes": MIB, "mib": total // MIB,
            "plaintext_cpu_s": round(plain, 3), "tls_cpu_s": round(secure, 3),
            "tls_cpu_x": round(secure / plain, 2) if plain else None}


def _python_spell(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        sum(range(1000))


def worker_thread(pki: dict[str, Path], total: int) -> list[dict]:
    results = []
    for work, record in (("decrypt", 2700), ("encrypt", 128 * 1024)):
        timings: list[float] = []
        for beside in (False, True):
            server, s_in, client, c_out = session(pki)
            data = os.urandom(record)
            if work == "decrypt":
                for _ in range(total // record):
                    client.write(data)
                s_in.write(c_out.read())
                buf = memoryview(bytearray(FEED))

                def run() -> None:
                    try:
                        while server.read(FEED, buf):
                            pass
                    except ssl.SSLWantReadError:
                        pass
            else:
                def run() -> None:
                    for _ in range(total // record):
                        client.write(data)
                        c_out.read()
            started = time.perf_counter()
            if not beside:
                run()
                timings.append(time.perf_counter() - started)  # alone
                _python_spell(timings[0])
            else:
                thread = threading.Thread(target=run)
                thread.start()
                _python_spell(timings[0])
                thread.join()
            timings.append(time.perf_counter() - started)
        results.append({"kind": "worker_thread", "work": work, "record_bytes": record, "mib": total // MIB,
                        "alone_s": round(timings[0], 3), "then_python_s": round(timings[1], 3),
                        "beside_python_s": round(timings[2], 3)})
    return results


def openssl_speed(cipher: str) -> float | None:
    """``openssl speed -evp`` at 16 KiB blocks, MB/s (None if openssl is missing)."""
    name = {"TLS_AES_256_GCM_SHA384": "aes-256-gcm", "TLS_AES_128_GCM_SHA256": "aes-128-gcm",
            "TLS_CHACHA20_POLY1305_SHA256": "chacha20-poly1305"}.get(cipher)
    if name is None:
        return None
    try:
        out = subprocess.run(["openssl", "speed", "-elapsed", "-seconds", "1", "-evp", name],
                             capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    line = next((ln for ln in out.splitlines() if ln.upper().startswith(name.upper())), "")
    figures = re.findall(r"([\d.]+)k", line)
    return round(float(figures[-1]) * 1000 / 1e6, 1) if figures else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.experiments.tls", description=__doc__.split("\n\n")[0])
    p.add_argument("--records", default="1024,2700,8192,16384", help="TLS record sizes (bytes)")
    p.add_argument("--mib", type=int, default=200, help="MiB decrypted per record size")
    args = p.parse_args(argv)
    print(json.dumps(header(__file__, argv)), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        pki = make_pki(Path(tmp))
        cipher = ""
        for record in (int(r) for r in args.records.split(",")):
            result = decrypt_rate(pki, record, args.mib * MIB)
            cipher = result["cipher"]
            print(json.dumps(result), flush=True)
        print(json.dumps({"kind": "limit", "what": f"openssl speed {cipher}, 16 KiB blocks",
                          "mb_s": openssl_speed(cipher)}), flush=True)
        for record in (int(r) for r in args.records.split(",")):
            print(json.dumps(receive_path(pki, record, args.mib * MIB)), flush=True)
        for result in worker_thread(pki, args.mib * MIB):
            print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
