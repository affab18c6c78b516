"""The MetadataStore contract, written once and run on every store (``backends.BACKENDS``): the
embedded store in memory and journaled, and a real ZooKeeper through kazoo_bridge. Same calls,
same results, same exceptions: ZooKeeper's versions, errors, sequential and ephemeral nodes,
one-shot watches, atomic multi and sessions."""
from __future__ import annotations

import threading

import pytest

from tests.store_contract.backends import Recorder, wait_until
from zk_compat.store import (
    BadVersionError,
    CheckVersionOp,
    ChildrenWatch,
    CreateOp,
    DataWatch,
    DeleteOp,
    EventType,
    MetadataStore,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    SessionExpiredError,
    SessionState,
    SetDataOp,
    Transaction,
    WatchedEvent,
)


def test_store_is_a_metadata_store(store):
    assert isinstance(store, MetadataStore)
    assert store.session_id != 0


# --- create, get, set, delete with versions -------------------------------------------------------

def test_create_then_get_returns_data_and_fresh_stat(store):
    assert store.create("/a", b"hello") == "/a"
    data, stat = store.get("/a")
    assert data == b"hello"
    assert stat.version == 0 and stat.cversion == 0 and stat.aversion == 0 and stat.num_children == 0
    assert stat.czxid == stat.mzxid == stat.pzxid and stat.ctime == stat.mtime
    assert stat.ephemeral_owner == 0 and stat.data_length == 5


def test_null_data_is_kept_apart_from_empty_data(store):
    store.create("/null")
    store.create("/empty", b"")
    store.multi([CreateOp("/multi-null"), CreateOp("/multi-empty", b"")])
    assert store.get("/null")[0] is None and store.get("/multi-null")[0] is None
    assert store.get("/empty")[0] == b"" and store.get("/multi-empty")[0] == b""
    assert store.get("/null")[1].data_length == 0
    store.set("/empty", None)
    store.set("/null", b"")
    assert store.get("/empty")[0] is None and store.get("/null")[0] == b""
    store.multi([SetDataOp("/empty", b""), SetDataOp("/null", None)])
    assert store.get("/empty")[0] == b"" and store.get("/null")[0] is None


def test_set_bumps_version_and_mzxid_and_checks_expected_version(store):
    store.create("/a", b"1")
    _, before = store.get("/a")
    stat = store.set("/a", b"2", version=0)
    assert stat.version == 1 and stat.mzxid > before.mzxid and stat.czxid == before.czxid
    assert stat.mtime >= before.mtime and stat.data_length == 1
    with pytest.raises(BadVersionError):
        store.set("/a", b"3", version=0)
    assert store.set("/a", b"3").version == 2  # -1 matches any version
    assert store.get("/a") == (b"3", store.exists("/a"))


def test_parents_must_exist_unless_makepath(store):
    with pytest.raises(NoNodeError):
        store.create("/x/y", b"v")
    assert store.create("/x/y/z", b"v", makepath=True) == "/x/y/z"
    # missing parents get null data, as Kafka's createRecursive writes them
    assert store.get("/x")[0] is None and store.get("/x/y")[0] is None
    assert store.get("/x/y/z")[0] == b"v"
    assert store.create("/x/y/w", b"w", makepath=True) == "/x/y/w"  # parents already there
    with pytest.raises(NodeExistsError):
        store.create("/x/y/z", b"again", makepath=True)


def test_missing_nodes_are_no_node(store):
    with pytest.raises(NoNodeError) as info:
        store.get("/missing")
    assert info.value.path == "/missing"
    with pytest.raises(NoNodeError):
        store.set("/missing", b"")
    with pytest.raises(NoNodeError):
        store.delete("/missing")
    with pytest.raises(NoNodeError):
        store.delete("/missing", recursive=True)
    with pytest.raises(NoNodeError):
        store.get_children("/missing")
    assert store.exists("/missing") is None


def test_node_exists(store):
    store.create("/a")
    with pytest.raises(NodeExistsError) as info:
        store.create("/a", b"x")
    assert info.value.path == "/a" and info.value.code == -110
    with pytest.raises(NodeExistsError):
        store.create("/")


