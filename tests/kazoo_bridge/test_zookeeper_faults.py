"""ZooKeeper-only behaviour of kazoo_bridge: connection loss and server restarts, watches across
reconnects, bounded waits and close(), chroots, retries."""
from __future__ import annotations

import threading
import time
import uuid

import pytest
from kazoo.protocol.states import Callback

from kazoo_bridge.local_server import free_port
from kazoo_bridge.store import connect
from tests.kazoo_bridge.proxy import FaultProxy
from tests.store_contract.backends import (
    CONNECTION_TIMEOUT_MS,
    SESSION_TIMEOUT_MS,
    Recorder,
    ZooKeeperBackend,
    wait_until,
)
from zk_compat.store import (
    ChildrenWatch,
    ConnectionLossError,
    CreateOp,
    DataWatch,
    EventType,
    NoNodeError,
    SessionState,
    WatchedEvent,
)


@pytest.fixture
def proxy(zookeeper_server):
    p = FaultProxy(zookeeper_server.port)
    yield p
    p.close()


def test_a_watch_armed_while_the_previous_event_is_queued_is_not_consumed_by_it(zk_backend):
    """kazoo pops the watches an event consumes on its connection thread and runs callbacks
    later on another one. Here the callback thread is held, so the first change's event is
    still queued when the watch is armed again: that event must not consume the new watch,
    which belongs to the second change."""
    store = zk_backend.connect()
    store.create("/a", b"0")
    store.create("/p")
    data_seen, child_seen = Recorder(), Recorder()
    store.get("/a", watch=data_seen)
    store.get_children("/p", watch=child_seen)
    gate = threading.Event()
    store.client.handler.dispatch_callback(Callback("test-gate", gate.wait, (10,)))
    store.set("/a", b"1")
    store.create("/p/c1")
    store.get("/a", watch=data_seen)  # armed again while the first events wait behind the gate
    store.get_children("/p", watch=child_seen)
    gate.set()
    store.drain_events()
    store.set("/a", b"2")
    store.delete("/p/c1")
    store.drain_events()
    assert data_seen.events == [WatchedEvent(EventType.CHANGED, "/a")] * 2
    assert child_seen.events == [WatchedEvent(EventType.CHILD, "/p")] * 2


def test_arming_a_watcher_again_while_armed_adds_nothing_to_kazoos_tables(zk_backend):
    """A reconciliation loop that reads with the same watcher every time must not grow the
    client's watch tables until the next event (ZooKeeper's client keeps watchers in sets)."""
    store = zk_backend.connect()
    store.create("/a")
    seen = Recorder()
    for _ in range(50):
        store.get("/a", watch=seen)
        store.exists("/a", watch=seen)
        store.get_children("/a", watch=seen)
    kazoo_path = zk_backend.chroot + "/a"
    assert len(store.client._data_watchers[kazoo_path]) == 1
    assert len(store.client._child_watchers[kazoo_path]) == 1
    store.delete("/a")
    store.drain_events()
    assert seen.events == [WatchedEvent(EventType.DELETED, "/a")]


def test_server_restart_suspends_then_reconnects_and_watch_helpers_rearm(private_zookeeper):
    """The server process stops and starts again; the session, its ephemeral node and the
    watches (re-armed by the store, DataWatch and ChildrenWatch) come through.

    The client reaches the server through a proxy that lets it back in only once the restarted
    server serves. ZooKeeper 3.8.0 accepts connections ~50 ms before it has loaded its
    database; such a connection is refused with "ZooKeeperServer not running", but closing it
    fails (NullPointerException, zkDb is null) and the socket stays open, so the client waits
    for its handshake for session timeout / number of hosts (ZooKeeper's Java client has the
    same connect timeout) -- long enough here to lose the race against this test's timeouts."""
    proxy = FaultProxy(private_zookeeper.port)
    backend = ZooKeeperBackend(private_zookeeper, hosts=proxy.hosts)
    store = backend.connect(session_timeout_ms=20_000, connection_timeout_ms=1000)
    states: list[SessionState] = []
    store.add_listener(states.append)
    store.create("/brokers/ids/1", b"me", ephemeral=True, makepath=True)
    store.create("/c", b"1")
    store.create("/kids")
    store.create("/raw", b"1")
    data_calls, child_calls, raw = [], [], Recorder()
    DataWatch(store, "/c", lambda data, stat, event: data_calls.append(data))
    ChildrenWatch(store, "/kids", lambda children, event: child_calls.append(children))
    store.get("/raw", watch=raw)
    session_id = store.session_id

    private_zookeeper.stop()
    wait_until(lambda: SessionState.SUSPENDED in states, 10, "SUSPENDED")
    # while the server is down, nothing hangs: reads give up after the connection timeout
    # (retries included), writes are sent at most once
    for call in (lambda: store.get("/c"), lambda: store.set("/c", b"lost")):
        started = time.monotonic()
        with pytest.raises(ConnectionLossError):
            call()
        assert time.monotonic() - started < 3

    proxy.cut()
    private_zookeeper.start()
    proxy.restore()
    wait_until(lambda: states[-1:] == [SessionState.CONNECTED], 15, "CONNECTED after the restart")
    assert states == [SessionState.SUSPENDED, SessionState.CONNECTED]
    assert store.session_id == session_id  # the session outlived the restart
    assert store.exists("/brokers/ids/1").ephemeral_owner == session_id
    assert store.get("/c")[0] == b"1"  # the write that was never sent did not happen

    store.set("/c", b"2")
    store.create("/kids/a")
    store.set("/raw", b"2")
    store.drain_events()
    assert data_calls[0] == b"1" and data_calls[-1] == b"2"
    assert child_calls[0] == [] and child_calls[-1] == ["a"]
    assert raw.events == [WatchedEvent(EventType.CHANGED, "/raw")]  # re-armed by the store, fired once
    backend.close()
    proxy.close()


