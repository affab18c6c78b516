"""An in-process MetadataStore with ZooKeeper's semantics, persisted under a directory.

``EmbeddedServer`` is the database (ZooKeeper's DataTree plus its transaction log); each
``EmbeddedStore`` it hands out is one client session, the object the broker uses as its
``MetadataStore``. Several sessions may share a server (tests use that to play several brokers).

Semantics kept from ZooKeeper: per-node ``version`` / ``cversion`` / ``pzxid``, one zxid per
write transaction (a ``multi`` shares one), ephemeral nodes owned by a session and deleted when
it closes or expires, sequential names ``<prefix><10-digit parent cversion>``, parents must
exist, ephemeral nodes cannot have children, NotEmpty on deleting a node with children,
one-shot watches fired after the change, deduplicated per watcher and delivered in commit order
on each session's own event thread.

Persistence (``directory`` not None): a snapshot file plus an append-only journal, as ZooKeeper
does it. Every write transaction appends one checksummed record (its effects: create / delete /
set with resolved paths, zxid and time) to ``journal`` and, with ``fsync=True``, fdatasyncs it
before the call returns, so an acknowledged change survives a crash. When the journal passes
``snapshot_bytes`` the whole tree is written to ``snapshot.tmp``, fsynced and renamed over
``snapshot``, and the journal starts again. Opening loads the snapshot, replays journal records
newer than it (a torn last record, from a crash mid-append, is cut off with a warning), then
deletes every ephemeral node left over from the previous run in one transaction -- exactly what
ZooKeeper does when the old sessions expire -- so ephemerals never survive a restart while
sequence counters, versions and zxids carry on. A ``.lock`` file held with ``flock`` keeps a
second process (or a second server in this process) out.

Why a journal and not a snapshot per write: with ~30k znodes (1,000 topics x 10 partitions) a
snapshot is ~2 MB, and rewriting it on every partition-state or OffsetCommit-v0 update would cost
tens of milliseconds and that much write traffic per change; a journal record is a few hundred
bytes and one fdatasync (``tests/zk_compat/test_embedded_persistence.py`` has the numbers in a
comment).

One module: the data tree, its transaction log and the sessions share one lock and one commit order (a write
is applied, logged and its watches queued in one step); split, that lock would cross modules.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import io
import logging
import os
import struct
import threading
import zlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from zk_compat.clock import wall_ms
from zk_compat.paths import join, missing_parents, split, validate_path
from zk_compat.store import (
    ANY_VERSION,
    BadArgumentsError,
    ConnectionLossError,
    CreateOp,
    DeleteOp,
    EventType,
    MetadataStoreError,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    Op,
    OpResult,
    SessionExpiredError,
    SessionState,
    SetDataOp,
    Stat,
    StoreSession,
    WatchedEvent,
    Watcher,
    check_version,
    checked_op,
)

log = logging.getLogger(__name__)

METADATA_DIR_NAME = "__embedded_metadata"
DEFAULT_SNAPSHOT_BYTES = 16 << 20

_LOCK_FILE = ".lock"
_SNAPSHOT_FILE = "snapshot"
_JOURNAL_FILE = "journal"
_SNAPSHOT_MAGIC = b"KBZKSNAP"
_JOURNAL_MAGIC = b"KBZKJRNL"
_FORMAT_VERSION = 1


# ---------------------------------------------------------------------------------------------
# the tree

class _Node:
    __slots__ = ("data", "czxid", "mzxid", "pzxid", "ctime", "mtime", "version", "cversion",
                 "aversion", "ephemeral_owner", "children")

    def __init__(self, data: bytes | None, zxid: int, time_ms: int, ephemeral_owner: int) -> None:
        self.data = data
        self.czxid = self.mzxid = self.pzxid = zxid
        self.ctime = self.mtime = time_ms
        self.version = self.cversion = self.aversion = 0
        self.ephemeral_owner = ephemeral_owner
        self.children: set[str] = set()

    def stat(self) -> Stat:
        return Stat(self.czxid, self.mzxid, self.pzxid, self.ctime, self.mtime, self.version,
                    self.cversion, self.aversion, self.ephemeral_owner,
                    len(self.data) if self.data is not None else 0, len(self.children))


# journal effect kinds
_CREATE, _DELETE, _SET = 1, 2, 3


class _Txn:
    """One write transaction being applied: its zxid and time, the effects to journal, how
    to undo them, and the watch events to fire once it is committed."""

    def __init__(self, zxid: int, time_ms: int) -> None:
        self.zxid = zxid
        self.time_ms = time_ms
        self.effects: list[tuple[Any, ...]] = []
        self.undo: list[Callable[[], None]] = []
        self.events: list[tuple[EventType, str]] = []

    def rollback(self) -> None:
        for undo in reversed(self.undo):
            undo()


# ---------------------------------------------------------------------------------------------
# persistence

def _pack_bytes(value: bytes | None) -> bytes:
    if value is None:
        return struct.pack(">i", -1)
    return struct.pack(">i", len(value)) + value


def _pack_path(path: str) -> bytes:
    raw = path.encode("utf-8")
    return struct.pack(">I", len(raw)) + raw


class _Reader(io.BytesIO):
    """Reads the fields of a snapshot or journal record; ValueError when one runs past the end."""

    def take(self, n: int) -> bytes:
        out = self.read(n) if n >= 0 else b""
        if len(out) != n:
            raise ValueError("truncated")
        return out

    def unpack(self, fmt: str) -> tuple[Any, ...]:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))

    def path(self) -> str:
        """A znode path; ValueError for one the store could never have written (damage that the
        CRC did not catch must not enter the tree, where paths are trusted)."""
        (n,) = self.unpack(">I")
        path = self.take(n).decode("utf-8")
        validate_path(path)
        return path

    def data(self) -> bytes | None:
        (n,) = self.unpack(">i")
        return None if n == -1 else self.take(n)

    def at_end(self) -> bool:
        return self.tell() == len(self.getbuffer())


_SNAP_NODE = struct.Struct(">qqqqqiiiq")


def _encode_txn(txn: _Txn) -> bytes:
    parts = [struct.pack(">qqI", txn.zxid, txn.time_ms, len(txn.effects))]
    for effect in txn.effects:
        kind, path = effect[0], effect[1]
        parts.append(struct.pack(">B", kind) + _pack_path(path))
        if kind == _CREATE:
            parts.append(_pack_bytes(effect[2]) + struct.pack(">q", effect[3]))
        elif kind == _SET:
            parts.append(_pack_bytes(effect[2]))
    return b"".join(parts)


def _decode_txn(payload: bytes) -> tuple[int, int, list[tuple[Any, ...]]]:
    r = _Reader(payload)
    zxid, time_ms, count = r.unpack(">qqI")
    effects: list[tuple[Any, ...]] = []
    for _ in range(count):
        (kind,) = r.unpack(">B")
        path = r.path()
        if kind == _CREATE:
            data = r.data()
            (owner,) = r.unpack(">q")
            effects.append((kind, path, data, owner))
        elif kind == _DELETE:
            effects.append((kind, path))
        elif kind == _SET:
            effects.append((kind, path, r.data()))
        else:
            raise ValueError(f"unknown effect kind {kind}")
    if not r.at_end():
        raise ValueError("trailing bytes in journal record")
    return zxid, time_ms, effects


def _check_snapshot_tree(nodes: list[tuple[str, _Node]]) -> None:
    """A snapshot is a whole tree: the root, every node's parent, no child under an ephemeral
    node (loading deletes the ephemerals of the previous run, which must be leaves)."""
    by_path = dict(nodes)
    if "/" not in by_path or by_path["/"].ephemeral_owner:
        raise ValueError("no root znode, or an ephemeral one")
    for path, _ in nodes:
        if path != "/":
            parent = by_path.get(split(path)[0])
            if parent is None:
                raise ValueError(f"{path} has no parent")
            if parent.ephemeral_owner:
                raise ValueError(f"{path} is the child of an ephemeral znode")


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _Persistence:
    """The files under the metadata directory. Not thread-safe: the server calls it under its
    lock."""

    def __init__(self, directory: Path, *, fsync: bool) -> None:
        self.directory = directory
        self.fsync = fsync
        directory.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(directory / _LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            raise RuntimeError(f"embedded metadata store {directory} is in use by another broker "
                               f"process or server (its {_LOCK_FILE} is held)") from None
        self._journal_fd = -1
        self.journal_bytes = 0
        self.broken: OSError | None = None

    # -- loading

    def load_snapshot(self) -> tuple[int, list[tuple[str, _Node]]] | None:
        path = self.directory / _SNAPSHOT_FILE
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            if raw[:8] != _SNAPSHOT_MAGIC or len(raw) < 8 + 4 + 8 + 8 + 4:
                raise ValueError("bad magic")
            body, (crc,) = raw[8:-4], struct.unpack(">I", raw[-4:])
            if zlib.crc32(body) != crc:
                raise ValueError("checksum mismatch")
            r = _Reader(body)
            version, last_zxid, count = r.unpack(">Iqq")
            if version != _FORMAT_VERSION:
                raise ValueError(f"format version {version}")
            nodes = []
            for _ in range(count):
                node_path = r.path()
                data = r.data()
                (czxid, mzxid, pzxid, ctime, mtime, ver, cver, aver, owner) = r.unpack(_SNAP_NODE.format)
                node = _Node(data, czxid, ctime, owner)
                node.mzxid, node.pzxid, node.mtime = mzxid, pzxid, mtime
                node.version, node.cversion, node.aversion = ver, cver, aver
                nodes.append((node_path, node))
            if not r.at_end():
                raise ValueError("trailing bytes")
            _check_snapshot_tree(nodes)
        except (ValueError, UnicodeDecodeError, struct.error) as exc:
            raise RuntimeError(f"{path} is corrupt ({exc}); refusing to start with partial metadata. "
                               f"Restore it from a backup or move the directory away to start empty") from None
        return last_zxid, nodes

    def read_journal(self) -> list[tuple[int, int, list[tuple[Any, ...]]]]:
        """Parse the journal, cutting it at the first torn or corrupt record."""
        path = self.directory / _JOURNAL_FILE
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return []
        if raw[:8] != _JOURNAL_MAGIC or len(raw) < 12:
            raise RuntimeError(f"{path} is not a kbroker metadata journal")
        (version,) = struct.unpack(">I", raw[8:12])
        if version != _FORMAT_VERSION:
            raise RuntimeError(f"{path}: unsupported journal format version {version}")
        txns = []
        pos = 12
        while pos < len(raw):
            bad = None
            if pos + 8 > len(raw):
                bad = "truncated record header"
            else:
                length, crc = struct.unpack(">II", raw[pos:pos + 8])
                payload = raw[pos + 8:pos + 8 + length]
                if len(payload) < length:
                    bad = "truncated record"
                elif zlib.crc32(payload) != crc:
                    bad = "checksum mismatch"
                else:
                    try:
                        txns.append(_decode_txn(payload))
                    except (ValueError, UnicodeDecodeError, struct.error) as exc:
                        bad = f"undecodable record ({exc})"
            if bad is not None:
                log.warning("%s: %s at byte %d; discarding the last %d bytes (a write that was "
                            "never acknowledged, or damage)", path, bad, pos, len(raw) - pos)
                with open(path, "r+b") as f:
                    f.truncate(pos)
                    f.flush()
                    os.fsync(f.fileno())
                break
            pos += 8 + length
        return txns

    def open_journal(self) -> None:
        path = self.directory / _JOURNAL_FILE
        if not path.exists():
            self._write_fresh_journal()
        self._journal_fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        self.journal_bytes = os.fstat(self._journal_fd).st_size

    def _write_fresh_journal(self) -> None:
        tmp = self.directory / (_JOURNAL_FILE + ".tmp")
        with open(tmp, "wb") as f:
            f.write(_JOURNAL_MAGIC + struct.pack(">I", _FORMAT_VERSION))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.directory / _JOURNAL_FILE)
        _fsync_dir(self.directory)

    # -- writing

    def append(self, txn: _Txn) -> None:
        """Append one transaction durably; on failure the journal is left as it was."""
        if self.broken is not None:
            raise OSError(errno.EIO, f"metadata journal unusable after an earlier error: {self.broken}")
        payload = _encode_txn(txn)
        record = struct.pack(">II", len(payload), zlib.crc32(payload)) + payload
        start = self.journal_bytes
        try:
            view = memoryview(record)
            while view:
                written = os.write(self._journal_fd, view)
                view = view[written:]
            if self.fsync:
                os.fdatasync(self._journal_fd)
        except OSError as exc:
            try:
                os.ftruncate(self._journal_fd, start)
            except OSError:
                self.broken = exc
            raise
        self.journal_bytes = start + len(record)

    def write_snapshot(self, last_zxid: int, nodes: Sequence[tuple[str, _Node]]) -> None:
        parts = [struct.pack(">Iqq", _FORMAT_VERSION, last_zxid, len(nodes))]
        for node_path, n in nodes:
            parts.append(_pack_path(node_path) + _pack_bytes(n.data) + _SNAP_NODE.pack(
                n.czxid, n.mzxid, n.pzxid, n.ctime, n.mtime, n.version, n.cversion, n.aversion,
                n.ephemeral_owner))
        body = b"".join(parts)
        tmp = self.directory / (_SNAPSHOT_FILE + ".tmp")
        with open(tmp, "wb") as f:
            f.write(_SNAPSHOT_MAGIC + body + struct.pack(">I", zlib.crc32(body)))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.directory / _SNAPSHOT_FILE)
        _fsync_dir(self.directory)
        # Records up to last_zxid are now in the snapshot. A crash before the fresh journal
        # replaces the old one is harmless: replay skips records the snapshot already holds.
        if self._journal_fd >= 0:
            os.close(self._journal_fd)
            self._journal_fd = -1
        self._write_fresh_journal()
        self.open_journal()

    def close(self) -> None:
        if self._journal_fd >= 0:
            os.close(self._journal_fd)
            self._journal_fd = -1
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = -1


# ---------------------------------------------------------------------------------------------
# the server

class EmbeddedServer:
    """The in-process ZooKeeper database; ``connect()`` opens a session on it.

    ``directory`` None keeps everything in memory (tests). ``fsync`` False skips fdatasync
    (tests on slow disks; not for real use). ``clock_ms`` supplies ctime/mtime.
    """

    def __init__(self, directory: str | os.PathLike[str] | None = None, *, fsync: bool = True,
                 snapshot_bytes: int = DEFAULT_SNAPSHOT_BYTES,
                 clock_ms: Callable[[], int] = wall_ms) -> None:
        self._lock = threading.RLock()
        self._clock_ms = clock_ms
        self._snapshot_bytes = snapshot_bytes
        self._nodes: dict[str, _Node] = {}
        self._ephemerals: dict[int, set[str]] = {}
        self._sessions: dict[int, EmbeddedStore] = {}
        self._data_watches: dict[str, dict[EmbeddedStore, dict[Watcher, None]]] = {}
        self._child_watches: dict[str, dict[EmbeddedStore, dict[Watcher, None]]] = {}
        self._zxid = 0
        self._closed = False
        self._next_session_id = ((clock_ms() << 24) & 0xFFFFFFFFFFFFFFFF) >> 8
        self._persistence: _Persistence | None = None
        self.directory = Path(directory) if directory is not None else None

        root = _Node(None, 0, 0, 0)
        self._nodes["/"] = root
        for path in ("/zookeeper", "/zookeeper/quota"):  # present on every real ensemble
            self._nodes[path] = _Node(None, 0, 0, 0)
            parent, name = split(path)
            self._nodes[parent].children.add(name)

        if self.directory is not None:
            self._persistence = _Persistence(self.directory, fsync=fsync)
            try:
                self._load()
            except BaseException:
                self._persistence.close()
                raise

    @classmethod
    def in_log_dir(cls, log_dir: str | os.PathLike[str], **kwargs: Any) -> EmbeddedServer:
        """The broker's store: ``<first log dir>/__embedded_metadata`` (the log manager skips
        it: the name is not a ``<topic>-<partition>`` directory)."""
        return cls(Path(log_dir) / METADATA_DIR_NAME, **kwargs)

    def __enter__(self) -> EmbeddedServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- lifecycle

    def _load(self) -> None:
        assert self._persistence is not None
        snapshot = self._persistence.load_snapshot()
        if snapshot is not None:
            self._zxid, nodes = snapshot
            self._nodes = dict(nodes)
            for path, node in nodes:
                if path != "/":
                    parent, name = split(path)
                    self._nodes[parent].children.add(name)
                if node.ephemeral_owner:
                    self._ephemerals.setdefault(node.ephemeral_owner, set()).add(path)
        replayed = 0
        for zxid, time_ms, effects in self._persistence.read_journal():
            if zxid <= self._zxid:
                continue  # already in the snapshot
            txn = _Txn(zxid, time_ms)
            try:
                for effect in effects:
                    if effect[0] == _CREATE:
                        self._apply_create(txn, effect[1], effect[2], effect[3], sequence=False)
                    elif effect[0] == _DELETE:
                        self._apply_delete(txn, effect[1], ANY_VERSION)
                    else:
                        self._apply_set(txn, effect[1], effect[2], ANY_VERSION)
            except MetadataStoreError as exc:
                raise RuntimeError(f"{self.directory}: journal record zxid {zxid:#x} does not apply "
                                   f"to the snapshot ({exc}); the metadata directory is damaged") from None
            self._zxid = zxid
            replayed += 1
        self._persistence.open_journal()
        leftovers = sorted((p for paths in self._ephemerals.values() for p in paths), reverse=True)
        self._delete_all(leftovers)
        self._ephemerals.clear()
        log.info("embedded metadata store %s: %d znodes at zxid %#x (%d journal records replayed, "
                 "%d ephemeral znodes of the previous run removed)", self.directory,
                 len(self._nodes), self._zxid, replayed, len(leftovers))

    def connect(self) -> EmbeddedStore:
        """Open a new session."""
        with self._lock:
            self._check_open()
            return EmbeddedStore(self, self._new_session_id())

    def _new_session_id(self) -> int:
        self._next_session_id += 1
        return self._next_session_id

    def snapshot(self) -> None:
        """Write the whole tree to the snapshot file now and start a fresh journal."""
        with self._lock:
            self._check_open()
            if self._persistence is not None:
                self._persistence.write_snapshot(self._zxid, sorted(self._nodes.items()))

    def close(self) -> None:
        """Close every session (deleting their ephemeral nodes) and release the directory."""
        with self._lock:
            if self._closed:
                return
            sessions = list(self._sessions.values())
        for session in sessions:
            session.close()
        with self._lock:
            self._closed = True
            if self._persistence is not None:
                self._persistence.close()

    @property
    def last_zxid(self) -> int:
        with self._lock:
            return self._zxid

    def _check_open(self) -> None:
        if self._closed:
            raise SessionExpiredError("the embedded metadata server is closed")

    # -- transactions (lock held by the caller)

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[_Txn]:
        """One write transaction: the effects the body applies are undone if it raises, and
        committed (made durable, watches fired) if it returns."""
        txn = _Txn(self._zxid + 1, self._clock_ms())
        try:
            yield txn
        except BaseException:
            txn.rollback()
            raise
        self._commit(txn)

    def _commit(self, txn: _Txn) -> None:
        """Make an applied transaction durable and fire its watches."""
        if not txn.effects:
            return  # checks only: nothing changed, no zxid used
        if self._persistence is not None:
            try:
                self._persistence.append(txn)
            except OSError:
                txn.rollback()
                raise
        self._zxid = txn.zxid
        for event_type, path in txn.events:
            self._trigger(event_type, path)
        if self._persistence is not None and self._persistence.journal_bytes > self._snapshot_bytes:
            self._persistence.write_snapshot(self._zxid, sorted(self._nodes.items()))

    def _delete_all(self, paths: Sequence[str]) -> None:
        """Delete ``paths`` (children before their parents) in one transaction, as ZooKeeper
        deletes the ephemeral nodes of a session that ends."""
        if paths:
            with self._transaction() as txn:
                for path in paths:
                    self._apply_delete(txn, path, ANY_VERSION)

    # -- watches

    def _trigger(self, event_type: EventType, path: str) -> None:
        tables = [self._data_watches]
        if event_type is EventType.DELETED:
            tables.append(self._child_watches)
        elif event_type is EventType.CHILD:
            tables = [self._child_watches]
        per_session: dict[EmbeddedStore, dict[Watcher, None]] = {}
        for table in tables:
            for session, watchers in table.pop(path, {}).items():
                per_session.setdefault(session, {}).update(watchers)
        event = WatchedEvent(event_type, path)
        for session, watchers in per_session.items():
            for watcher in watchers:
                session._events.put(watcher, event)

    def _add_watch(self, table: dict[str, dict[EmbeddedStore, dict[Watcher, None]]], path: str,
                   session: EmbeddedStore, watcher: Watcher | None) -> None:
        if watcher is not None:
            table.setdefault(path, {}).setdefault(session, {})[watcher] = None

    def _drop_watches(self, session: EmbeddedStore) -> None:
        for table in (self._data_watches, self._child_watches):
            for path in list(table):
                table[path].pop(session, None)
                if not table[path]:
                    del table[path]

    # -- the three effects; each records its undo and its events

    def _existing(self, path: str, version: int = ANY_VERSION) -> _Node:
        """The node at ``path``, which must exist (and be at ``version``, unless ANY_VERSION)."""
        node = self._nodes.get(path)
        if node is None:
            raise NoNodeError(f"{path} does not exist", path=path)
        check_version(path, node.version, version)
        return node

    def _apply_create(self, txn: _Txn, path: str, value: bytes | None, owner: int, *, sequence: bool) -> str:
        parent_path, name = split(path)
        parent = self._nodes.get(parent_path)
        if parent is None:
            raise NoNodeError(f"parent {parent_path} of {path} does not exist", path=path)
        if parent.ephemeral_owner:
            raise NoChildrenForEphemeralsError(f"{parent_path} is ephemeral and cannot have children", path=path)
        if sequence:
            # ZooKeeper's suffix counts the creates under the parent, deletions not included;
            # the cversion it reports is 2 * creates - children (DataNode.copyStat), ours too.
            path = f"{path}{(parent.cversion + len(parent.children)) // 2:010d}"
            name = path.rsplit("/", 1)[1]
        if path in self._nodes:
            raise NodeExistsError(f"{path} already exists", path=path)
        old_cversion, old_pzxid = parent.cversion, parent.pzxid
        self._nodes[path] = _Node(value, txn.zxid, txn.time_ms, owner)
        parent.children.add(name)
        parent.cversion += 1
        parent.pzxid = txn.zxid
        if owner:
            self._ephemerals.setdefault(owner, set()).add(path)

        def undo() -> None:
            del self._nodes[path]
            parent.children.discard(name)
            parent.cversion, parent.pzxid = old_cversion, old_pzxid
            if owner:
                self._ephemerals[owner].discard(path)

        txn.undo.append(undo)
        txn.effects.append((_CREATE, path, value, owner))
        txn.events += [(EventType.CREATED, path), (EventType.CHILD, parent_path)]
        return path

    def _apply_delete(self, txn: _Txn, path: str, version: int) -> None:
        if path == "/":
            raise BadArgumentsError("the root znode cannot be deleted", path=path)
        node = self._existing(path, version)
        if node.children:
            raise NotEmptyError(f"{path} has {len(node.children)} children", path=path)
        parent_path, name = split(path)
        parent = self._nodes[parent_path]
        old_cversion, old_pzxid = parent.cversion, parent.pzxid
        del self._nodes[path]
        parent.children.discard(name)
        parent.cversion += 1
        parent.pzxid = txn.zxid
        owner = node.ephemeral_owner
        if owner:
            self._ephemerals[owner].discard(path)

        def undo() -> None:
            self._nodes[path] = node
            parent.children.add(name)
            parent.cversion, parent.pzxid = old_cversion, old_pzxid
            if owner:
                self._ephemerals[owner].add(path)

        txn.undo.append(undo)
        txn.effects.append((_DELETE, path))
        txn.events += [(EventType.DELETED, path), (EventType.CHILD, parent_path)]

    def _apply_set(self, txn: _Txn, path: str, value: bytes | None, version: int) -> Stat:
        node = self._existing(path, version)
        old = (node.data, node.version, node.mzxid, node.mtime)
        node.data = value
        node.version += 1
        node.mzxid = txn.zxid
        node.mtime = txn.time_ms

        def undo() -> None:
            node.data, node.version, node.mzxid, node.mtime = old

        txn.undo.append(undo)
        txn.effects.append((_SET, path, value))
        txn.events.append((EventType.CHANGED, path))
        return node.stat()

    # -- operations for sessions (lock held by the caller)

    def _apply_op(self, txn: _Txn, session: EmbeddedStore, op: Op) -> OpResult:
        op = checked_op(op)
        if isinstance(op, CreateOp):
            return self._apply_create(txn, op.path, op.value, session.session_id if op.ephemeral else 0,
                                      sequence=op.sequence)
        if isinstance(op, DeleteOp):
            self._apply_delete(txn, op.path, op.version)
        elif isinstance(op, SetDataOp):
            return self._apply_set(txn, op.path, op.value, op.version)
        else:  # CheckVersionOp
            self._existing(op.path, op.version)
        return True

    def _subtree(self, path: str) -> list[str]:
        """``path`` and every node below it, deepest first (the order to delete them in)."""
        subtree: list[str] = []
        stack = [path]
        while stack:
            p = stack.pop()
            subtree.append(p)
            stack.extend(join(p, child) for child in self._nodes[p].children)
        return sorted(subtree, key=lambda s: s.count("/"), reverse=True)

    def _end_session(self, session: EmbeddedStore) -> None:
        """Drop the session's watches and delete its ephemeral nodes in one transaction."""
        self._drop_watches(session)
        self._sessions.pop(session.session_id, None)
        self._delete_all(sorted(self._ephemerals.get(session.session_id, ()), reverse=True))
        self._ephemerals.pop(session.session_id, None)


