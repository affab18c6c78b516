"""A loopback TCP proxy that can cut connections: a client behind it loses its connection
while the server stays up and other clients keep writing, which is how watches get missed in
production. ``cut()`` closes every proxied connection and refuses new ones (accepted, then
closed at once) until ``restore()``."""
from __future__ import annotations

import socket
import threading


class FaultProxy:
    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._blocked = False
        self._closed = False
        threading.Thread(target=self._accept_loop, name="fault-proxy-accept", daemon=True).start()

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    def cut(self) -> None:
        with self._lock:
            self._blocked = True
            sockets, self._sockets = self._sockets, set()
        for s in sockets:
            _close(s)

    def restore(self) -> None:
        with self._lock:
            self._blocked = False

    def close(self) -> None:
        self._closed = True
        self.cut()
        _close(self._listener)

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                blocked = self._blocked
            if blocked:
                _close(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=2)
                upstream.settimeout(None)
            except OSError:
                _close(client)
                continue
            with self._lock:
                if self._blocked:
                    _close(client)
                    _close(upstream)
                    continue
                self._sockets.update((client, upstream))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), name="fault-proxy-pump", daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
        except OSError:
            pass
        finally:
            _close(source)
            _close(sink)
            with self._lock:
                self._sockets.discard(source)
                self._sockets.discard(sink)


def _close(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        s.close()
    except OSError:
        pass
