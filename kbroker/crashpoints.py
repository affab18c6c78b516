"""Opt-in crash points: named places inside multi-step disk writes where a crash-consistency test
makes the broker SIGKILL itself (tests/crash).

``KBROKER_CRASH_AT=<name>:<nth>[,<name>:<nth>...]`` arms the named points: the nth time the
process reaches one, it writes ``KBROKER CRASH POINT <name> #<nth>`` to stderr (so the test knows
the death was the one it asked for) and sends itself SIGKILL: no ``finally``, no flush, no atexit,
as with a power-less kill -9 (the page cache survives, as it does for a killed process).

Unarmed (the variable unset) ``crash_point`` is one global bool test; hot paths test ``ARMED``
themselves so that not even the call is made.
"""
from __future__ import annotations

import os
import random
import signal
from collections.abc import Callable

ENV = "KBROKER_CRASH_AT"


def parse_spec(spec: str) -> dict[str, int]:
    """``name:nth,...`` -> {name: nth}; raises ValueError for a malformed entry."""
    targets: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, sep, nth = item.rpartition(":")
        if not sep or not name or not nth.isdigit() or int(nth) < 1:
            raise ValueError(f"{ENV}: expected <name>:<nth> (nth >= 1), got {item!r}")
        targets[name] = int(nth)
    return targets


_targets: dict[str, int] = parse_spec(os.environ.get(ENV, ""))
_hits: dict[str, int] = {}
ARMED = bool(_targets)


def crash_point(name: str, before_kill: Callable[[random.Random], object] | None = None) -> None:
    """Die here by SIGKILL if ``name`` is armed and this is its nth hit. ``before_kill`` runs
    first, given a generator seeded by the point and hit (a torn write writes part of its data)."""
    if ARMED:
        _hit(name, before_kill)


def _hit(name: str, before_kill: Callable[[random.Random], object] | None) -> None:
    nth = _targets.get(name)
    if nth is None:
        return
    count = _hits[name] = _hits.get(name, 0) + 1
    if count != nth:
        return
    if before_kill is not None:
        before_kill(random.Random(f"{name}:{nth}"))
    os.write(2, f"\nKBROKER CRASH POINT {name} #{nth}\n".encode())
    os.kill(os.getpid(), signal.SIGKILL)


def torn_prefix(data: bytes | bytearray | memoryview, rng: random.Random) -> memoryview:
    """A strict, non-empty prefix of ``data`` (or all of one byte): what a write cut short left."""
    view = memoryview(data).cast("B")
    return view[:rng.randrange(1, len(view))] if len(view) > 1 else view