# ---------------------------------------------------------------------------------------------
# a session

class EmbeddedStore(StoreSession):
    """One session on an EmbeddedServer; implements ``zk_compat.store.MetadataStore``."""

    def __init__(self, server: EmbeddedServer, session_id: int) -> None:
        super().__init__(session_id, f"zk-embedded-events-{session_id:#x}")
        self._server = server
        server._sessions[session_id] = self

    @contextlib.contextmanager
    def _locked(self) -> Iterator[EmbeddedServer]:
        """The server, locked, once this session and the server are known to be open."""
        server = self._server
        with server._lock:
            self._check_open()
            server._check_open()
            yield server

    @contextlib.contextmanager
    def _writing(self) -> Iterator[tuple[EmbeddedServer, _Txn]]:
        """A write transaction of this session (see ``EmbeddedServer._transaction``)."""
        with self._locked() as server, server._transaction() as txn:
            yield server, txn

    # -- reads

    def get(self, path: str, watch: Watcher | None = None) -> tuple[bytes | None, Stat]:
        validate_path(path)
        with self._locked() as server:
            node = server._existing(path)
            server._add_watch(server._data_watches, path, self, watch)
            return node.data, node.stat()

    def get_many(self, paths: Sequence[str], watch: Watcher | None = None) -> list[tuple[bytes | None, Stat] | None]:
        for path in paths:
            validate_path(path)
        with self._locked() as server:  # in memory: one lock for all of them, and nothing to pipeline
            out: list[tuple[bytes | None, Stat] | None] = []
            for path in paths:
                server._add_watch(server._data_watches, path, self, watch)
                node = server._nodes.get(path)
                out.append(None if node is None else (node.data, node.stat()))
            return out

    def exists(self, path: str, watch: Watcher | None = None) -> Stat | None:
        validate_path(path)
        with self._locked() as server:
            server._add_watch(server._data_watches, path, self, watch)
            node = server._nodes.get(path)
            return node.stat() if node is not None else None

    def get_children(self, path: str, watch: Watcher | None = None) -> list[str]:
        validate_path(path)
        with self._locked() as server:
            node = server._existing(path)
            server._add_watch(server._child_watches, path, self, watch)
            return sorted(node.children)

    # -- writes

    def create(self, path: str, value: bytes | None = None, *, ephemeral: bool = False,
               sequence: bool = False, makepath: bool = False) -> str:
        op = CreateOp(path, value, ephemeral, sequence)
        with self._writing() as (server, txn):
            if makepath:
                validate_path(path, sequence=True)
                for missing in missing_parents(path, server._nodes.__contains__):
                    server._apply_create(txn, missing, None, 0, sequence=False)
            created = server._apply_op(txn, self, op)
            assert isinstance(created, str)
            return created

    def set(self, path: str, value: bytes | None, version: int = ANY_VERSION) -> Stat:
        result = self._single(SetDataOp(path, value, version))
        assert isinstance(result, Stat)
        return result

    def delete(self, path: str, version: int = ANY_VERSION, recursive: bool = False) -> None:
        if not recursive:
            self._single(DeleteOp(path, version))
            return
        validate_path(path)
        with self._writing() as (server, txn):
            server._existing(path, version)
            for p in server._subtree(path):
                server._apply_delete(txn, p, ANY_VERSION)

    def _single(self, op: Op) -> OpResult:
        with self._writing() as (server, txn):
            return server._apply_op(txn, self, op)

    def multi_pipelined(self, batches: Sequence[Sequence[Op]]) -> list[list[OpResult] | MetadataStoreError]:
        outcomes: list[list[OpResult] | MetadataStoreError] = []
        for ops in batches:
            try:
                outcomes.append(self.multi(ops))
            except (ConnectionLossError, SessionExpiredError):
                raise
            except MetadataStoreError as exc:
                outcomes.append(exc)
        return outcomes

    def multi(self, ops: Sequence[Op]) -> list[OpResult]:
        ops = list(ops)
        with self._writing() as (server, txn):
            results: list[OpResult] = []
            for index, op in enumerate(ops):
                try:
                    results.append(server._apply_op(txn, self, op))
                except MetadataStoreError as exc:
                    exc.failing_multi(ops, index)
                    raise
            return results

    # -- session

    def _notify(self, state: SessionState) -> None:
        for listener in self._current_listeners():
            self._events.put(listener, state)

    def close(self) -> None:
        server = self._server
        with server._lock:
            if self._closed:
                return
            self._closed = True
            server._end_session(self)
        self._events.stop()

    def expire_session(self) -> None:
        """Test hook, like kazoo's harness: the session expires (ephemerals deleted, watches
        dropped, listeners told LOST), then a new session is established (CONNECTED)."""
        with self._locked() as server:
            server._end_session(self)
            self._session_id = server._new_session_id()
            server._sessions[self._session_id] = self
            self._notify(SessionState.LOST)
            self._notify(SessionState.CONNECTED)

    def lose_connection(self) -> None:
        """Test hook: the connection drops and comes back within the session timeout
        (SUSPENDED then CONNECTED; session, ephemerals and watches survive)."""
        self._check_open()
        self._server._check_open()
        self._notify(SessionState.SUSPENDED)
        self._notify(SessionState.CONNECTED)

    def drain_events(self, timeout: float = 5.0) -> bool:
        """Wait until every watch/state callback queued so far has run (for tests)."""
        return self._events.drain(timeout)