def test_delete_checks_version_and_children(store):
    store.create("/p")
    store.create("/p/c")
    with pytest.raises(NotEmptyError):
        store.delete("/p")
    store.set("/p/c", b"x")
    with pytest.raises(BadVersionError):
        store.delete("/p/c", version=0)
    store.delete("/p/c", version=1)
    store.delete("/p")
    assert store.exists("/p") is None


def test_recursive_delete_removes_the_subtree_and_checks_the_top_version(store):
    for path in ("/t/a/1", "/t/a/2", "/t/b", "/u/a/1", "/u/b"):
        store.create(path, makepath=True)
    store.create("/keep")
    store.set("/t", b"v1")
    with pytest.raises(BadVersionError):
        store.delete("/t", version=0, recursive=True)
    assert store.get_children("/t") == ["a", "b"]  # nothing deleted
    store.delete("/t", version=1, recursive=True)
    store.delete("/u", recursive=True)  # any version
    assert store.exists("/t") is None and store.exists("/u") is None and store.exists("/keep") is not None


def test_children_are_sorted_and_counted(store):
    store.create("/p")
    for name in ("b", "a", "c", "aa", "B"):
        store.create(f"/p/{name}")
    assert store.get_children("/p") == ["B", "a", "aa", "b", "c"]
    stat = store.exists("/p")
    assert stat.num_children == 5 and stat.cversion == 5
    store.delete("/p/b")
    stat2 = store.exists("/p")
    assert stat2.cversion == 6 and stat2.pzxid > stat.pzxid and stat2.version == 0


def test_invalid_paths_and_data_are_rejected_before_reaching_the_server(store):
    for bad in ("", "a", "/a/", "//a", "/a/../b", "/a\x00b", "/./a"):
        with pytest.raises(ValueError):
            store.create(bad)
        with pytest.raises(ValueError):
            store.get(bad)
    with pytest.raises(TypeError):
        store.create("/s", "text")  # type: ignore[arg-type]
    with pytest.raises(ValueError):  # ZooKeeper drops the connection on an oversized packet
        store.create("/big", b"x" * (1 << 20))
    assert store.create("/ok", bytearray(b"x" * 1000)) == "/ok"


# --- sequential nodes -----------------------------------------------------------------------------

def test_sequence_suffix_counts_creates_only_as_zookeeper_does(store):
    # ZooKeeper 3.8, measured: the suffix counts the creates under the parent, not the deletions;
    # the cversion it reports counts both (2 * creates - children, DataNode.copyStat)
    store.create("/config/changes", makepath=True)
    first = store.create("/config/changes/config_change_", b"1", sequence=True)
    second = store.create("/config/changes/config_change_", b"2", sequence=True)
    assert first == "/config/changes/config_change_0000000000"
    assert second == "/config/changes/config_change_0000000001"
    store.delete(first)
    assert store.exists("/config/changes").cversion == 3
    assert store.create("/config/changes/config_change_", sequence=True) == "/config/changes/config_change_0000000002"
    assert store.exists("/config/changes").cversion == 4
    store.create("/config/changes/plain")
    store.delete("/config/changes/plain")
    assert store.exists("/config/changes").cversion == 6
    assert store.create("/config/changes/config_change_", sequence=True) == "/config/changes/config_change_0000000004"
    assert store.exists("/config/changes").cversion == 7
    assert store.get(second)[0] == b"2"


def test_sequence_counters_are_per_parent(store):
    store.create("/a")
    store.create("/b")
    store.create("/a/x")
    assert store.create("/a/n-", sequence=True) == "/a/n-0000000001"
    assert store.create("/b/n-", sequence=True) == "/b/n-0000000000"
    assert store.create("/c/n-", sequence=True, makepath=True) == "/c/n-0000000000"
    assert store.create("/d/", sequence=True, makepath=True) == "/d/0000000000"
    assert store.get("/c")[0] is None


# --- ephemeral nodes and sessions -----------------------------------------------------------------

