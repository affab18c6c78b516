"""SessionManager: on session expiry the controller resigns first, the broker registers again,
election runs again, and state is re-read; on a mere reconnect only the re-read happens. Run on
both stores (the embedded store's expire_session plays the same sequence) and in both modes
(the broker's asyncio loop, or the manager's private loop)."""
from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from kazoo_bridge.session import SessionManager
from tests.store_contract.backends import wait_until
from zk_compat import layout
from zk_compat.layout import BrokerIdInUseError
from zk_compat.store import ChildrenWatch, DataWatch
from zk_compat.znodes import BrokerIdZNode, BrokerInfo, EndPoint

INFO = BrokerInfo.from_endpoints(1, [EndPoint("PLAINTEXT", "kafka1", 9092, "PLAINTEXT")], timestamp_ms=1633958339380)


@pytest.fixture
def broker_loop() -> Iterator[asyncio.AbstractEventLoop]:
    """The broker's event loop, running in a thread of its own."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="broker-loop", daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


class Journal:
    """Records each callback with the thread it ran on."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple]] = []
        self.threads: set[int] = set()

    def recorder(self, name: str):
        def record(*args):
            self.calls.append((name, args))
            self.threads.add(threading.get_ident())
        return record

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.calls]


def manager_for(store, journal: Journal, loop=None, **callbacks) -> SessionManager:
    defaults = {name: journal.recorder(name) for name in ("resign", "reelect", "reconnect", "registered", "error")}
    defaults.update(callbacks)
    return SessionManager(store, INFO, on_resign=defaults["resign"], on_reelect=defaults["reelect"],
                          on_reconnect=defaults["reconnect"], on_registered=defaults["registered"],
                          on_error=defaults["error"], loop=loop, retry_backoff_ms=100)


def loop_thread_id(loop: asyncio.AbstractEventLoop) -> int:
    return asyncio.run_coroutine_threadsafe(_ident(), loop).result(5)


async def _ident() -> int:
    return threading.get_ident()


@pytest.mark.parametrize("mode", ["broker-loop", "private-loop"])
def test_expiry_resigns_then_reregisters_then_reelects(store, mode, request):
    loop = request.getfixturevalue("broker_loop") if mode == "broker-loop" else None
    layout.ensure_persistent_paths(store)
    journal = Journal()
    elected = []

    async def reelect():  # the controller's elect(), off the loop since it blocks
        journal.calls.append(("reelect", ()))
        elected.append(await asyncio.get_running_loop().run_in_executor(
            None, layout.register_controller_and_increment_epoch, store, INFO.id))

    manager = manager_for(store, journal, loop, reelect=reelect)
    first_epoch = manager.start()
    assert store.get("/brokers/ids/1")[0] == BrokerIdZNode.encode(INFO)  # first registration as given
    assert layout.register_controller_and_increment_epoch(store, INFO.id)[0] == 1
    old_session = store.session_id

    store.expire_session()
    wait_until(lambda: "reconnect" in journal.names, 10, "on_reconnect after the new session")
    assert journal.names == ["resign", "registered", "reelect", "reconnect"]
    data, stat = store.get("/brokers/ids/1")
    assert stat.ephemeral_owner == store.session_id != old_session
    assert journal.calls[1] == ("registered", (stat.czxid,))
    assert manager.broker_epoch == stat.czxid > first_epoch
    registered = BrokerIdZNode.decode(1, data)
    assert registered.timestamp_ms >= INFO.timestamp_ms  # Kafka writes the time of each registration
    assert data == BrokerIdZNode.encode(registered) and registered.endpoints == INFO.endpoints
    assert elected == [(2, 2)]  # /controller went with the old session; election ran again
    assert journal.threads == {loop_thread_id(manager.loop)}  # every callback on the loop
    manager.stop()


@pytest.mark.parametrize("mode", ["broker-loop", "private-loop"])
def test_reconnect_to_the_same_session_only_rereads(store, mode, request):
    loop = request.getfixturevalue("broker_loop") if mode == "broker-loop" else None
    layout.ensure_persistent_paths(store)
    journal = Journal()
    manager = manager_for(store, journal, loop)
    epoch = manager.start()
    store.lose_connection()
    wait_until(lambda: "reconnect" in journal.names, 10, "on_reconnect")
    assert journal.names == ["reconnect"]
    assert store.exists("/brokers/ids/1").czxid == epoch == manager.broker_epoch
    manager.stop()


