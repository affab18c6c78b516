"""Kafka's ZooKeeper operations where only the embedded store can show them: ids made without a
store, and the embedded server's clock moving mtime on every commit. Everything else of
zk_compat.layout runs on every store in tests/store_contract/test_layout.py."""
from __future__ import annotations

import random

from zk_compat import layout


def test_new_ids_never_start_with_a_dash():
    rng = random.Random(0)
    assert all(not layout.new_base64_uuid(rng).startswith("-") for _ in range(2000))


def test_offset_commit_v0_moves_mtime_on_every_commit(store):
    """Burrow watches mtime: a commit of the same offset must still move it (the embedded
    server's clock ticks at every read, so the move is visible here; ZooKeeper's clock may not
    have moved within the millisecond)."""
    stat = layout.commit_consumer_offset(store, "app", "orders", 0, 1234)
    again = layout.commit_consumer_offset(store, "app", "orders", 0, 1234)
    assert again.mtime > stat.mtime and again.version == stat.version + 1
