"""Hop tracing: the steps of one acks=all write across the brokers, stamped so they can be lined up afterwards.

Off unless ``KBROKER_TRACE_HOPS`` names a directory when the broker starts; then each broker appends one line
per step to ``<dir>/hops-<broker id>-<pid>.txt``::

    <CLOCK_MONOTONIC ns> <step> <topic> <partition> <offset> <peer broker id or -1>

CLOCK_MONOTONIC is one clock for every process of a machine, so the files of brokers on one host line up by
time, and the offsets join them: a write whose leader log end became E is followed by the leader's answer to
each parked follower fetch reaching E (``answer``), the follower's receipt (``recv``) and append (``appended``,
its log end), its next fetch (``fetch_out`` at the leader end it asks from), the leader's receipt of that fetch
(``fetch_in``), the high watermark reaching E (``hw``) and the produce answered (``acked``). The leader's
``append`` carries E. ``bench.experiments.replication_hops`` starts a cluster with tracing on and prints the breakdown.

One branch on a module attribute when off; a buffered line write when on. Not for production.
"""
from __future__ import annotations

import atexit
import os
import time
from typing import TextIO

ENV = "KBROKER_TRACE_HOPS"


class HopTrace:
    __slots__ = ("on", "_out")

    def __init__(self) -> None:
        self.on = False
        self._out: TextIO | None = None

    def start(self, broker_id: int) -> None:
        """Open this broker's trace file if ``KBROKER_TRACE_HOPS`` is set (the composition root calls it once)."""
        directory = os.environ.get(ENV, "")
        if not directory or self._out is not None:
            return
        os.makedirs(directory, exist_ok=True)
        self._out = open(os.path.join(directory, f"hops-{broker_id}-{os.getpid()}.txt"), "a",  # noqa: SIM115
                         buffering=1 << 20)
        atexit.register(self.stop)
        self.on = True

    def mark(self, step: str, topic: str, partition: int, offset: int, peer: int = -1) -> None:
        out = self._out
        if out is not None:
            out.write(f"{time.monotonic_ns()} {step} {topic} {partition} {offset} {peer}\n")

    def stop(self) -> None:
        self.on = False
        if self._out is not None:
            self._out.close()
            self._out = None


HOPS = HopTrace()
