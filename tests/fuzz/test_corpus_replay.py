"""Replays the kept fuzz corpus (tests/fuzz/corpus/<target>/, written by ``python -m bench.reliability.fuzz
--minimize``) through each target without atheris: every input must hold the target's contract
(return, or raise only the protocol's own errors). regress-* files are inputs that broke the
contract once; each is named after the bug its fix closed."""
from __future__ import annotations

import signal
from pathlib import Path

import pytest

from bench.reliability.fuzz.targets import TARGETS, check

CORPUS = Path(__file__).parent / "corpus"
# libFuzzer held each input to one second; this bound only catches a hang, on a loaded machine
HANG_SECONDS = 30


class Hang(Exception):
    pass


def _on_alarm(signum, frame):
    raise Hang(f"an input ran over {HANG_SECONDS} s")


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_corpus_holds_the_contract(name):
    files = sorted((CORPUS / name).iterdir())
    assert files, f"no kept corpus for {name}: run python -m bench.reliability.fuzz --target {name} --minimize"
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    try:
        for path in files:
            signal.alarm(HANG_SECONDS)
            try:
                check(TARGETS[name], path.read_bytes())
            except Exception as exc:  # noqa: BLE001 - name the input that broke the contract
                pytest.fail(f"{path.name}: {type(exc).__name__}: {exc}")
            finally:
                signal.alarm(0)
    finally:
        signal.signal(signal.SIGALRM, previous)
