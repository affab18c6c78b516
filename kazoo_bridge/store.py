"""``KazooStore``: zk_compat's MetadataStore over a real ZooKeeper ensemble, through kazoo.

Callers cannot tell it from ``zk_compat.embedded.EmbeddedStore``: same methods, same exceptions
(kazoo's are translated here and nowhere else), same null-vs-empty data, same one-shot watches
deduplicated per watcher, same ``multi`` error shape. What it adds, and why:

Threads. kazoo runs a connection thread and a callback thread (``SequentialThreadingHandler``).
Neither ever runs our callers' code: kazoo-level watch and state callbacks only move events to
this store's own event thread, in the order kazoo received them, and every watch and state
callback of the caller runs there, one at a time. So a slow or blocking callback cannot stall
kazoo's reads of the socket or its ``stop()``; and callbacks may call the store (DataWatch
does), since replies are delivered by the connection thread.

Connection loss. An operation waits for a connection for up to ``connection_timeout_ms``
(Kafka's ``ZooKeeperClient.waitUntilConnected``), then for its reply for up to the session
timeout; either timeout raises ConnectionLossError instead of hanging. Reads are retried with
kazoo's ``KazooRetry`` within the connection timeout; writes are never retried blindly: a
write that fails with ConnectionLossError may or may not have been applied, and only the
caller knows how to check (``layout.register_broker`` reads the node's owner, election reads
``/controller``).

Watches. Every registration is its own one-shot object in kazoo's watch tables, because
kazoo decides which registrations an event consumes on its connection thread, in order with
the replies; a table of our own, updated later on another thread, would let an event still in
flight consume a registration made after it (and the next event would find nothing armed).
kazoo drops every watch when the connection drops and, unlike ZooKeeper's Java client, does
not send SetWatches on reconnect. It does hand each dropped watch a NONE event; this store
collects them and, once reconnected to the same session, re-arms each one and fires what the
server's SetWatches would have (node gone -> DELETED, created -> CREATED, ``mzxid``/``pzxid``
past the last zxid seen before the disconnect -> CHANGED/CHILD). So watches are lost only
with the session, as the Protocol says. If the connection drops again during a re-arm, the
older zxid is kept: a watcher may then get an extra event, never miss one.

Sessions. ``session_id`` changes when a new session is established after expiry. kazoo reports
SUSPENDED when the connection drops and LOST only once it reaches a server that says the
session expired (or on ``close``, which this store does not report), then CONNECTED with the
new session. Ephemeral nodes of the expired session may still exist for a moment if the expiry
was detected client-side; ``layout.register_broker(previous_session_id=...)`` deals with that.

ACLs: every node is created world:anyone/all (Kafka's ``zookeeper.set.acl=false`` default).

One module: translating kazoo's exceptions and moving watch and state events onto the store's own thread are
the whole contract of ``KazooStore``, and every method uses both.
"""
from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import kazoo.exceptions as kex
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.serialization import CheckVersion, Create, Delete, SetData
from kazoo.protocol.states import Callback, EventType as KazooEventType, KazooState, KeeperState, ZnodeStat
from kazoo.retry import KazooRetry, RetryFailedError
from kazoo.security import OPEN_ACL_UNSAFE

import zk_compat.store as zk  # written zk.X everywhere here, beside kazoo's own names
from zk_compat.paths import check_value, join, missing_parents, split_zookeeper_connect, validate_path, with_chroot

log = logging.getLogger(__name__)

DEFAULT_SESSION_TIMEOUT_MS = 18_000  # zookeeper.session.timeout.ms
DEFAULT_CLOSE_TIMEOUT_S = 5.0
# kazoo's default reconnect backoff grows to 60 s, and a sleeping reconnect loop delays stop()
# by as much; ZooKeeper's Java client waits at most about a second between attempts.
_RECONNECT_MAX_DELAY_S = 1.0


# ---------------------------------------------------------------------------------------------
# translation

