"""What only the embedded store shows: its zxid counter and its clock. Everything both stores
do alike is in tests/store_contract/test_store.py, which runs on the embedded store too.

The ``server`` fixture is in memory and journaled (conftest.py), with a clock that moves on by
a millisecond at every read."""
from __future__ import annotations

import pytest

from tests.store_contract.backends import Recorder
from zk_compat.store import CreateOp, NodeExistsError


def test_multi_failure_fires_no_watch_and_uses_no_zxid(server, store):
    # (a real ZooKeeper logs a failed multi as an error transaction, which takes a zxid)
    store.create("/a")
    seen = Recorder()
    store.exists("/b", watch=seen)
    zxid = server.last_zxid
    with pytest.raises(NodeExistsError):
        store.multi([CreateOp("/b"), CreateOp("/a")])
    store.drain_events()
    assert seen.events == [] and server.last_zxid == zxid
    store.create("/c")
    assert store.exists("/c").czxid == zxid + 1


def test_every_write_takes_its_time_from_the_servers_clock(store):
    store.create("/a", b"1")
    _, before = store.get("/a")
    stat = store.set("/a", b"2")
    assert stat.mtime > before.mtime and stat.ctime == before.ctime == before.mtime
