"""Durability of the embedded store: what survives a reopen, torn journal tails, snapshots,
the directory lock.

Measured on this project's dev VM (virtio disk, ext4) with 22,000 znodes (1,000 topics x 10
partitions): a journaled partition-state write takes 0.33 ms median (one fdatasync), a snapshot
of the whole tree (3.0 MB) 71 ms, reopening (snapshot load) 180 ms. Rewriting the snapshot on
every change would cost those 71 ms and 3 MB of writes per OffsetCommit v0 or ISR change,
hence the journal with occasional snapshots.
"""
from __future__ import annotations

import logging
import os

import pytest

from tests.zk_compat.clock import FakeClock
from zk_compat.embedded import METADATA_DIR_NAME, EmbeddedServer
from zk_compat.store import EventType, NoNodeError, SessionExpiredError


def reopen(directory, **kwargs) -> EmbeddedServer:
    return EmbeddedServer(directory, clock_ms=FakeClock(1_700_000_000_000), **kwargs)


def test_persistent_nodes_survive_and_ephemeral_nodes_do_not(tmp_path):
    directory = tmp_path / "meta"
    with reopen(directory) as server:
        store = server.connect()
        store.create("/brokers/ids", makepath=True)
        store.create("/brokers/ids/1", b"me", ephemeral=True)
        store.create("/controller", b"c", ephemeral=True)
        store.create("/cluster/id", b'{"version":"1","id":"x"}', makepath=True)
        store.set("/cluster/id", b'{"version":"1","id":"y"}')
        store.create("/null")
        store.create("/empty", b"")
        before = {p: store.get(p) for p in ("/cluster/id", "/null", "/empty")}
        ids_before = store.exists("/brokers/ids")
        last = server.last_zxid
    with reopen(directory) as server:
        store = server.connect()
        for path, (data, stat) in before.items():
            assert store.get(path) == (data, stat)
        assert store.exists("/brokers/ids/1") is None and store.exists("/controller") is None
        ids_after = store.exists("/brokers/ids")
        # the leftover ephemeral was deleted by a transaction, as an expired session's would be
        assert ids_after.cversion == ids_before.cversion + 1 and ids_after.num_children == 0
        assert server.last_zxid == last + 1
        assert store.create("/after") and store.exists("/after").czxid == last + 2


def test_sequence_counters_and_versions_carry_on_after_reopen(tmp_path):
    directory = tmp_path / "meta"
    with reopen(directory) as server:
        store = server.connect()
        store.create("/config/changes", makepath=True)
        for _ in range(3):
            store.create("/config/changes/config_change_", sequence=True)
        store.create("/e", b"0")
        for i in range(5):
            store.set("/e", str(i).encode())
    with reopen(directory) as server:
        store = server.connect()
        assert store.create("/config/changes/config_change_", sequence=True) == \
            "/config/changes/config_change_0000000003"
        assert store.set("/e", b"x", version=5).version == 6


def test_state_survives_snapshots(tmp_path):
    directory = tmp_path / "meta"
    with reopen(directory, snapshot_bytes=2048) as server:  # snapshot every few writes
        store = server.connect()
        for i in range(100):
            store.create(f"/t/n{i}", str(i).encode(), makepath=True)
        for i in range(0, 100, 3):
            store.delete(f"/t/n{i}")
        expected = {c: store.get(f"/t/{c}") for c in store.get_children("/t")}
        assert os.path.exists(directory / "snapshot")
        assert os.path.getsize(directory / "journal") < 4096
    with reopen(directory) as server:
        store = server.connect()
        assert {c: store.get(f"/t/{c}") for c in store.get_children("/t")} == expected


def test_explicit_snapshot_then_reopen(tmp_path):
    directory = tmp_path / "meta"
    with reopen(directory) as server:
        store = server.connect()
        store.create("/a", b"1")
        server.snapshot()
        store.set("/a", b"2")  # in the fresh journal
    with reopen(directory) as server:
        assert server.connect().get("/a")[0] == b"2"