_ERRORS: dict[type[BaseException], type[zk.MetadataStoreError]] = {
    kex.NoNodeError: zk.NoNodeError,
    kex.NodeExistsError: zk.NodeExistsError,
    kex.BadVersionError: zk.BadVersionError,
    kex.NotEmptyError: zk.NotEmptyError,
    kex.NoChildrenForEphemeralsError: zk.NoChildrenForEphemeralsError,
    kex.BadArgumentsError: zk.BadArgumentsError,
    kex.RolledBackError: zk.RolledBackError,
    kex.RuntimeInconsistency: zk.RuntimeInconsistencyError,
    kex.ConnectionLoss: zk.ConnectionLossError,
    kex.OperationTimeoutError: zk.ConnectionLossError,
    RetryFailedError: zk.ConnectionLossError,
    KazooTimeoutError: zk.ConnectionLossError,
    kex.ConnectionClosedError: zk.SessionExpiredError,  # this store was closed
    kex.SessionExpiredError: zk.SessionExpiredError,
}

_WHAT = {
    zk.NoNodeError: "does not exist",
    zk.NodeExistsError: "already exists",
    zk.BadVersionError: "is not at the expected version",
    zk.NotEmptyError: "has children",
    zk.NoChildrenForEphemeralsError: "is below an ephemeral node",
    zk.RolledBackError: "rolled back",
    zk.ConnectionLossError: "connection to ZooKeeper lost; the operation may or may not have been applied",
    zk.SessionExpiredError: "ZooKeeper session expired or closed",
}


SESSION_FILE_ENV = "KBROKER_CHAOS_SESSION_FILE"


def _publish_session(client_id: tuple[int, bytes]) -> None:
    """Opt-in, for the chaos harness (bench/reliability/chaos) only: with ``$KBROKER_CHAOS_SESSION_FILE`` set, write the
    session's id and password (hex, one line) there, so the harness can expire the session from outside with
    kazoo's second-client trick. Unset (every normal run), nothing is written: the password is a credential."""
    path = os.environ.get(SESSION_FILE_ENV)
    if not path:
        return
    session_id, password = client_id
    tmp = f"{path}.tmp"
    try:
        with open(tmp, "w") as f:
            f.write(f"{session_id:x} {bytes(password).hex()}\n")
        os.replace(tmp, path)
    except OSError as exc:
        log.warning("cannot write the ZooKeeper session file %s: %s", path, exc)


def translate_error(exc: BaseException, path: str | None = None) -> zk.MetadataStoreError:
    """kazoo's exception -> zk_compat's (server codes without a zk_compat class keep their
    ``code`` on a plain MetadataStoreError)."""
    target: type[zk.MetadataStoreError] = zk.MetadataStoreError
    for cls in type(exc).__mro__:
        if cls in _ERRORS:
            target = _ERRORS[cls]
            break
    what = _WHAT.get(target) or f"{type(exc).__name__} {exc}".strip()
    error = target(f"{path}: {what}" if path else what, path=path)
    if target is zk.MetadataStoreError and isinstance(getattr(exc, "code", None), int):
        error.code = exc.code  # type: ignore[attr-defined]
    return error


def _stat(s: ZnodeStat) -> zk.Stat:
    return zk.Stat(czxid=s.czxid, mzxid=s.mzxid, pzxid=s.pzxid, ctime=s.ctime, mtime=s.mtime,
                version=s.version, cversion=s.cversion, aversion=s.aversion,
                ephemeral_owner=s.ephemeralOwner, data_length=s.dataLength, num_children=s.numChildren)


_EVENT_TYPES = {
    KazooEventType.CREATED: zk.EventType.CREATED,
    KazooEventType.DELETED: zk.EventType.DELETED,
    KazooEventType.CHANGED: zk.EventType.CHANGED,
    KazooEventType.CHILD: zk.EventType.CHILD,
}

_STATES = {
    KazooState.CONNECTED: zk.SessionState.CONNECTED,
    KazooState.SUSPENDED: zk.SessionState.SUSPENDED,
    KazooState.LOST: zk.SessionState.LOST,
}


# ---------------------------------------------------------------------------------------------
# one armed watch

_DATA = "data"    # armed by get/exists: CREATED, CHANGED, DELETED
_CHILD = "child"  # armed by get_children: CHILD, DELETED