def test_changes_made_while_disconnected_fire_the_watches_on_reconnect(zookeeper_server, proxy):
    """What ZooKeeper's Java client gets from SetWatches, which kazoo does not send: the store
    re-arms its watches after a reconnect and fires those whose node changed meanwhile."""
    backend = ZooKeeperBackend(zookeeper_server)
    store = backend.connect(hosts=proxy.hosts, connection_timeout_ms=2000)
    writer = backend.connect()
    for path in ("/changed", "/deleted", "/untouched", "/kids", "/dw"):
        store.create(path, b"0")
    watches = {name: Recorder() for name in ("changed", "deleted", "created", "untouched", "kids", "gone-kids")}
    store.get("/changed", watch=watches["changed"])
    store.get("/deleted", watch=watches["deleted"])
    assert store.exists("/created", watch=watches["created"]) is None
    store.exists("/untouched", watch=watches["untouched"])
    store.get_children("/kids", watch=watches["kids"])
    store.create("/gone")
    store.get_children("/gone", watch=watches["gone-kids"])
    dw_calls = []
    DataWatch(store, "/dw", lambda data, stat, event: dw_calls.append(data))
    states: list[SessionState] = []
    store.add_listener(states.append)
    session_id = store.session_id

    proxy.cut()
    wait_until(lambda: SessionState.SUSPENDED in states, 10, "SUSPENDED")
    writer.set("/changed", b"1")
    writer.delete("/deleted")
    writer.create("/created")
    writer.create("/kids/x")
    writer.delete("/gone")
    writer.set("/dw", b"1")
    proxy.restore()
    wait_until(lambda: states[-1:] == [SessionState.CONNECTED], 10, "CONNECTED")
    store.drain_events()
    assert store.session_id == session_id
    assert watches["changed"].events == [WatchedEvent(EventType.CHANGED, "/changed")]
    assert watches["deleted"].events == [WatchedEvent(EventType.DELETED, "/deleted")]
    assert watches["created"].events == [WatchedEvent(EventType.CREATED, "/created")]
    assert watches["kids"].events == [WatchedEvent(EventType.CHILD, "/kids")]
    assert watches["gone-kids"].events == [WatchedEvent(EventType.DELETED, "/gone")]
    assert watches["untouched"].events == []
    assert dw_calls[-1] == b"1"

    writer.set("/untouched", b"1")  # still armed
    writer.set("/changed", b"2")  # one-shot: already fired
    store.drain_events()
    assert watches["untouched"].events == [WatchedEvent(EventType.CHANGED, "/untouched")]
    assert watches["changed"].events == [WatchedEvent(EventType.CHANGED, "/changed")]
    backend.close()


def test_a_watch_fired_on_reconnect_can_be_armed_again(zookeeper_server, proxy):
    """A watcher that fired for a change made while disconnected re-arms by reading again, as every
    watcher does (the controller's view of /brokers/ids): the next change fires it again. (The
    re-arm once put the fired registration back in kazoo's tables, where it stood in for every later
    registration of the same watcher and swallowed their events: a chaos run's controller never saw a
    restarted broker register.)"""
    backend = ZooKeeperBackend(zookeeper_server)
    store = backend.connect(hosts=proxy.hosts, connection_timeout_ms=2000)
    writer = backend.connect()
    store.create("/ids", b"")
    store.create("/node", b"0")
    kids, data = Recorder(), Recorder()
    store.get_children("/ids", watch=kids)
    store.get("/node", watch=data)
    states: list[SessionState] = []
    store.add_listener(states.append)

    proxy.cut()
    wait_until(lambda: SessionState.SUSPENDED in states, 10, "SUSPENDED")
    writer.create("/ids/1")
    writer.set("/node", b"1")
    proxy.restore()
    wait_until(lambda: states[-1:] == [SessionState.CONNECTED], 10, "CONNECTED")
    store.drain_events()
    assert kids.events == [WatchedEvent(EventType.CHILD, "/ids")]
    assert data.events == [WatchedEvent(EventType.CHANGED, "/node")]

    assert store.get_children("/ids", watch=kids) == ["1"]  # the watcher reads again, re-arming
    assert store.get("/node", watch=data)[0] == b"1"
    writer.create("/ids/2")
    writer.set("/node", b"2")
    wait_until(lambda: len(kids.events) == 2 and len(data.events) == 2, 10, "the second events")
    assert kids.events == [WatchedEvent(EventType.CHILD, "/ids")] * 2
    assert data.events == [WatchedEvent(EventType.CHANGED, "/node")] * 2
    backend.close()


