"""The metadata store the broker codes against: ZooKeeper's data model, as a typing.Protocol.

Two implementations provide it: ``zk_compat.embedded`` (in-process, persisted under a log dir)
and ``kazoo_bridge`` (a real ZooKeeper ensemble through kazoo). Names and semantics follow
ZooKeeper and kazoo so the bridge is a thin translation:

* ``create(path, value, ephemeral=, sequence=, makepath=)`` returns the created path (with the
  10-digit sequence suffix when ``sequence``). Parents must exist unless ``makepath``; missing
  parents are then created persistent with null data.
* Data is ``bytes`` or ``None`` (ZooKeeper distinguishes null data, which Kafka writes for
  container nodes, from an empty array).
* Versions are compare-and-set tokens: ``-1`` matches any version.
* Watches are one-shot and fire *after* the change, on the store's event thread, once per
  watcher per event even if the same callable was registered several times (ZooKeeper
  deduplicates watchers the same way). ``exists`` on a missing node sets a watch that fires
  CREATED. A failed ``get``/``get_children`` (NoNode) sets no watch. Watches are dropped when
  the session is lost; ``DataWatch``/``ChildrenWatch`` below re-arm themselves and re-read after
  a new session, which is what long-lived watchers should use.
* ``multi`` is atomic: all operations apply with one zxid or none does. On failure it raises
  the failing operation's error, whose ``results`` holds one entry per operation (the error
  itself at ``failed_op_index``, ``RolledBackError`` for the others), like ZooKeeper's multi.
* Every method is synchronous and may be called from any thread. Watch and session-state
  callbacks run one at a time on the store's event thread and must not block there for long
  (kazoo's rule); hand long work to another thread or loop with ``call_soon_threadsafe``.

Errors are this module's exceptions only: the bridge translates kazoo's, so callers cannot tell
the implementations apart.
"""
from __future__ import annotations

import enum
import logging
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, Self, runtime_checkable

from zk_compat.paths import check_value, validate_path

log = logging.getLogger(__name__)

ANY_VERSION = -1


# ---------------------------------------------------------------------------------------------
# errors (ZooKeeper's KeeperException codes in ``code``)

