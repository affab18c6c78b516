"""Shared fixtures. The compiled core is required: an ImportError here fails the whole run."""
from __future__ import annotations

import pytest

from kbroker._core import appender as _appender

BACKENDS = ["io_uring", "pwritev"]


@pytest.fixture(params=BACKENDS)
def appender(request: pytest.FixtureRequest):
    """Each storage test runs once per appender backend."""
    if request.param == "io_uring" and not _appender.io_uring_available():
        pytest.skip("io_uring cannot be set up on this kernel; the pwritev run covers the fallback")
    with _appender.open_appender(request.param) as app:
        assert app.backend == request.param
        yield app