def test_ephemeral_nodes_vanish_when_their_session_closes(backend, store):
    other = backend.connect()
    other.create("/brokers/ids/1", b"{}", ephemeral=True, makepath=True)
    stat = store.exists("/brokers/ids/1")
    assert stat.ephemeral_owner == other.session_id != store.session_id
    seen = Recorder()
    store.get_children("/brokers/ids", watch=seen)
    other.close()
    assert store.exists("/brokers/ids/1") is None
    assert store.exists("/brokers/ids") is not None  # makepath parents are persistent
    store.drain_events()
    assert seen.events == [WatchedEvent(EventType.CHILD, "/brokers/ids")]
    with pytest.raises(SessionExpiredError):
        other.get("/brokers")
    with pytest.raises(SessionExpiredError):
        other.create("/x")


def test_ephemeral_nodes_cannot_have_children(store):
    store.create("/e", ephemeral=True)
    with pytest.raises(NoChildrenForEphemeralsError):
        store.create("/e/child")
    with pytest.raises(NoChildrenForEphemeralsError):
        store.create("/e/child/grandchild", makepath=True)


def test_session_ids_are_distinct(backend, store):
    other = backend.connect()
    assert other.session_id != store.session_id
    other.close()


def test_expire_session_drops_ephemerals_and_watches_and_reports_lost_then_connected(backend, store):
    states: list[SessionState] = []
    store.add_listener(states.append)
    store.create("/controller", b"x", ephemeral=True)
    store.create("/p")
    dropped = Recorder()
    store.get("/p", watch=dropped)
    old_id = store.session_id
    store.expire_session()
    store.drain_events()
    backend.assert_expired_then_connected(states)
    assert store.session_id != old_id
    assert store.exists("/controller") is None
    store.set("/p", b"changed")
    store.drain_events()
    assert dropped.events == []  # watches do not survive a lost session
    assert store.create("/controller", b"y", ephemeral=True) == "/controller"
    assert store.exists("/controller").ephemeral_owner == store.session_id


def test_lose_connection_keeps_session_ephemerals_and_watches(store):
    states: list[SessionState] = []
    store.add_listener(states.append)
    store.create("/e", ephemeral=True)
    store.create("/p", b"1")
    session_id = store.session_id
    seen = Recorder()
    store.get("/p", watch=seen)
    store.lose_connection()
    store.drain_events()
    assert states == [SessionState.SUSPENDED, SessionState.CONNECTED]
    assert store.session_id == session_id
    assert store.exists("/e").ephemeral_owner == session_id
    store.set("/p", b"2")
    store.drain_events()
    assert seen.events == [WatchedEvent(EventType.CHANGED, "/p")]


def test_a_new_session_reports_no_state_change(backend):
    """The session connect() establishes is not an event: a listener added at once hears
    nothing until the connection actually changes."""
    store = backend.connect()
    states: list[SessionState] = []
    store.add_listener(states.append)
    store.create("/x")
    store.drain_events()
    assert states == []
    store.close()


def test_removed_listener_is_not_called(store):
    states: list[SessionState] = []
    store.add_listener(states.append)
    store.remove_listener(states.append)
    store.lose_connection()
    store.drain_events()
    assert states == []


# --- watches --------------------------------------------------------------------------------------

# (whether /a exists first, the read that arms the watch, the changes, the one event they fire)
ONE_SHOT_WATCHES = {
    "get-fires-changed-once": (True, "get", [("set", b"2"), ("set", b"3")], EventType.CHANGED),
    "exists-on-a-missing-node-fires-created": (False, "exists", [("create",)], EventType.CREATED),
    "get-fires-deleted": (True, "get", [("delete",)], EventType.DELETED),
}


@pytest.mark.parametrize("exists, arm, changes, fired", ONE_SHOT_WATCHES.values(), ids=ONE_SHOT_WATCHES.keys())
def test_a_data_watch_fires_once_after_the_change(store, exists, arm, changes, fired):
    if exists:
        store.create("/a", b"1")
    seen = Recorder()
    found = getattr(store, arm)("/a", watch=seen)
    assert (found is not None) == exists
    for change, *args in changes:
        getattr(store, change)("/a", *args)
    store.drain_events()
    assert seen.events == [WatchedEvent(fired, "/a")]