class _Watch:
    """One registration of a caller's watcher, as kazoo holds it. Each registration is its own
    object, so kazoo -- which pops the watches an event consumes on its connection thread, in
    order with the replies -- is the one source of truth about what is armed. Fires at most once.

    Equal (same store, path, kind and watcher) registrations are one entry in kazoo's per-path
    sets, as in ZooKeeper's own client: arming a watcher again while it is armed adds nothing,
    and arming it after an event has consumed it adds a fresh one (a fired registration equals only
    itself, so it never keeps a fresh one out of kazoo's set)."""

    __slots__ = ("store", "watcher", "path", "kind", "existed", "fired")

    def __init__(self, store: KazooStore, watcher: zk.Watcher, path: str, kind: str) -> None:
        self.store = store
        self.watcher = watcher
        self.path = path
        self.kind = kind
        self.existed = True  # for a data watch: did the node exist when it was armed
        self.fired = False

    def __call__(self, event: Any) -> None:
        self.store._on_kazoo_watch(self, event)

    def __eq__(self, other: object) -> bool:
        # a fired registration stands in for no other: the re-arm after a reconnect leaves one it fired in kazoo's
        # tables (as SetWatches consumes a watch), and equal to a later registration it would keep that one out
        # and swallow its event
        return other is self or (isinstance(other, _Watch) and not self.fired and not other.fired
                                 and other.store is self.store and other.path == self.path
                                 and other.kind == self.kind and other.watcher == self.watcher)

    def __hash__(self) -> int:
        return hash((self.path, self.kind, self.watcher))


# ---------------------------------------------------------------------------------------------
# the store

