"""Loopback TCP proxies in front of each broker's inter-broker listener, so the harness can cut, slow or
freeze one broker's links to the others without root or netfilter.

Every broker advertises its REPLICATION listener at its proxy's port, so all inter-broker traffic (replica
fetches, controller requests) passes through the proxy of the broker it goes *to*. To isolate broker B in both
directions, a connection is also tied to the broker it comes *from*: the first request on it names its client
(kbroker's fetchers say ``broker-<from>-fetcher-<to>``, its controller ``controller-<from>``).

Modes, applied to every connection to or from the isolated broker:
  pass   forward bytes as they come;
  drop   close those connections and refuse new ones (a reset link);
  delay  hold each chunk ``delay_s`` before forwarding it (a slow link, order kept);
  stall  stop forwarding without closing anything (a black hole); restore lets the held bytes through.
"""
from __future__ import annotations

import asyncio
import re
import struct
import threading
from dataclasses import dataclass, field

_CLIENT = re.compile(rb"^(?:broker-(\d+)-fetcher|controller-(\d+))")
MODES = ("pass", "drop", "delay", "stall")


@dataclass(eq=False)  # kept in a set: compared by identity
class Link:
    """One proxied connection: the broker it goes to, the broker it comes from once known."""
    to_broker: int
    from_broker: int | None = None
    writers: list[asyncio.StreamWriter] = field(default_factory=list)

    def touches(self, broker: int) -> bool:
        return broker in (self.to_broker, self.from_broker)


def client_broker(first_bytes: bytes) -> int | None:
    """The broker a Kafka request comes from, read from its header's client id (v1+ headers: size, api key,
    version, correlation id, then a length-prefixed client id)."""
    if len(first_bytes) < 14:
        return None
    (length,) = struct.unpack_from(">h", first_bytes, 12)
    match = _CLIENT.match(first_bytes[14:14 + max(length, 0)])
    if match is None:
        return None
    return int(match.group(1) or match.group(2))


class ProxyHub:
    """All the proxies, one asyncio loop in a daemon thread; ``set_fault`` / ``restore`` from any thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="chaos-proxy", daemon=True)
        self._thread.start()
        self._servers: dict[int, asyncio.Server] = {}
        self._links: set[Link] = set()
        self.isolated: int | None = None
        self.mode = "pass"
        self.delay_s = 0.0
        self._flowing = asyncio.Event()  # cleared while a stall holds bytes
        self.loop.call_soon_threadsafe(self._flowing.set)

    def _run(self, coro: object, timeout: float = 10.0) -> object:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)  # type: ignore[arg-type]

    def add(self, broker: int, listen_port: int, target_port: int) -> None:
        async def start() -> asyncio.Server:
            return await asyncio.start_server(
                lambda r, w: self._serve(broker, target_port, r, w), "127.0.0.1", listen_port)
        self._servers[broker] = self._run(start())  # type: ignore[assignment]

    def _affected(self, link: Link) -> bool:
        return self.isolated is not None and link.touches(self.isolated)

    async def _serve(self, broker: int, target_port: int, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:
        link = Link(broker, writers=[writer])
        if self.mode == "drop" and self.isolated == broker:
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", target_port)
        except OSError:
            writer.close()
            return
        link.writers.append(up_writer)
        self._links.add(link)
        try:
            await asyncio.gather(self._pipe(link, reader, up_writer, True), self._pipe(link, up_reader, writer, False))
        finally:
            self._links.discard(link)
            for w in link.writers:
                w.close()

    async def _pipe(self, link: Link, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    from_client: bool) -> None:
        first = from_client
        try:
            while True:
                chunk = await reader.read(65536)
                if not chunk:
                    break
                if first:
                    first = False
                    link.from_broker = client_broker(chunk)
                while self._affected(link):
                    if self.mode == "drop":
                        return
                    if self.mode == "delay":
                        await asyncio.sleep(self.delay_s)
                        break
                    if self.mode == "stall":
                        self._flowing.clear()
                        await self._flowing.wait()
                        continue
                    break
                writer.write(chunk)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            for w in link.writers:
                w.close()

    def set_fault(self, broker: int, mode: str, delay_s: float = 0.0) -> None:
        """Apply ``mode`` to every link to or from ``broker`` (one broker at a time)."""
        assert mode in MODES, mode

        def apply() -> None:
            self.isolated, self.mode, self.delay_s = broker, mode, delay_s
            if mode == "stall":
                self._flowing.clear()
            if mode == "drop":
                for link in list(self._links):
                    if link.touches(broker):
                        for w in link.writers:
                            w.close()
        self.loop.call_soon_threadsafe(apply)

    def restore(self) -> None:
        def apply() -> None:
            self.isolated, self.mode, self.delay_s = None, "pass", 0.0
            self._flowing.set()
        self.loop.call_soon_threadsafe(apply)

    def close(self) -> None:
        async def shut() -> None:
            for server in self._servers.values():
                server.close()
            for link in list(self._links):
                for w in link.writers:
                    w.close()
        try:
            self._run(shut())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(5)