def test_child_watch_fires_child_then_deleted_for_the_node_itself(store):
    store.create("/p")
    seen = Recorder()
    store.get_children("/p", watch=seen)
    store.create("/p/c")
    store.set("/p", b"data changes do not fire child watches")
    store.get_children("/p", watch=seen)
    store.delete("/p/c")
    store.get_children("/p", watch=seen)
    store.delete("/p")
    store.drain_events()
    assert seen.events == [WatchedEvent(EventType.CHILD, "/p"), WatchedEvent(EventType.CHILD, "/p"),
                           WatchedEvent(EventType.DELETED, "/p")]


def test_same_watcher_registered_twice_fires_once(store):
    store.create("/a")
    seen = Recorder()
    store.get("/a", watch=seen)
    store.exists("/a", watch=seen)
    store.get_children("/a", watch=seen)
    store.delete("/a")
    store.drain_events()
    assert seen.events == [WatchedEvent(EventType.DELETED, "/a")]


def test_different_watchers_on_one_node_each_fire(store):
    store.create("/a")
    first, second = Recorder(), Recorder()
    store.get("/a", watch=first)
    store.exists("/a", watch=second)
    store.set("/a", b"x")
    store.drain_events()
    assert first.events == second.events == [WatchedEvent(EventType.CHANGED, "/a")]


def test_a_watch_armed_right_after_an_event_catches_the_next_change(store):
    """Each change fires the watch armed just before it, even when the event of the previous
    change is still being delivered while the watch is armed again."""
    store.create("/a", b"0")
    store.create("/p")
    data_seen, child_seen = Recorder(), Recorder()
    for i in range(1, 151):
        store.get("/a", watch=data_seen)
        store.get_children("/p", watch=child_seen)
        store.set("/a", str(i).encode())
        store.create(f"/p/c{i}")
    store.drain_events()
    assert data_seen.events == [WatchedEvent(EventType.CHANGED, "/a")] * 150
    assert child_seen.events == [WatchedEvent(EventType.CHILD, "/p")] * 150


def test_get_many_reads_each_node_and_watches_the_missing_ones_for_creation(store):
    """get_many: each node's data and stat as get gives them, None for a missing one; the watch fires on a change
    of a node read and on the creation of a missing one, once each."""
    store.create("/a", b"1")
    store.create("/n")  # null data
    seen = Recorder()
    found = store.get_many(["/a", "/missing", "/n"], watch=seen)
    assert [f if f is None else f[0] for f in found] == [b"1", None, None]
    assert found[0] == store.get("/a") and found[2] == store.get("/n")
    store.set("/a", b"2")
    store.create("/missing", b"x")
    store.set("/missing", b"y")  # the creation consumed that watch
    store.drain_events()
    assert sorted(seen.events, key=lambda e: e.path) == [WatchedEvent(EventType.CHANGED, "/a"),
                                                         WatchedEvent(EventType.CREATED, "/missing")]
    assert store.get_many([]) == []
    many = [f"/m{i}" for i in range(300)]
    for path in many[::2]:
        store.create(path, path.encode())
    assert [f and f[0] for f in store.get_many(many)] == [p.encode() if i % 2 == 0 else None
                                                          for i, p in enumerate(many)]


def test_failed_get_sets_no_watch(store):
    seen = Recorder()
    with pytest.raises(NoNodeError):
        store.get("/a", watch=seen)
    with pytest.raises(NoNodeError):
        store.get_children("/a", watch=seen)
    store.create("/a")
    store.create("/a/b")
    store.drain_events()
    assert seen.events == []


def test_watch_fires_after_the_change_is_visible(store):
    store.create("/a", b"old")
    observed = []
    done = threading.Event()

    def watcher(event):
        observed.append(store.get(event.path)[0])
        done.set()

    store.get("/a", watch=watcher)
    store.set("/a", b"new")
    assert done.wait(5)
    assert observed == [b"new"]