class KazooStore(zk.StoreSession):
    """One ZooKeeper session; implements ``zk_compat.store.MetadataStore``. Build it with
    ``connect()``."""

    def __init__(self, zookeeper_connect: str, *, session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
                 connection_timeout_ms: int | None = None, close_timeout_s: float = DEFAULT_CLOSE_TIMEOUT_S) -> None:
        """Prepare a session (not connected yet: ``connect()`` does both). ``connection_timeout_ms``
        defaults to the session timeout, as Kafka's ``zookeeper.connection.timeout.ms`` does."""
        self.hosts, self.chroot = split_zookeeper_connect(zookeeper_connect)
        self.session_timeout_ms = int(session_timeout_ms)
        self.connection_timeout_ms = int(connection_timeout_ms if connection_timeout_ms is not None
                                          else session_timeout_ms)
        self.close_timeout_s = close_timeout_s
        self._connection_timeout_s = self.connection_timeout_ms / 1000.0
        self._request_timeout_s = max(self.session_timeout_ms, self.connection_timeout_ms) / 1000.0
        self._read_retry = KazooRetry(max_tries=-1, delay=0.05, backoff=2, max_delay=_RECONNECT_MAX_DELAY_S,
                                      deadline=self._connection_timeout_s)
        self._client = KazooClient(hosts=self.hosts + self.chroot, timeout=self.session_timeout_ms / 1000.0,
                                   connection_retry=self._reconnect_retry())
        self._lock = threading.Lock()
        self._connected = threading.Event()
        self._established = False
        # watches kazoo dropped on a disconnect, to re-arm once reconnected to the same session
        self._to_rearm: list[_Watch] = []
        # the last zxid seen before the oldest disconnect not yet followed by a complete re-arm
        self._rearm_zxid: int | None = None
        self._disconnects = 0
        self._sessions_lost = 0
        # the kazoo event being delivered, and the watchers it has reached (deduplication)
        self._current_event: Any = None
        self._delivered: set[zk.Watcher] = set()
        super().__init__(0, f"zk-kazoo-events-{id(self):x}")  # the session id comes with the connection
        self._client.add_listener(self._on_kazoo_state)

    @staticmethod
    def _reconnect_retry() -> KazooRetry:
        return KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=_RECONNECT_MAX_DELAY_S)

    @classmethod
    def connect(cls, zookeeper_connect: str, session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
                connection_timeout_ms: int | None = None, **kwargs: Any) -> KazooStore:
        """Open a session on ``zookeeper_connect`` (Kafka's ``zookeeper.connect``: hosts, then an
        optional chroot such as ``127.0.0.1:2181/kafka``). A missing chroot path is created first
        with null data, through a short-lived session without the chroot, as Kafka does
        (``KafkaServer.createChrootIfNecessary``). Raises ConnectionLossError if no server
        answers within the connection timeout."""
        store = cls(zookeeper_connect, session_timeout_ms=session_timeout_ms,
                    connection_timeout_ms=connection_timeout_ms, **kwargs)
        try:
            if store.chroot:
                with cls(store.hosts, session_timeout_ms=session_timeout_ms,
                         connection_timeout_ms=connection_timeout_ms, **kwargs) as bootstrap:
                    bootstrap._start()
                    if bootstrap.exists(store.chroot) is None:
                        try:
                            bootstrap.create(store.chroot, None, makepath=True)
                            log.info("created the chroot path %s on %s", store.chroot, store.hosts)
                        except zk.NodeExistsError:
                            pass
            store._start()
        except BaseException:
            store.close()
            raise
        return store

    def _start(self) -> None:
        try:
            self._client.start(timeout=self._connection_timeout_s)
        except KazooTimeoutError:
            raise zk.ConnectionLossError(f"no ZooKeeper server at {self.hosts} answered within "
                                      f"{self.connection_timeout_ms} ms (zookeeper.connection.timeout.ms)") from None
        log.info("ZooKeeper session %#x on %s%s", self._session_id, self.hosts, self.chroot)

    def where(self) -> str:
        return self.hosts + self.chroot

    @property
    def client(self) -> KazooClient:
        """The kazoo client (for diagnostics; go through the store for everything else)."""
        return self._client

    # -- plumbing

    def _await_connected(self) -> None:
        """Wait for a connection (not past the connection timeout); raise kazoo's error."""
        deadline = time.monotonic() + self._connection_timeout_s
        while not self._connected.is_set():
            if self._closed:
                raise kex.ConnectionClosedError("the store is closed")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise kex.ConnectionLoss(f"not connected to ZooKeeper within {self.connection_timeout_ms} ms")
            self._connected.wait(min(remaining, 0.1))
        if self._closed:
            raise kex.ConnectionClosedError("the store is closed")

    def _round_trip(self, start: Callable[[], Any]) -> Any:
        """One request: wait for a connection, send, wait for the reply (kazoo errors)."""
        self._await_connected()
        try:
            return start().get(timeout=self._request_timeout_s)
        except KazooTimeoutError:
            raise kex.OperationTimeoutError(f"no reply within {self._request_timeout_s:.1f} s") from None

    def _read(self, path: str, attempt: Callable[[], Any]) -> Any:
        """An idempotent request: retried on connection loss within the connection timeout."""
        try:
            return self._read_retry.copy()(attempt)
        except zk.MetadataStoreError:
            raise
        except (kex.KazooException, KazooTimeoutError) as exc:
            raise translate_error(exc, path) from exc

    def _write(self, path: str, start: Callable[[], Any]) -> Any:
        """A request sent at most once: on connection loss the caller sees ConnectionLossError."""
        try:
            return self._round_trip(start)
        except (kex.KazooException, KazooTimeoutError) as exc:
            raise translate_error(exc, path) from exc

    # -- watches

    def _on_kazoo_watch(self, armed: _Watch, event: Any) -> None:
        """kazoo's callback thread. kazoo has already decided, on its connection thread and in
        order with the replies, that this event consumes ``armed``; we only deduplicate (a
        watcher armed several times fires once per event: kazoo hands every watcher the event
        consumes the same event object, one after another) and pass it to our event thread."""
        if event.type == KazooEventType.NONE:
            # kazoo dropped its watches: a disconnect (CONNECTING: re-arm once reconnected to
            # the same session) or the end of the session (dropped for good)
            if event.state == KeeperState.CONNECTING:
                with self._lock:
                    if not armed.fired and not self._closed:
                        self._to_rearm.append(armed)
            return
        event_type = _EVENT_TYPES.get(event.type)
        if event_type is None:
            return
        with self._lock:
            if armed.fired or self._closed:
                return
            armed.fired = True
            if event is not self._current_event:
                self._current_event = event
                self._delivered.clear()
            if armed.watcher in self._delivered:
                return
            self._delivered.add(armed.watcher)
        self._events.put(armed.watcher, zk.WatchedEvent(event_type, event.path))

    def _rearm_watches(self) -> None:
        """Event thread, after reconnecting to the same session: re-arm the watches kazoo
        dropped and fire what the server's SetWatches would have fired for changes made while
        we were away (relative to the last zxid seen before the disconnect)."""
        with self._lock:
            zxid, generation, sessions_lost = self._rearm_zxid, self._disconnects, self._sessions_lost
            pending, self._to_rearm = self._to_rearm, []
        fire: dict[tuple[zk.EventType, str], dict[zk.Watcher, None]] = {}
        done = 0
        try:
            for armed in pending:
                if zxid is None or armed.fired:
                    done += 1
                    continue
                event_type: zk.EventType | None
                if armed.kind is _DATA:
                    zstat = self._round_trip(lambda: self._client.exists_async(armed.path, watch=armed))
                    if zstat is None:
                        event_type = zk.EventType.DELETED if armed.existed else None
                    elif not armed.existed:
                        event_type = zk.EventType.CREATED
                    else:
                        event_type = zk.EventType.CHANGED if zstat.mzxid > zxid else None
                else:
                    try:
                        _, zstat = self._round_trip(lambda: self._client.get_children_async(
                            armed.path, watch=armed, include_data=True))
                        event_type = zk.EventType.CHILD if zstat.pzxid > zxid else None
                    except kex.NoNodeError:
                        event_type = zk.EventType.DELETED
                if event_type is not None:
                    with self._lock:
                        if not armed.fired:  # a real event may have beaten us to it
                            armed.fired = True
                            fire.setdefault((event_type, armed.path), {})[armed.watcher] = None
                done += 1
        except (kex.KazooException, KazooTimeoutError) as exc:
            log.info("re-arming watches after a reconnect was interrupted (%r); resuming after the next one", exc)
            with self._lock:
                if self._sessions_lost == sessions_lost:
                    self._to_rearm.extend(pending[done:])
        else:
            with self._lock:
                if self._disconnects == generation:
                    self._rearm_zxid = None
        for (event_type, path), watchers in fire.items():
            event = zk.WatchedEvent(event_type, path)
            for watcher in watchers:
                try:
                    watcher(event)
                except Exception:
                    log.exception("metadata store callback %r failed on %r", watcher, event)

    # -- session state

    def _on_kazoo_state(self, state: str) -> None:
        """kazoo's connection thread: must not block. Book-keeping, then the event goes through
        kazoo's callback queue (so it stays in order with watch events) to our event thread."""
        if self._closed:
            return
        with self._lock:
            if state == KazooState.CONNECTED:
                client_id = self._client.client_id
                if client_id is not None:
                    self._session_id = client_id[0]
                    _publish_session(client_id)
                self._connected.set()
                if not self._established:
                    # the session connect() establishes: not a state change for listeners (the
                    # embedded store reports none either), and one added just after connect()
                    # returns must not hear it late
                    self._established = True
                    return
            else:
                self._connected.clear()
                self._disconnects += 1
                if state == KazooState.LOST:
                    self._rearm_zxid = None
                elif self._rearm_zxid is None:  # SUSPENDED: keep the oldest until re-armed
                    self._rearm_zxid = self._client.last_zxid
        self._client.handler.dispatch_callback(Callback("session", self._forward_state, (_STATES[state],)))

    def _forward_state(self, state: zk.SessionState) -> None:
        """kazoo's callback thread, in order with the watch callbacks."""
        if state is zk.SessionState.LOST:
            with self._lock:  # every watch dropped before now was dropped with the session
                self._to_rearm.clear()
                self._sessions_lost += 1
        self._events.put(self._deliver_state, state)

    def _deliver_state(self, state: zk.SessionState) -> None:
        if self._closed:
            return
        if state is zk.SessionState.CONNECTED:
            self._rearm_watches()
        for listener in self._current_listeners():
            try:
                listener(state)
            except Exception:
                log.exception("session state listener %r failed on %s", listener, state.value)

    # -- reads

    def get(self, path: str, watch: zk.Watcher | None = None) -> tuple[bytes | None, zk.Stat]:
        validate_path(path)
        self._check_open()
        armed = _Watch(self, watch, path, _DATA) if watch is not None else None
        data, zstat = self._read(path, lambda: self._round_trip(lambda: self._client.get_async(path, watch=armed)))
        return data, _stat(zstat)

    def get_many(self, paths: Sequence[str], watch: zk.Watcher | None = None
                 ) -> list[tuple[bytes | None, zk.Stat] | None]:
        """Every get sent before the first answer is awaited, then an exists (with the watch) for each node that
        was missing, sent likewise: two round trips' wait for any number of nodes. Retried whole on a
        connection loss, as a single read is."""
        for path in paths:
            validate_path(path)
        self._check_open()
        if not paths:
            return []
        found: list[tuple[bytes | None, zk.Stat] | None] = self._read(
            paths[0], lambda: self._get_pipelined(paths, watch))
        return found

    def _get_pipelined(self, paths: Sequence[str], watch: zk.Watcher | None
                       ) -> list[tuple[bytes | None, zk.Stat] | None]:
        self._await_connected()
        client, timeout = self._client, self._request_timeout_s

        def armed(path: str) -> _Watch | None:
            return _Watch(self, watch, path, _DATA) if watch is not None else None
        try:
            pending = [client.get_async(path, watch=armed(path)) for path in paths]
            out: list[tuple[bytes | None, zk.Stat] | None] = []
            missing: list[int] = []
            for i, waiting in enumerate(pending):
                try:
                    data, zstat = waiting.get(timeout=timeout)
                    out.append((data, _stat(zstat)))
                except kex.NoNodeError:
                    out.append(None)
                    missing.append(i)
            watches = {i: armed(paths[i]) for i in missing}
            checks = [(i, client.exists_async(paths[i], watch=watches[i])) for i in missing]
            for i, waiting in checks:
                zstat = waiting.get(timeout=timeout)
                if zstat is None:
                    registration = watches[i]
                    if registration is not None:
                        registration.existed = False  # (see exists)
                else:  # created between the two requests: read it as get would
                    data, zstat = client.get_async(paths[i], watch=armed(paths[i])).get(timeout=timeout)
                    out[i] = (data, _stat(zstat))
        except KazooTimeoutError:
            raise kex.OperationTimeoutError(f"no reply within {timeout:.1f} s") from None
        return out

    def exists(self, path: str, watch: zk.Watcher | None = None) -> zk.Stat | None:
        validate_path(path)
        self._check_open()
        armed = _Watch(self, watch, path, _DATA) if watch is not None else None
        zstat = self._read(path, lambda: self._round_trip(lambda: self._client.exists_async(path, watch=armed)))
        if armed is not None:
            armed.existed = zstat is not None  # (a re-arm squeezed in before this line would
            # need a disconnect in this instant; at worst the watcher gets one extra event)
        return _stat(zstat) if zstat is not None else None

    def get_children(self, path: str, watch: zk.Watcher | None = None) -> list[str]:
        validate_path(path)
        self._check_open()
        armed = _Watch(self, watch, path, _CHILD) if watch is not None else None
        children = self._read(path, lambda: self._round_trip(lambda: self._client.get_children_async(
            path, watch=armed)))
        return sorted(children)

    # -- writes

    def create(self, path: str, value: bytes | None = None, *, ephemeral: bool = False,
               sequence: bool = False, makepath: bool = False) -> str:
        """Missing parents (``makepath``) are created persistent with null data, as Kafka's
        ``createRecursive`` does (kazoo's own makepath writes empty data), in one multi with
        the node itself."""
        validate_path(path, sequence=sequence)
        value = check_value(value)
        self._check_open()
        if path == "/":
            raise zk.NodeExistsError("/ already exists", path="/")
        for _ in range(10):
            try:
                created: str = self._write(path, lambda: self._client.create_async(
                    path, value, ephemeral=ephemeral, sequence=sequence))
                return created
            except zk.NoNodeError:
                if not makepath:
                    raise
            missing = missing_parents(path, lambda p: self.exists(p) is not None)
            if not missing:
                continue  # the parents appeared meanwhile
            ops: list[zk.Op] = [zk.CreateOp(p) for p in missing]
            ops.append(zk.CreateOp(path, value, ephemeral, sequence))
            try:
                result = self.multi(ops)[-1]
                assert isinstance(result, str)
                return result
            except (zk.NoNodeError, zk.NodeExistsError) as exc:
                if exc.failed_op_index == len(ops) - 1:
                    raise type(exc)(str(exc), path=path) from None
                continue  # someone else changed the parents: look again
        raise zk.ConnectionLossError(f"{path}: its parents kept changing during create(makepath=True)", path=path)

    def set(self, path: str, value: bytes | None, version: int = zk.ANY_VERSION) -> zk.Stat:
        validate_path(path)
        value = check_value(value)
        self._check_open()
        return _stat(self._write(path, lambda: self._client.set_async(path, value, version)))

    def delete(self, path: str, version: int = zk.ANY_VERSION, recursive: bool = False) -> None:
        """``recursive`` deletes the subtree leaves first, then the node with ``version``; not
        atomic (a child created meanwhile is deleted on the next pass)."""
        validate_path(path)
        self._check_open()
        if path == "/":
            raise zk.BadArgumentsError("the root znode cannot be deleted", path=path)
        if not recursive:
            self._write(path, lambda: self._client.delete_async(path, version))
            return
        for _ in range(10):
            stat = self.exists(path)
            if stat is None:
                raise zk.NoNodeError(f"{path}: does not exist", path=path)
            zk.check_version(path, stat.version, version)
            self._delete_descendants(path)
            try:
                self._write(path, lambda: self._client.delete_async(path, version))
                return
            except zk.NotEmptyError:
                continue
        raise zk.NotEmptyError(f"{path}: children keep appearing during a recursive delete", path=path)

    def _delete_descendants(self, path: str) -> None:
        try:
            children = self.get_children(path)
        except zk.NoNodeError:
            return
        for child in children:
            child_path = join(path, child)
            self._delete_descendants(child_path)
            try:
                self._write(child_path, functools.partial(self._client.delete_async, child_path))
            except zk.NoNodeError:
                pass

    # -- multi

    def _request(self, op: zk.Op) -> Any:
        # kazoo's TransactionRequest refuses null data; Kafka writes null data in multis
        # (register_broker's create, partition paths), so the requests are built here, with
        # the chroot kazoo prefixes to the requests it builds itself.
        op = zk.checked_op(op)
        path = with_chroot(self.chroot, op.path)
        if isinstance(op, zk.CreateOp):
            flags = (1 if op.ephemeral else 0) | (2 if op.sequence else 0)
            return Create(path, op.value, OPEN_ACL_UNSAFE, flags)
        if isinstance(op, zk.DeleteOp):
            return Delete(path, op.version)
        if isinstance(op, zk.SetDataOp):
            return SetData(path, op.value, op.version)
        return CheckVersion(path, op.version)

    def multi(self, ops: Sequence[zk.Op]) -> list[zk.OpResult]:
        """One ZooKeeper multi. On failure the failing operation's error is raised with
        ``failed_op_index`` and ``results`` (RolledBackError for every other operation; the
        server itself reports RUNTIMEINCONSISTENCY for those after the failing one)."""
        ops = list(ops)
        requests = [self._request(op) for op in ops]
        self._check_open()
        if not ops:
            return []
        return self._multi_results(ops, self._write(ops[0].path, lambda: self._commit_async(requests)))

    def multi_pipelined(self, batches: Sequence[Sequence[zk.Op]]) -> list[list[zk.OpResult] | zk.MetadataStoreError]:
        """Every multi sent before the first answer is awaited: one round trip's wait for all of them (kazoo
        writes requests in order on one connection and ZooKeeper answers them in order)."""
        lists = [list(ops) for ops in batches]
        requests = [[self._request(op) for op in ops] for ops in lists]
        self._check_open()
        self._await_connected()
        pending = [self._commit_async(r) if r else None for r in requests]
        outcomes: list[list[zk.OpResult] | zk.MetadataStoreError] = []
        for ops, waiting in zip(lists, pending):
            if waiting is None:
                outcomes.append([])
                continue
            try:
                raw = waiting.get(timeout=self._request_timeout_s)
            except KazooTimeoutError:
                raise zk.ConnectionLossError(f"no reply within {self._request_timeout_s:.1f} s") from None
            except kex.KazooException as exc:
                raise translate_error(exc, ops[0].path) from exc
            try:
                outcomes.append(self._multi_results(ops, raw))
            except zk.MetadataStoreError as exc:
                outcomes.append(exc)
        return outcomes

    def _commit_async(self, requests: list[Any]) -> Any:
        transaction = self._client.transaction()
        transaction.operations.extend(requests)
        return transaction.commit_async()

    @staticmethod
    def _multi_results(ops: list[zk.Op], raw: list[Any]) -> list[zk.OpResult]:
        errors = [i for i, r in enumerate(raw) if isinstance(r, Exception)]
        if errors:
            index = next((i for i in errors if not isinstance(raw[i], (kex.RolledBackError, kex.RuntimeInconsistency))),
                         errors[0])
            raise translate_error(raw[index], ops[index].path).failing_multi(ops, index)
        results: list[zk.OpResult] = []
        for op, result in zip(ops, raw):
            if isinstance(op, zk.CreateOp):
                results.append(result)
            elif isinstance(op, zk.SetDataOp):
                results.append(_stat(result))
            else:
                results.append(True)
        return results

    # -- closing

    def close(self, timeout_s: float | None = None) -> None:
        """End the session (the server deletes its ephemeral nodes) and free the client. Returns
        within ``timeout_s`` (default ``close_timeout_s``) even if ZooKeeper is unreachable or a
        callback is stuck: kazoo's ``stop()`` then ``close()`` run on a helper thread that is
        abandoned, with a warning, if it overruns (the session then expires on the server)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._connected.set()  # wake waiters: they see _closed
        budget = self.close_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + budget
        stopper = threading.Thread(target=self._stop_client, name=f"zk-kazoo-stop-{id(self):x}", daemon=True)
        stopper.start()
        stopper.join(budget)
        if stopper.is_alive():
            log.warning("kazoo client for %s%s did not stop within %.1f s; abandoning it (session %#x "
                        "expires on the server after %d ms)", self.hosts, self.chroot, budget,
                        self._session_id, self.session_timeout_ms)
        # callbacks still queued run (or are abandoned with their daemon thread) after this
        self._events.stop(timeout=max(0.0, deadline - time.monotonic()))

    def _stop_client(self) -> None:
        try:
            self._client.stop()
            self._client.close()
        except Exception:
            log.warning("stopping the kazoo client for %s%s failed", self.hosts, self.chroot, exc_info=True)

    # -- test hooks (as zk_compat.embedded.EmbeddedStore and kazoo's harness have)

    def drain_events(self, timeout: float = 5.0) -> bool:
        """Wait until every watch/state callback for events the server sent before now has run:
        one read round trip (notifications precede later replies on a connection), then a marker
        through kazoo's callback queue and ours."""
        if threading.current_thread() is self._events.thread:
            return True
        deadline = time.monotonic() + timeout
        if not self._closed and self._connected.is_set():
            try:
                self._client.exists_async("/").get(timeout=timeout)
            except Exception:
                pass
        done = threading.Event()
        if self._client.handler.running:
            self._client.handler.dispatch_callback(Callback("drain", self._events.put,
                                                            (lambda _: done.set(), None)))
        else:
            self._events.put(lambda _: done.set(), None)
        return done.wait(max(0.0, deadline - time.monotonic()))

    def expire_session(self, *, server_side: bool = True, timeout: float = 10.0) -> None:
        """Make the session expire, then wait for the new one.

        ``server_side`` (kazoo's classic technique): a second client joins the session with its
        id and password and closes it, so the server ends it and deletes its ephemeral nodes;
        this client then reconnects, hears "expired" (SUSPENDED, LOST) and opens a new session
        (CONNECTED). Otherwise kazoo's harness hook makes only this client believe the session
        expired: the old session and its ephemeral nodes live on until the server times it out
        (the "stale ephemeral node" case)."""
        self._check_open()
        old = self._session_id
        if server_side:
            client_id = self._client.client_id
            if client_id is None:
                raise zk.ConnectionLossError("not connected: cannot expire the session")
            other = KazooClient(hosts=self.hosts, client_id=client_id, timeout=self.session_timeout_ms / 1000.0,
                                connection_retry=self._reconnect_retry())
            other.start(timeout=timeout)
            other.stop()
            other.close()
        else:
            from kazoo.protocol.connection import _SESSION_EXPIRED
            self._client._call(_SESSION_EXPIRED, None)
        deadline = time.monotonic() + timeout
        while not (self._session_id != old and self._connected.is_set()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"session {old:#x} did not expire and get replaced within {timeout} s")
            time.sleep(0.01)

    def lose_connection(self, timeout: float = 10.0) -> None:
        """Drop the TCP connection (kazoo's harness hook) and wait until it is re-established
        with the same session (SUSPENDED, then CONNECTED)."""
        self._check_open()
        from kazoo.protocol.connection import _CONNECTION_DROP
        with self._lock:
            before = self._disconnects
        self._client._call(_CONNECTION_DROP, None)
        deadline = time.monotonic() + timeout
        while not (self._disconnects > before and self._connected.is_set()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the connection was not dropped and re-established within {timeout} s")
            time.sleep(0.01)


def connect(zookeeper_connect: str, session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
            connection_timeout_ms: int | None = None, **kwargs: Any) -> KazooStore:
    """``KazooStore.connect``: a MetadataStore session on a ZooKeeper ensemble."""
    return KazooStore.connect(zookeeper_connect, session_timeout_ms, connection_timeout_ms, **kwargs)
