"""kbroker.crashpoints itself: armed only by KBROKER_CRASH_AT, dies by SIGKILL at exactly the nth hit."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from kbroker import crashpoints

PROGRAM = ("from kbroker.crashpoints import crash_point\n"
           "for _ in range(3):\n"
           "    crash_point('other')\n"
           "    crash_point('here', lambda rng: print('before kill', flush=True))\n"
           "print('survived', flush=True)\n")


def _run(spec: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != crashpoints.ENV}
    if spec is not None:
        env[crashpoints.ENV] = spec
    return subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=60)


def test_the_nth_hit_kills_the_process():
    done = _run("here:3")
    assert done.returncode == -signal.SIGKILL
    assert done.stdout == "before kill\n" and "KBROKER CRASH POINT here #3" in done.stderr


@pytest.mark.parametrize("spec", [None, "here:4", "elsewhere:1"])
def test_unarmed_or_never_reached_points_do_nothing(spec):
    done = _run(spec)
    assert done.returncode == 0 and done.stdout == "survived\n"


def test_malformed_specs_are_refused():
    assert crashpoints.parse_spec("a.b:2, c:1") == {"a.b": 2, "c": 1}
    for bad in ("a", "a:0", ":1", "a:x"):
        with pytest.raises(ValueError):
            crashpoints.parse_spec(bad)