def test_watches_of_another_session_fire(backend, store):
    store.create("/a")
    other = backend.connect()
    seen = Recorder()
    other.get("/a", watch=seen)
    store.set("/a", b"x")
    other.drain_events()
    assert seen.events == [WatchedEvent(EventType.CHANGED, "/a")]
    other.close()


def test_a_failing_callback_does_not_stop_delivery(store):
    store.create("/a")
    seen = Recorder()

    def broken(event):
        raise RuntimeError("boom")

    store.get("/a", watch=broken)
    store.exists("/a", watch=seen)
    store.set("/a", b"x")
    store.drain_events()
    assert seen.events == [WatchedEvent(EventType.CHANGED, "/a")]


# --- multi ----------------------------------------------------------------------------------------

def test_multi_is_all_or_nothing(store):
    store.create("/controller_epoch", b"0")
    store.set("/controller_epoch", b"1")  # version 1 now
    seen = Recorder()
    store.exists("/controller", watch=seen)
    with pytest.raises(BadVersionError) as info:
        store.multi([CreateOp("/controller", b"me", ephemeral=True),
                     SetDataOp("/controller_epoch", b"2", version=0)])
    assert info.value.failed_op_index == 1 and info.value.path == "/controller_epoch"
    assert isinstance(info.value.results[0], RolledBackError) and info.value.results[1] is info.value
    assert store.exists("/controller") is None
    assert store.get("/controller_epoch") == (b"1", store.exists("/controller_epoch"))
    assert store.exists("/controller_epoch").version == 1
    store.drain_events()
    assert seen.events == []


def test_multi_reports_the_first_failing_operation(store):
    store.create("/a")
    with pytest.raises(NodeExistsError) as info:
        store.multi([CreateOp("/b"), CreateOp("/a"), DeleteOp("/missing"), CheckVersionOp("/a", 7)])
    assert info.value.failed_op_index == 1
    assert len(info.value.results) == 4
    assert [type(r) for i, r in enumerate(info.value.results) if i != 1] == [RolledBackError] * 3
    assert store.exists("/b") is None


def test_pipelined_multis_are_each_atomic_and_answered_in_order(store):
    """Many multis at once (the controller's batched partition-state writes): each applies all or nothing, and
    each outcome is its results or its own error, in the order sent."""
    store.create("/s1", b"0")
    store.create("/s2", b"0")
    outcomes = store.multi_pipelined([
        [SetDataOp("/s1", b"1", version=0), CreateOp("/s1-log")],
        [SetDataOp("/s2", b"1", version=5), CreateOp("/s2-log")],  # stale version: none of it applies
        [],
        [CreateOp("/s3", b"x")],
    ])
    assert len(outcomes) == 4
    assert outcomes[0][0].version == 1 and outcomes[0][1] == "/s1-log"
    assert isinstance(outcomes[1], BadVersionError) and outcomes[1].failed_op_index == 0
    assert outcomes[2] == [] and outcomes[3] == ["/s3"]
    assert store.get("/s1")[0] == b"1" and store.get("/s2")[0] == b"0"
    assert store.exists("/s2-log") is None and store.get("/s3")[0] == b"x"


def test_multi_success_applies_everything_with_one_zxid(store):
    store.create("/controller_epoch", b"0")
    results = store.multi([CheckVersionOp("/controller_epoch", 0),
                           CreateOp("/controller", b"me", ephemeral=True),
                           SetDataOp("/controller_epoch", b"1", 0),
                           CreateOp("/controller_epoch_child_", sequence=True),
                           DeleteOp("/controller_epoch_child_0000000002")])
    assert results[0] is True and results[1] == "/controller"
    assert results[2].version == 1
    assert results[3] == "/controller_epoch_child_0000000002"  # cversion of / counts the two creates
    assert results[4] is True
    assert store.exists("/controller").czxid == results[2].mzxid  # one zxid for the whole multi
    assert store.exists("/controller").ephemeral_owner == store.session_id


