"""`kbroker ui` as a process, started through the repository's process harness: its address is the one it prints
once it listens (``--listen 127.0.0.1:0`` picks a free port)."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from bench.harness.broker_process import launch, terminate, wait_serving

START_TIMEOUT = 30.0
ANNOUNCED = re.compile(rb"kbroker ui: watching \S+ on (http://127\.0\.0\.1:\d+/)")


class UiProcess:
    def __init__(self, output: Path, options: Sequence[str]) -> None:
        self.output = output
        self.argv = [sys.executable, "-m", "kbroker.cli", "ui", "--listen", "127.0.0.1:0", *options]
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self) -> UiProcess:
        self.proc = launch(self.argv, self.output, env=None)

        def listening() -> bool:
            found = ANNOUNCED.search(self.output.read_bytes())
            if found:
                self.url = found.group(1).decode()
            return found is not None
        outcome = wait_serving(self.proc, listening, START_TIMEOUT, 0.05)
        if outcome != "serving":
            self.stop()
            raise AssertionError(f"kbroker ui did not start ({outcome})\n{self.log()}")
        return self

    def get_json(self, path: str) -> dict[str, object] | None:
        """``/api/...`` as JSON; None while it answers 503 (no sample yet)."""
        try:
            with urllib.request.urlopen(self.url.rstrip("/") + path, timeout=10) as answer:
                body: dict[str, object] = json.load(answer)
                return body
        except urllib.error.HTTPError as exc:
            if exc.code == 503:
                return None
            raise

    def stop(self) -> int:
        proc, self.proc = self.proc, None
        return terminate(proc, 15) if proc is not None else 0

    def log(self) -> str:
        return self.output.read_text(errors="replace")[-6000:] if self.output.exists() else ""