def test_operations_wait_for_a_short_disconnect(zookeeper_server, proxy):
    backend = ZooKeeperBackend(zookeeper_server)
    store = backend.connect(hosts=proxy.hosts, connection_timeout_ms=5000)
    store.create("/a", b"v")
    states: list[SessionState] = []
    store.add_listener(states.append)
    proxy.cut()
    wait_until(lambda: SessionState.SUSPENDED in states, 10, "SUSPENDED")
    results = {}
    threads = [threading.Thread(target=lambda: results.__setitem__("read", store.get("/a")[0])),
               threading.Thread(target=lambda: results.__setitem__("write", store.create("/b", b"w")))]
    for t in threads:
        t.start()
    time.sleep(0.3)
    proxy.restore()
    for t in threads:
        t.join(10)
    assert results == {"read": b"v", "write": "/b"}
    assert store.get_children("/") == ["a", "b"]
    backend.close()


def test_write_times_out_instead_of_hanging_while_disconnected(zookeeper_server, proxy):
    backend = ZooKeeperBackend(zookeeper_server)
    store = backend.connect(hosts=proxy.hosts, connection_timeout_ms=500)
    states: list[SessionState] = []
    store.add_listener(states.append)
    proxy.cut()
    wait_until(lambda: SessionState.SUSPENDED in states, 10, "SUSPENDED")
    started = time.monotonic()
    with pytest.raises(ConnectionLossError):
        store.create("/never", b"x")
    assert 0.4 < time.monotonic() - started < 3
    proxy.restore()
    wait_until(lambda: states[-1:] == [SessionState.CONNECTED], 10, "CONNECTED")
    assert store.exists("/never") is None  # never sent, so never applied
    backend.close()


def test_close_returns_within_its_deadline_while_the_server_is_down(private_zookeeper):
    backend = ZooKeeperBackend(private_zookeeper)
    store = backend.connect(connection_timeout_ms=1000)
    stuck = threading.Event()
    store.add_listener(lambda state: stuck.wait(30) if state is SessionState.SUSPENDED else None)
    store.get("/", watch=lambda event: None)
    private_zookeeper.kill()
    time.sleep(0.5)  # kazoo is now in its reconnect loop, our event thread stuck in a listener
    started = time.monotonic()
    store.close(timeout_s=3)
    assert time.monotonic() - started < 3.5
    assert store.closed
    stuck.set()


def test_close_is_quick_and_deletes_ephemerals_when_the_server_is_up(zk_backend):
    store = zk_backend.connect()
    observer = zk_backend.connect()
    store.create("/e", ephemeral=True)
    started = time.monotonic()
    store.close()
    store.close()  # idempotent
    assert time.monotonic() - started < 2
    assert observer.exists("/e") is None


def test_connecting_to_nothing_fails_within_the_connection_timeout():
    started = time.monotonic()
    with pytest.raises(ConnectionLossError, match="within 500 ms"):
        connect(f"127.0.0.1:{free_port()}/kafka", SESSION_TIMEOUT_MS, 500)
    assert time.monotonic() - started < 3


def test_chroot_is_created_with_null_data_and_hidden_from_paths(zookeeper_server):
    top = f"/kafka-{uuid.uuid4().hex}"
    with connect(f"{zookeeper_server.hosts}{top}/cluster1", SESSION_TIMEOUT_MS, CONNECTION_TIMEOUT_MS) as store, \
            connect(zookeeper_server.hosts, SESSION_TIMEOUT_MS, CONNECTION_TIMEOUT_MS) as root:
        assert root.get(top)[0] is None and root.get(f"{top}/cluster1")[0] is None
        assert store.exists("/") is not None and store.get_children("/") == []
        seen = Recorder()
        store.exists("/brokers/ids/1", watch=seen)
        assert store.create("/brokers/ids/1", b"x", ephemeral=True, makepath=True) == "/brokers/ids/1"
        assert store.create("/seq-", sequence=True) == "/seq-0000000001"
        assert store.multi([CreateOp("/m-", sequence=True)]) == ["/m-0000000002"]
        store.drain_events()
        assert seen.events == [WatchedEvent(EventType.CREATED, "/brokers/ids/1")]
        assert root.get(f"{top}/cluster1/brokers/ids/1")[0] == b"x"
        # the chroot already exists the second time
        with connect(f"{zookeeper_server.hosts}{top}/cluster1", SESSION_TIMEOUT_MS, CONNECTION_TIMEOUT_MS) as again:
            assert again.get_children("/") == ["brokers", "m-0000000002", "seq-0000000001"]
        store.close()
        root.delete(top, recursive=True)
        with pytest.raises(NoNodeError):
            root.get(top)