def test_crash_between_snapshot_and_journal_reset_replays_nothing_twice(tmp_path):
    directory = tmp_path / "meta"
    with reopen(directory) as server:
        store = server.connect()
        store.create("/a", b"1")
        store.set("/a", b"2")
        old_journal = (directory / "journal").read_bytes()
        server.snapshot()
    (directory / "journal").write_bytes(old_journal)  # as if we crashed right after the rename
    with reopen(directory) as server:
        data, stat = server.connect().get("/a")
        assert data == b"2" and stat.version == 1


def _tear_off_the_tail(raw: bytes) -> bytes:
    return raw[:-3]  # the last record lost its tail in a crash


def _flip_the_last_byte(raw: bytes) -> bytes:
    return raw[:-1] + bytes([raw[-1] ^ 0xFF])  # a damaged disk block


@pytest.mark.parametrize("damage", [_tear_off_the_tail, _flip_the_last_byte], ids=["torn", "corrupt"])
def test_a_bad_last_journal_record_is_cut_off_and_replay_stops_there(tmp_path, caplog, damage):
    directory = tmp_path / "meta"
    with reopen(directory) as server:
        store = server.connect()
        store.create("/a", b"1")
        size_after_first = os.path.getsize(directory / "journal")
        store.create("/b", b"2")
    journal = directory / "journal"
    journal.write_bytes(damage(journal.read_bytes()))
    with caplog.at_level(logging.WARNING, logger="zk_compat.embedded"):
        with reopen(directory) as server:
            store = server.connect()
            assert store.get("/a")[0] == b"1"
            assert store.exists("/b") is None
            store.create("/c", b"3")
    assert "discarding the last" in caplog.text
    assert os.path.getsize(journal) > size_after_first
    with reopen(directory) as server:
        assert server.connect().get("/c")[0] == b"3"


def test_corrupt_snapshot_refuses_to_start(tmp_path):
    directory = tmp_path / "meta"
    with reopen(directory) as server:
        server.connect().create("/a", b"1")
        server.snapshot()
    snapshot = directory / "snapshot"
    raw = bytearray(snapshot.read_bytes())
    raw[20] ^= 0x01
    snapshot.write_bytes(bytes(raw))
    with pytest.raises(RuntimeError, match="snapshot is corrupt"):
        reopen(directory)


def test_one_owner_per_directory(tmp_path):
    directory = tmp_path / "meta"
    server = reopen(directory)
    with pytest.raises(RuntimeError, match="in use"):
        reopen(directory)
    server.close()
    reopen(directory).close()


def test_in_log_dir_uses_the_embedded_metadata_directory(tmp_path):
    with EmbeddedServer.in_log_dir(tmp_path) as server:
        assert server.directory == tmp_path / METADATA_DIR_NAME
        server.connect().create("/x")
    assert (tmp_path / METADATA_DIR_NAME / "journal").exists()


def test_failed_journal_write_rolls_back_and_fires_nothing(tmp_path):
    directory = tmp_path / "meta"
    with reopen(directory) as server:
        store = server.connect()
        store.create("/a", b"1")
        fired = []
        store.get("/a", watch=fired.append)
        persistence = server._persistence

        def failing_append(txn):
            raise OSError(28, "No space left on device")

        real_append = persistence.append
        persistence.append = failing_append
        with pytest.raises(OSError):
            store.set("/a", b"2")
        with pytest.raises(OSError):
            store.create("/b")
        persistence.append = real_append
        store.drain_events()
        assert store.get("/a")[0] == b"1" and store.exists("/a").version == 0
        assert store.exists("/b") is None and fired == []
        store.set("/a", b"3")
        store.drain_events()
        assert [e.type for e in fired] == [EventType.CHANGED]
    with reopen(directory) as server:
        assert server.connect().get("/a")[0] == b"3"


def test_closed_server_refuses_operations(tmp_path):
    server = reopen(tmp_path / "meta")
    store = server.connect()
    server.close()
    with pytest.raises(SessionExpiredError):
        store.get("/")
    with reopen(tmp_path / "meta") as again, pytest.raises(NoNodeError):
        again.connect().get("/nothing")
