"""A ``CrashBroker`` per test, killed whatever happens; its log is attached to a failure."""
from __future__ import annotations

import pytest

from .harness import CrashBroker

LOG_TAIL = 20000


@pytest.fixture
def crash_broker(request, tmp_path):
    broker = CrashBroker(tmp_path)
    request.node._crash_broker = broker
    try:
        yield broker
    finally:
        broker.kill()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    broker = getattr(item, "_crash_broker", None)
    if report.failed and broker is not None:
        report.sections.append((f"broker log ({broker.log_path})", broker.log()[-LOG_TAIL:]))
