"""A real, local ZooKeeper server for tests and benchmarks, the way kazoo's ``testing/common.py:ManagedZooKeeper``
runs one: write ``zoo.cfg`` (dataDir in a temp dir, clientPort a free loopback port), run
``java -cp <jars> org.apache.zookeeper.server.quorum.QuorumPeerMain zoo.cfg``, wait until it
serves (the ``srvr`` four-letter word reports a mode), and keep its output for diagnostics.

Jars: ``$ZOOKEEPER_CLASSPATH`` if set; else ``$ZOOKEEPER_PATH`` (an unpacked release: its
``*.jar`` and ``lib/*.jar``); else Debian's package (``/usr/share/java/zookeeper.jar``, whose
manifest ``Class-Path`` names every dependency under /usr/share/java); else the release layout
under ``/usr/share/zookeeper``. Java is ``$JAVA_HOME/bin/java`` or ``java`` on PATH.
"""
from __future__ import annotations

import atexit
import glob
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

_MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
_DEBIAN_JAVA = Path("/usr/share/java")
_RELEASE_DIRS = [Path("/usr/share/zookeeper"), Path("/opt/zookeeper")]


class ZooKeeperUnavailable(RuntimeError):
    """Java or the ZooKeeper jars cannot be found."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def java_executable() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and os.access(os.path.join(java_home, "bin", "java"), os.X_OK):
        return os.path.join(java_home, "bin", "java")
    java = shutil.which("java")
    if java is None:
        raise ZooKeeperUnavailable("no java executable (set JAVA_HOME or install a JRE; `make debs` installs "
                                   "Debian's zookeeper package, which pulls one in)")
    return java


def _release_jars(root: Path) -> list[str]:
    return sorted(glob.glob(str(root / "*.jar"))) + sorted(glob.glob(str(root / "lib" / "*.jar")))


def zookeeper_classpath() -> str:
    if os.environ.get("ZOOKEEPER_CLASSPATH"):
        return os.environ["ZOOKEEPER_CLASSPATH"]
    jars: list[str] = []
    if os.environ.get("ZOOKEEPER_PATH"):
        jars = _release_jars(Path(os.environ["ZOOKEEPER_PATH"]))
    elif (_DEBIAN_JAVA / "zookeeper.jar").exists():
        # Debian: the manifest's Class-Path brings jute, netty, slf4j-api, metrics, ...
        jars = [str(_DEBIAN_JAVA / "zookeeper.jar")]
        if (_DEBIAN_JAVA / "zookeeper-jute.jar").exists():
            jars.append(str(_DEBIAN_JAVA / "zookeeper-jute.jar"))
        # a logging binding, so the server's log lines reach our log file instead of slf4j's NOP
        if (_DEBIAN_JAVA / "slf4j-simple.jar").exists():
            jars.append(str(_DEBIAN_JAVA / "slf4j-simple.jar"))
    else:
        for root in _RELEASE_DIRS:
            found = [j for j in _release_jars(root) if "zookeeper" in os.path.basename(j)]
            if found:
                jars = _release_jars(root)
                break
    if not any("zookeeper" in os.path.basename(j) for j in jars):
        raise ZooKeeperUnavailable("ZooKeeper jars not found: install Debian's zookeeper package (`make debs`), "
                                   "or set ZOOKEEPER_PATH (a release directory) or ZOOKEEPER_CLASSPATH")
    return os.pathsep.join(jars)


class ZooKeeperServer:
    """One standalone ZooKeeper on 127.0.0.1. ``stop()``/``start()`` keep the port and the data
    directory, so sessions survive a restart as they do in production."""

    def __init__(self, base_dir: Path, *, tick_time_ms: int = 200, max_session_timeout_ms: int = 60_000) -> None:
        self.base_dir = Path(base_dir)
        self.data_dir = self.base_dir / "data"
        self.config_path = self.base_dir / "zoo.cfg"
        self.log_path = self.base_dir / "zookeeper.log"
        self.port = free_port()
        self.tick_time_ms = tick_time_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.classpath = zookeeper_classpath()
        self.java = java_executable()
        self._process: subprocess.Popen[bytes] | None = None
        self._log_file: BinaryIO | None = None
        atexit.register(self.stop)

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def _write_config(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(
            f"tickTime={self.tick_time_ms}\n"
            f"dataDir={self.data_dir}\n"
            f"clientPort={self.port}\n"
            "clientPortAddress=127.0.0.1\n"
            f"minSessionTimeout={2 * self.tick_time_ms}\n"
            f"maxSessionTimeout={self.max_session_timeout_ms}\n"
            "maxClientCnxns=0\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=*\n"
            # tests write and read a lot; fsync per write would only slow them down
            "forceSync=no\n"
        )

    def start(self, timeout: float = 30.0) -> None:
        if self.running:
            return
        self._write_config()
        self._log_file = open(self.log_path, "ab")
        command = [self.java, "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                   "-Dzookeeper.jmx.log4j.disable=true", "-Dorg.slf4j.simpleLogger.showDateTime=true",
                   "-cp", self.classpath, _MAIN_CLASS, str(self.config_path)]
        self._process = subprocess.Popen(command, stdout=self._log_file, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with status {self._process.returncode} on start; "
                                   f"its log ({self.log_path}) ends with:\n{self.log_tail()}")
            if "Mode:" in self.four_letter_word("srvr"):
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"ZooKeeper did not serve on {self.hosts} within {timeout} s; log:\n{self.log_tail()}")

    def stop(self, timeout: float = 10.0) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def kill(self) -> None:
        """SIGKILL: no clean shutdown (what a crashed server looks like to clients)."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        self.stop()

    @contextmanager
    def paused(self) -> Iterator[None]:
        """SIGSTOP the server for the block, SIGCONT after it whatever happens: a ZooKeeper that stalls
        (a long GC, a slow disk) without dropping its connections, as clients see one."""
        process = self._process
        if process is None or process.poll() is not None:
            raise RuntimeError("ZooKeeper is not running")
        process.send_signal(signal.SIGSTOP)
        try:
            yield
        finally:
            process.send_signal(signal.SIGCONT)

    def four_letter_word(self, word: str, timeout: float = 1.0) -> str:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as s:
                s.sendall(word.encode("ascii"))
                chunks = []
                while True:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    chunks.append(chunk)
            return b"".join(chunks).decode("utf-8", "replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"
