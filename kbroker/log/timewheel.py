"""Kafka's hierarchical timing wheel (``kbroker._core.timewheel``, typed in its ``.pyi``), for ``kbroker.timers``:
only the log and the network import the compiled core (the ``core_face`` import contract), and the log is the
lowest layer every user of the timers sits above."""
from __future__ import annotations

from kbroker._core.timewheel import TimingWheel as TimingWheel
