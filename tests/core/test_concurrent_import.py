"""Many processes importing the core at once all start (host mode's brokers and the log cleaner's child processes
start together): python-liburing rewrites a cache file under its package on every import, and a second process
importing it meanwhile failed with FileNotFoundError (a cleaner test's children died before their first line)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tests.quality.helpers import REPO

PROCESSES = 24
ROUNDS = 6


@pytest.mark.slow  # 144 interpreters starting: about two minutes on 2 shared cores
def test_processes_importing_the_core_together_all_start() -> None:
    failures = []
    for _ in range(ROUNDS):
        procs = [subprocess.Popen([sys.executable, "-c", "import kbroker._core.appender, kbroker.log; print('ok')"],
                                  cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                 for _ in range(PROCESSES)]
        for proc in procs:
            out, err = proc.communicate(timeout=120)
            if proc.returncode != 0 or out != b"ok\n":
                failures.append(err.decode(errors="replace").strip().splitlines()[-1:])
    assert not failures, f"{len(failures)} of {PROCESSES * ROUNDS} imports failed: {failures[:3]}"