class MetadataStoreError(Exception):
    """Base of every metadata-store error. A subclass names ZooKeeper's code in its class line
    (``class X(MetadataStoreError, code=-101)``); without one it inherits its parent's."""

    code = -1

    def __init_subclass__(cls, *, code: int | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if code is not None:
            cls.code = code

    def __init__(self, message: str = "", *, path: str | None = None) -> None:
        super().__init__(message or (f"{type(self).__name__}: {path}" if path else type(self).__name__))
        self.path = path
        #: for an error raised by ``multi``: the per-operation results and which one failed
        self.results: list[object] | None = None
        self.failed_op_index: int | None = None

    def failing_multi(self, ops: Sequence[Op], index: int) -> MetadataStoreError:
        """Make this the error of operation ``index`` of a failed ``multi`` of ``ops``: its
        ``results`` get one entry per operation, RolledBackError for every other one, and this
        error itself at ``failed_op_index``. Returns self."""
        self.failed_op_index = index
        self.results = [RolledBackError(path=getattr(op, "path", None)) for op in ops]
        self.results[index] = self
        return self


class RuntimeInconsistencyError(MetadataStoreError, code=-2):
    """ZooKeeper's code for the operations after the failing one of a multi."""


class RolledBackError(RuntimeInconsistencyError):
    """Result of an operation of a failed ``multi`` that was not the failing one."""


class ConnectionLossError(MetadataStoreError, code=-4):
    """The connection dropped; the operation may or may not have been applied. Retriable."""


class BadArgumentsError(MetadataStoreError, code=-8):
    """A request ZooKeeper refuses as such (deleting the root)."""


class NoNodeError(MetadataStoreError, code=-101):
    """The node (for a create: its parent) does not exist."""


class BadVersionError(MetadataStoreError, code=-103):
    """The node is not at the version the operation expects."""


class NoChildrenForEphemeralsError(MetadataStoreError, code=-108):
    """A create below an ephemeral node."""


class NodeExistsError(MetadataStoreError, code=-110):
    """A create of a node that exists."""


class NotEmptyError(MetadataStoreError, code=-111):
    """A (non-recursive) delete of a node that has children."""


class SessionExpiredError(MetadataStoreError, code=-112):
    """The session is gone: its ephemeral nodes and watches are lost."""


def check_version(path: str, actual: int, expected: int) -> None:
    """BadVersionError unless ``expected`` is ANY_VERSION or the node's ``actual`` version."""
    if expected != ANY_VERSION and expected != actual:
        raise BadVersionError(f"{path} is at version {actual}, not {expected}", path=path)


# ---------------------------------------------------------------------------------------------
# values

@dataclass(frozen=True)
class Stat:
    """ZooKeeper's Stat. Times are milliseconds since the epoch; ``ephemeral_owner`` is the
    owning session id, 0 for a persistent node. ``czxid`` of ``/brokers/ids/<id>`` is Kafka's
    broker epoch."""

    czxid: int
    mzxid: int
    pzxid: int
    ctime: int
    mtime: int
    version: int
    cversion: int
    aversion: int
    ephemeral_owner: int
    data_length: int
    num_children: int


class EventType(enum.Enum):
    CREATED = "CREATED"
    DELETED = "DELETED"
    CHANGED = "CHANGED"
    CHILD = "CHILD"


@dataclass(frozen=True)
class WatchedEvent:
    type: EventType
    path: str


class SessionState(enum.Enum):
    """kazoo's KazooState. SUSPENDED: connection lost, session may survive (ephemeral nodes and
    the controller role are in doubt). LOST: session expired; ephemerals are gone and must be
    re-created, watches must be re-set. CONNECTED: (re)connected, possibly with a new session."""

    CONNECTED = "CONNECTED"
    SUSPENDED = "SUSPENDED"
    LOST = "LOST"


Watcher = Callable[[WatchedEvent], object]
StateListener = Callable[[SessionState], object]


# multi operations (kazoo's transaction vocabulary)

@dataclass(frozen=True)
class CreateOp:
    path: str
    value: bytes | None = None
    ephemeral: bool = False
    sequence: bool = False


@dataclass(frozen=True)
class DeleteOp:
    path: str
    version: int = ANY_VERSION


@dataclass(frozen=True)
class SetDataOp:
    path: str
    value: bytes | None
    version: int = ANY_VERSION


@dataclass(frozen=True)
class CheckVersionOp:
    path: str
    version: int


Op = CreateOp | DeleteOp | SetDataOp | CheckVersionOp
# Per-operation results of a successful multi: CreateOp -> created path, SetDataOp -> Stat,
# DeleteOp and CheckVersionOp -> True.
OpResult = str | Stat | bool


def checked_op(op: Op) -> Op:
    """An operation checked as both stores check it before applying or sending it: the path
    (a sequential create's may end with '/'), the data (returned as ``bytes``), and the root,
    which exists (create: NodeExistsError) and cannot be deleted (BadArgumentsError)."""
    if isinstance(op, CreateOp):
        validate_path(op.path, sequence=op.sequence)
        if op.path == "/":
            raise NodeExistsError("/ already exists", path="/")
        return replace(op, value=check_value(op.value))
    if isinstance(op, SetDataOp):
        validate_path(op.path)
        return replace(op, value=check_value(op.value))
    if isinstance(op, DeleteOp):
        validate_path(op.path)
        if op.path == "/":
            raise BadArgumentsError("the root znode cannot be deleted", path="/")
        return op
    if isinstance(op, CheckVersionOp):
        validate_path(op.path)
        return op
    raise TypeError(f"not a metadata store operation: {op!r}")


# ---------------------------------------------------------------------------------------------
# the protocol

@runtime_checkable
class MetadataStore(Protocol):
    @property
    def session_id(self) -> int:
        """The current session id (owner of this client's ephemeral nodes); it changes after
        the session is lost and a new one is established."""
        ...

    def create(self, path: str, value: bytes | None = None, *, ephemeral: bool = False,
               sequence: bool = False, makepath: bool = False) -> str:
        """Create a node; returns its actual path. Raises NodeExistsError, NoNodeError (parent
        missing and not ``makepath``), NoChildrenForEphemeralsError."""
        ...

    def get(self, path: str, watch: Watcher | None = None) -> tuple[bytes | None, Stat]:
        """Data and Stat. Raises NoNodeError (and sets no watch)."""
        ...

    def exists(self, path: str, watch: Watcher | None = None) -> Stat | None:
        """Stat or None; the watch fires on creation, change or deletion."""
        ...

    def get_many(self, paths: Sequence[str], watch: Watcher | None = None) -> list[tuple[bytes | None, Stat] | None]:
        """``get`` of every path with every request sent before any answer is awaited (Kafka's controller reads
        many znodes with pipelined asynchronous requests): each node's data and stat, or None where there is no
        such node; there ``watch`` (if given) is armed as ``exists`` arms it, so the node's creation fires it."""
        ...

    def get_children(self, path: str, watch: Watcher | None = None) -> list[str]:
        """Child names, sorted. Raises NoNodeError. The watch fires CHILD when a child is
        created or deleted, DELETED when the node itself goes."""
        ...

    def set(self, path: str, value: bytes | None, version: int = ANY_VERSION) -> Stat:
        """Replace the data if the version matches. Raises NoNodeError, BadVersionError."""
        ...

    def delete(self, path: str, version: int = ANY_VERSION, recursive: bool = False) -> None:
        """Delete a node (``version`` checks that node only). Raises NoNodeError,
        BadVersionError, NotEmptyError. ``recursive`` deletes the subtree first; over a real
        ZooKeeper that is not atomic."""
        ...

    def multi(self, ops: Sequence[Op]) -> list[OpResult]:
        """Apply all operations atomically or none (see the module doc for errors)."""
        ...

    def multi_pipelined(self, batches: Sequence[Sequence[Op]]) -> list[list[OpResult] | MetadataStoreError]:
        """Many independent multis sent at once and answered in order (what Kafka's controller does with its
        asynchronous requests): each is atomic on its own, and its outcome is its results or the error
        ``multi`` would raise (a connection loss raises for all)."""
        ...

    def add_listener(self, listener: StateListener) -> None:
        """Call ``listener(SessionState)`` on every session-state change (event thread)."""
        ...

    def remove_listener(self, listener: StateListener) -> None:
        ...

    def close(self) -> None:
        """End the session: its ephemeral nodes are deleted and its watches dropped."""
        ...


# ---------------------------------------------------------------------------------------------
# helpers written once over any MetadataStore

class Transaction:
    """kazoo-style builder over ``multi``::

        t = Transaction(store)
        t.check("/controller_epoch", epoch_zk_version)
        t.set_data(state_path, data, version)
        results = t.commit()
    """

    def __init__(self, store: MetadataStore) -> None:
        self._store = store
        self.ops: list[Op] = []

    def create(self, path: str, value: bytes | None = None, *, ephemeral: bool = False,
               sequence: bool = False) -> Transaction:
        self.ops.append(CreateOp(path, value, ephemeral, sequence))
        return self

    def delete(self, path: str, version: int = ANY_VERSION) -> Transaction:
        self.ops.append(DeleteOp(path, version))
        return self

    def set_data(self, path: str, value: bytes | None, version: int = ANY_VERSION) -> Transaction:
        self.ops.append(SetDataOp(path, value, version))
        return self

    def check(self, path: str, version: int) -> Transaction:
        self.ops.append(CheckVersionOp(path, version))
        return self

    def commit(self) -> list[OpResult]:
        return self._store.multi(self.ops)


class _Watch:
    """What DataWatch and ChildrenWatch share: call ``func`` with a fresh read now, after every
    watched event and after every new session, serialized, until it returns False or ``stop()``.
    Subclasses only say how to read (arming the watch) in ``_read``."""

    kind = "watch"

    def __init__(self, store: MetadataStore, path: str, func: Callable[..., object]) -> None:
        self._store = store
        self._path = path
        self._func = func
        self._lock = threading.RLock()
        self._stopped = False
        store.add_listener(self._on_state)
        self._fetch(None)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
        self._store.remove_listener(self._on_state)

    @property
    def stopped(self) -> bool:
        return self._stopped

    def _on_event(self, event: WatchedEvent) -> None:
        self._fetch(event)

    def _on_state(self, state: SessionState) -> None:
        if state is SessionState.CONNECTED:
            self._fetch(None)

    def _read(self) -> tuple[Any, ...]:
        raise NotImplementedError

    def _fetch(self, event: WatchedEvent | None) -> None:
        with self._lock:
            if self._stopped:
                return
            try:
                state = self._read()
            except (ConnectionLossError, SessionExpiredError) as exc:
                log.debug("%s on %s: %s; re-reading on reconnect", self.kind, self._path, exc)
                return
            if self._func(*state, event) is False:
                self._stopped = True
        if self._stopped:
            self._store.remove_listener(self._on_state)


class DataWatch(_Watch):
    """Keep ``func(data, stat, event)`` informed about one node, like kazoo's DataWatch.

    ``func`` is called at once with the current state (``event`` None), then after every change
    (data and stat are None while the node does not exist), and again after a new session is
    established, since watches do not survive a lost session. It stops when ``func`` returns
    False or ``stop()`` is called. Calls are serialized; they run on the store's event thread
    except the first, which runs in the constructing thread. ``func`` may see the same state
    twice after a reconnect; it must treat calls as "re-read", not as "one change each".
    """


    kind = "DataWatch"

    def __init__(self, store: MetadataStore, path: str,
                 func: Callable[[bytes | None, Stat | None, WatchedEvent | None], object]) -> None:
        super().__init__(store, path, func)

    def _read(self) -> tuple[bytes | None, Stat | None]:
        while True:
            try:
                return self._store.get(self._path, watch=self._on_event)
            except NoNodeError:
                if self._store.exists(self._path, watch=self._on_event) is None:
                    return None, None
                # created in between: read it


class ChildrenWatch(_Watch):
    """Keep ``func(children, event)`` informed about a node's children, like kazoo's
    ChildrenWatch, but surviving the node's absence: ``children`` is None while the node does
    not exist (an exists watch waits for it), else the sorted child names. Same calling and
    stopping rules as DataWatch."""


    kind = "ChildrenWatch"

    def __init__(self, store: MetadataStore, path: str,
                 func: Callable[[list[str] | None, WatchedEvent | None], object]) -> None:
        super().__init__(store, path, func)

    def _read(self) -> tuple[list[str] | None]:
        while True:
            try:
                return (self._store.get_children(self._path, watch=self._on_event),)
            except NoNodeError:
                if self._store.exists(self._path, watch=self._on_event) is None:
                    return (None,)
                # created in between: read it


# ---------------------------------------------------------------------------------------------
# event delivery, shared by the stores

_STOP = object()


class EventThread:
    """Runs one session's watch and state callbacks one at a time, in the order the store
    posts them (commit order), so callbacks never run on the store's or kazoo's own threads."""

    def __init__(self, name: str) -> None:
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def put(self, fn: Callable[[Any], object], arg: Any) -> None:
        self._queue.put((fn, arg))

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            fn, arg = item
            try:
                fn(arg)
            except Exception:
                log.exception("metadata store callback %r failed on %r", fn, arg)

    def drain(self, timeout: float) -> bool:
        """Wait until everything posted so far has run (True), or ``timeout`` seconds (False)."""
        if threading.current_thread() is self.thread:
            return True
        done = threading.Event()
        self.put(lambda _: done.set(), None)
        return done.wait(timeout)

    def stop(self, timeout: float = 5.0) -> None:
        self._queue.put(_STOP)
        if threading.current_thread() is not self.thread:
            self.thread.join(timeout)


# ---------------------------------------------------------------------------------------------
# what both stores' sessions share

class StoreSession:
    """The session plumbing of both MetadataStore implementations: the session id, the closed
    flag (every operation on a closed session raises SessionExpiredError), the state listeners
    and the event thread their callbacks run on. ``where`` names the server in ``repr``."""

    def __init__(self, session_id: int, events_name: str) -> None:
        self._session_id = session_id
        self._closed = False
        self._listeners: list[StateListener] = []
        self._listeners_lock = threading.Lock()
        self._events = EventThread(events_name)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        raise NotImplementedError

    def where(self) -> str:
        return ""

    def __repr__(self) -> str:
        where = self.where()
        return (f"<{type(self).__name__}{' ' + where if where else ''} session {self._session_id:#x}"
                f"{' closed' if self._closed else ''}>")

    @property
    def session_id(self) -> int:
        return self._session_id

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise SessionExpiredError(f"session {self._session_id:#x} is closed")

    def add_listener(self, listener: StateListener) -> None:
        with self._listeners_lock:
            self._listeners.append(listener)

    def remove_listener(self, listener: StateListener) -> None:
        with self._listeners_lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def _current_listeners(self) -> list[StateListener]:
        with self._listeners_lock:
            return list(self._listeners)