def test_multi_ops_see_earlier_ops_of_the_same_multi(store):
    results = store.multi([CreateOp("/p"), CreateOp("/p/q-", sequence=True), CreateOp("/p/q-", sequence=True),
                           DeleteOp("/p/q-0000000000")])
    assert results == ["/p", "/p/q-0000000000", "/p/q-0000000001", True]
    assert store.get_children("/p") == ["q-0000000001"]


def test_check_op_on_missing_node_is_no_node(store):
    with pytest.raises(NoNodeError) as info:
        store.multi([CheckVersionOp("/nope", 0)])
    assert info.value.failed_op_index == 0


def test_empty_multi(store):
    assert store.multi([]) == []


def test_transaction_builder_commits_through_multi(store):
    store.create("/e", b"0")
    results = Transaction(store).check("/e", 0).set_data("/e", b"1", 0).create("/f").delete("/f").commit()
    assert results[0] is True and results[2] == "/f" and results[3] is True
    assert store.get("/e")[0] == b"1"


# --- threads --------------------------------------------------------------------------------------

def test_concurrent_compare_and_set_loses_no_update(backend, store):
    sessions = [store] + [backend.connect() for _ in range(3)]
    store.create("/counter", b"0")

    def bump(session, times):
        for _ in range(times):
            while True:
                data, stat = session.get("/counter")
                try:
                    session.set("/counter", str(int(data) + 1).encode(), stat.version)
                    break
                except BadVersionError:
                    continue

    threads = [threading.Thread(target=bump, args=(s, 50)) for s in sessions]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    data, stat = store.get("/counter")
    assert data == b"200" and stat.version == 200
    for s in sessions[1:]:
        s.close()


# --- re-arming watch helpers ----------------------------------------------------------------------

def test_data_watch_follows_a_node_through_changes_and_absence(store):
    calls = []
    store.create("/c", b"1")
    watch = DataWatch(store, "/c", lambda data, stat, event: calls.append((data, event and event.type)))
    store.set("/c", b"2")
    store.drain_events()
    store.delete("/c")
    store.drain_events()
    store.create("/c", b"3")
    store.drain_events()
    assert calls == [(b"1", None), (b"2", EventType.CHANGED), (None, EventType.DELETED), (b"3", EventType.CREATED)]
    watch.stop()
    store.set("/c", b"4")
    store.drain_events()
    assert len(calls) == 4


def test_data_watch_stops_when_func_returns_false(store):
    calls = []
    store.create("/c", b"1")

    def func(data, stat, event):
        calls.append(data)
        return False if data == b"2" else None

    watch = DataWatch(store, "/c", func)
    store.set("/c", b"2")
    store.drain_events()
    store.set("/c", b"3")
    store.drain_events()
    assert calls == [b"1", b"2"] and watch.stopped


def test_data_watch_rearms_after_session_expiry(store):
    calls = []
    store.create("/c", b"1")
    DataWatch(store, "/c", lambda data, stat, event: calls.append(data))
    store.expire_session()
    store.drain_events()
    store.set("/c", b"2")
    store.drain_events()
    assert calls[0] == b"1" and calls[-1] == b"2"


def test_children_watch_reports_children_and_absence(store):
    calls = []
    ChildrenWatch(store, "/brokers/ids", lambda children, event: calls.append(children))
    store.create("/brokers/ids", makepath=True)
    store.drain_events()
    store.create("/brokers/ids/1", ephemeral=True)
    store.drain_events()
    store.create("/brokers/ids/0", ephemeral=True)
    store.drain_events()
    store.delete("/brokers/ids/1")
    store.drain_events()
    assert calls == [None, [], ["1"], ["0", "1"], ["0"]]


def test_children_watch_sees_another_sessions_ephemerals_come_and_go(backend, store):
    calls = []
    store.create("/brokers/ids", makepath=True)
    ChildrenWatch(store, "/brokers/ids", lambda children, event: calls.append(children))
    other = backend.connect()
    other.create("/brokers/ids/7", ephemeral=True)
    store.drain_events()
    other.close()
    wait_until(lambda: store.drain_events() and calls[-1] == [], 10, "the ephemeral to go")
    assert calls[0] == [] and ["7"] in calls
