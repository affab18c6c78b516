"""Shared fixtures, and the two tiers. The compiled core is required: an ImportError here fails the whole run.

Tiers: a test that runs anything outside the pytest process (a real ZooKeeper, a broker process, the command line,
Spark, the chaos minute) is marked ``slow`` here, from what it uses: the ZooKeeper and Spark fixtures, or a fixture
or test module that reaches the process harness (bench/harness/broker_process.py, kazoo_bridge/local_server.py)
through its imports. So a new test lands in its tier by what it asks for. `make check` runs ``pytest --fast``: the
rest, and there a ZooKeeper or broker process started anyway fails the test, naming the marker. `make test` runs both
tiers.
"""
from __future__ import annotations

import os
import sys
import types
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from kbroker._core import appender as _appender

if TYPE_CHECKING:
    from kazoo_bridge.local_server import ZooKeeperServer

# KBROKER_APPENDER forces one backend for every log dir of a broker (kbroker.log.appenders), and the storage tests
# then run on that one only (`make test-io-uring`)
_FORCED = os.environ.get("KBROKER_APPENDER", "").strip().lower()
BACKENDS = [_FORCED] if _FORCED in ("io_uring", "pwritev") else ["io_uring", "pwritev"]


@pytest.fixture(params=BACKENDS)
def appender(request: pytest.FixtureRequest):
    """Each storage test runs once per appender backend (the forced one only, under KBROKER_APPENDER)."""
    if request.param == "io_uring" and not _appender.io_uring_available():
        pytest.skip("io_uring cannot be set up on this kernel; the pwritev run covers the fallback")
    with _appender.open_appender(request.param) as app:
        assert app.backend == request.param
        yield app


@pytest.fixture(scope="session")
def zookeeper_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """One real ZooKeeper (Debian's, on a free loopback port) for the session; tests take a chroot each."""
    # imported here, not above: this module's fixtures would otherwise all count as starting processes (see below)
    from kazoo_bridge.local_server import ZooKeeperServer, ZooKeeperUnavailable

    try:
        server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"))
    except ZooKeeperUnavailable as exc:
        pytest.fail(f"these tests need a real ZooKeeper: {exc}", pytrace=False)
    server.start()
    yield server
    server.stop()


# The slow tier: these fixtures start a ZooKeeper or Spark, and a module (a test module, or one defining a fixture a
# test uses) that reaches one of HARNESS through its first-party imports starts broker processes, the CLI or ZooKeeper.
SLOW_FIXTURES = frozenset({"zookeeper_server", "private_zookeeper", "spark"})
HARNESS = ("bench.harness.broker_process", "kazoo_bridge.local_server", "bench.reliability.chaos", "pyspark")
FIRST_PARTY = ("tests", "bench")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--fast", action="store_true",
                     help="the fast tier (make check): leave out the tests marked slow, and fail any other test that "
                          "starts a ZooKeeper or a broker process")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("fast"):
        # Every ZooKeeper the tests start looks up java here and every broker process starts through launch. Patched
        # before the test modules are imported, so their `from ... import` gets the guard too.
        from bench.harness import broker_process
        from kazoo_bridge import local_server

        local_server.java_executable = _not_in_the_fast_tier
        broker_process.launch = _not_in_the_fast_tier


def _not_in_the_fast_tier(*args: object, **kwargs: object) -> str:
    pytest.fail("this test starts a ZooKeeper or a broker process but is not in the slow tier: take it from a fixture "
                "(tests/conftest.py tells which count) or mark it @pytest.mark.slow", pytrace=False)


_reaches: dict[str, bool] = {}


def _reaches_harness(name: str) -> bool:
    """Whether module ``name`` is, or imports (through first-party modules, transitively), one of HARNESS."""
    if any(name == h or name.startswith(h + ".") for h in HARNESS):
        return True
    if name.split(".")[0] not in FIRST_PARTY or name in _reaches:
        return _reaches.get(name, False)
    _reaches[name] = False  # an import cycle answers no while the walk is on it
    module = sys.modules.get(name)
    found = set()
    for value in vars(module).values() if module else ():
        found.add(value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", None))
    _reaches[name] = any(isinstance(n, str) and n != name and _reaches_harness(n) for n in found)
    return _reaches[name]


def _is_slow(item: pytest.Item) -> bool:
    names = getattr(item, "fixturenames", ())
    if SLOW_FIXTURES.intersection(names) or item.get_closest_marker("slow"):
        return True
    if _reaches_harness(getattr(getattr(item, "module", None), "__name__", "")):
        return True
    definitions = getattr(item, "_fixtureinfo", None)
    for name in names:
        for fixturedef in (definitions.name2fixturedefs.get(name, ()) if definitions else ()):
            if _reaches_harness(getattr(fixturedef.func, "__module__", "")):
                return True
    return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    fast, slow = [], []
    for item in items:
        if _is_slow(item):
            item.add_marker(pytest.mark.slow)
            slow.append(item)
        else:
            fast.append(item)
    if config.getoption("fast") and slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = fast
