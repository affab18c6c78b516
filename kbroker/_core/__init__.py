"""The native core of kbroker: one compiled extension per concern.

``appender``   sequential segment writes (io_uring, pwritev fallback)
``index``      Kafka's sparse offset (.index) and time (.timeindex) indexes
``records``    record batch v2 validation and in-place offset assignment
``timewheel``  hierarchical timing wheel for delayed operations
``sendfile``   zero-copy segment-range transfer to sockets

There is deliberately no pure-Python twin: an ImportError here means the
extensions were not built (run ``make build``).
"""

import importlib as _importlib
import sys as _sys
import time as _time


def _import_liburing(attempts: int = 20) -> None:
    """Import python-liburing once, retrying its own race: its package ``__init__`` (dynamic_import's importer)
    removes and rewrites a cache file under ``liburing/__pycache__`` on every import, so two processes importing it
    at the same moment (host mode's brokers, the log cleaner's child processes) can fail with FileNotFoundError.
    The extensions below cimport liburing, which then finds it imported."""
    for attempt in range(attempts):
        try:
            _importlib.import_module("liburing")
            return
        except (FileNotFoundError, EOFError):
            for name in [n for n in _sys.modules if n == "liburing" or n.startswith("liburing.")]:
                del _sys.modules[name]
            if attempt == attempts - 1:
                raise
            _time.sleep(0.01 * (attempt + 1))


_import_liburing()
