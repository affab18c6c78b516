"""The embedded metadata store refuses damaged files it could never have written, even when their
CRCs match (found by bench.reliability.fuzz's journal target; each test fails on the old code):

* a journal record with a path that is not a valid znode path ('\\x0fbrokers') entered the tree
  under a key its parent could not find; now the record counts as damage and the journal is cut
  there, like a torn write;
* a snapshot without the root, with a node whose parent is missing (KeyError) or with a child of
  an ephemeral node (NotEmptyError when the previous run's ephemerals are deleted) is refused as
  corrupt, like a bad checksum.
"""
from __future__ import annotations

import struct
import zlib

import pytest

from zk_compat.embedded import EmbeddedServer

_NODE = struct.Struct(">qqqqqiiiq")


def _open(directory) -> EmbeddedServer:
    return EmbeddedServer(directory, fsync=False, clock_ms=lambda: 1_700_000_000_000)


def _path(path: str) -> bytes:
    raw = path.encode()
    return struct.pack(">I", len(raw)) + raw


def _snapshot(directory, nodes: list[tuple[str, int]]) -> None:
    """A snapshot file of (path, ephemeral owner) nodes with a correct checksum."""
    body = struct.pack(">Iqq", 1, 10, len(nodes)) + b"".join(
        _path(path) + struct.pack(">i", -1) + _NODE.pack(1, 1, 1, 0, 0, 0, 0, 0, owner) for path, owner in nodes)
    directory.mkdir(exist_ok=True)
    (directory / "snapshot").write_bytes(b"KBZKSNAP" + body + struct.pack(">I", zlib.crc32(body)))


def _journal_record(zxid: int, creates: list[str]) -> bytes:
    payload = struct.pack(">qqI", zxid, 0, len(creates)) + b"".join(
        b"\x01" + _path(path) + struct.pack(">i", -1) + struct.pack(">q", 0) for path in creates)
    return struct.pack(">II", len(payload), zlib.crc32(payload)) + payload


def test_a_journal_record_with_an_invalid_path_is_cut_like_damage(tmp_path):
    directory = tmp_path / "meta"
    directory.mkdir()
    (directory / "journal").write_bytes(b"KBZKJRNL" + struct.pack(">I", 1) + _journal_record(1, ["/a"])
                                        + _journal_record(2, ["\x0fbrokers"]) + _journal_record(3, ["/b"]))
    with _open(directory) as server:
        store = server.connect()
        assert sorted(store.get_children("/")) == ["a", "zookeeper"]
        assert server.last_zxid == 1
        store.delete("/a")  # the tree is whole: every listed child exists


@pytest.mark.parametrize("nodes", [
    [("/a", 0)],                           # no root
    [("/", 0), ("/a/b", 0)],               # no parent
    [("/", 0), ("/e", 7), ("/e/c", 0)],    # a child under an ephemeral node
    [("/", 7)],                            # an ephemeral root
    [("/", 0), ("zookeeper", 0)],          # not a path
], ids=["no-root", "orphan", "ephemeral-parent", "ephemeral-root", "relative-path"])
def test_a_snapshot_that_is_not_a_tree_is_refused_as_corrupt(tmp_path, nodes):
    directory = tmp_path / "meta"
    _snapshot(directory, nodes)
    with pytest.raises(RuntimeError, match="is corrupt"):
        _open(directory)


def test_a_whole_snapshot_still_loads(tmp_path):
    directory = tmp_path / "meta"
    _snapshot(directory, [("/", 0), ("/zookeeper", 0), ("/a", 0), ("/a/e", 7)])
    with _open(directory) as server:
        assert sorted(server.connect().get_children("/a")) == []  # the previous run's ephemeral is gone