def test_a_registration_gone_missing_is_restored_on_reconnect(store):
    layout.ensure_persistent_paths(store)
    journal = Journal()
    manager = manager_for(store, journal)
    epoch = manager.start()
    store.delete("/brokers/ids/1")  # e.g. an operator's mistake
    store.lose_connection()
    wait_until(lambda: "reconnect" in journal.names, 10, "on_reconnect")
    assert journal.names == ["registered", "reelect", "reconnect"]
    assert store.exists("/brokers/ids/1").czxid == manager.broker_epoch > epoch
    manager.stop()


def test_start_refuses_an_id_held_by_another_live_broker(backend, store):
    layout.ensure_persistent_paths(store)
    other = backend.connect()
    layout.register_broker(other, INFO)
    manager = manager_for(store, Journal())
    with pytest.raises(BrokerIdInUseError):
        manager.start()
    other.close()


def test_a_slow_callback_does_not_hold_up_the_store(store):
    """Callbacks run on the manager's loop, not on the store's event thread: while on_reconnect
    is stuck, the store still delivers watch events to everyone else."""
    layout.ensure_persistent_paths(store)
    release = threading.Event()
    journal = Journal()
    manager = manager_for(store, journal, reconnect=lambda: release.wait(10))
    manager.start()
    store.create("/watched", b"1")
    seen = []
    DataWatch(store, "/watched", lambda data, stat, event: seen.append(data))
    store.lose_connection()
    store.set("/watched", b"2")
    wait_until(lambda: store.drain_events() and seen[-1] == b"2", 10, "the watch to fire while on_reconnect blocks")
    assert not release.is_set()
    release.set()
    manager.stop()


def test_stopped_manager_ignores_session_events(store):
    layout.ensure_persistent_paths(store)
    journal = Journal()
    manager = manager_for(store, journal)
    manager.start()
    manager.stop()
    store.expire_session()
    store.drain_events()
    assert journal.names == []


# --- ZooKeeper only -------------------------------------------------------------------------------

def test_expiry_noticed_only_by_the_client_replaces_the_stale_registration(zk_backend):
    """kazoo's harness hook makes only the client believe its session expired: the old session,
    and its /brokers/ids/1, live on in the server until it times out. The manager must
    recognise the node as its own previous registration and replace it, not give up on
    'broker id in use' (the kazoo #491 / #355 situation)."""
    store = zk_backend.connect()
    layout.ensure_persistent_paths(store)
    journal = Journal()
    manager = manager_for(store, journal)
    first_epoch = manager.start()
    old_session = store.session_id
    store.expire_session(server_side=False)
    wait_until(lambda: "reconnect" in journal.names, 10, "on_reconnect after the new session")
    assert journal.names == ["resign", "registered", "reelect", "reconnect"]
    stat = store.exists("/brokers/ids/1")
    assert stat.ephemeral_owner == store.session_id != old_session
    assert stat.czxid == manager.broker_epoch > first_epoch
    manager.stop()


def test_real_expiry_deletes_the_registration_other_brokers_see(zk_backend):
    """Another broker's view: the expired broker's node disappears, then comes back with a new
    broker epoch."""
    store = zk_backend.connect()
    observer = zk_backend.connect()
    layout.ensure_persistent_paths(store)
    manager = manager_for(store, Journal())
    first_epoch = manager.start()
    seen: list[list[str] | None] = []
    ChildrenWatch(observer, "/brokers/ids", lambda children, event: seen.append(children))
    store.expire_session()
    wait_until(lambda: manager.broker_epoch != first_epoch, 10, "re-registration")
    wait_until(lambda: observer.drain_events() and seen[-1] == ["1"] and [] in seen, 10, "the observer to see both")
    assert layout.get_all_brokers_and_epochs(observer)[1][1] == manager.broker_epoch
    manager.stop()
