"""The sampler's arithmetic on hand-built snapshots (kbroker/ui/sampler.py): lag, lag in seconds, last commit,
owner, Burrow's statuses over rounds, charts and rates, and a restart."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from kbroker.ui.history import History
from kbroker.ui.model import Group, Member, Rates
from kbroker.ui.sampler import Sampler

from .builders import FakeClock, commit, kafka_group, snapshot


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def history(tmp_path, clock):
    with History(tmp_path / "history.db", clock=clock) as h:
        yield h


def test_lag_last_commit_and_owner_of_each_partition(history, clock):
    sampler = Sampler(history, clock=clock)
    group = kafka_group("billing", ("app", "/10.0.0.7", [("orders", 0), ("orders", 1), ("orders", 2)]))
    zk = Group(name="legacy", storage="zookeeper", state="Active", members=(),
               owners=(("orders", 0, "legacy_host-1600000000000-ab12cd34-0"),))
    sampler.ingest(snapshot(clock.ms, {("orders", 0): 500, ("orders", 1): 40, ("orders", 2): 70}, groups=[group, zk],
                            commits=[commit("billing", "orders", 0, 450, clock.ms - 3000),
                                     commit("billing", "orders", 1, 45, clock.ms - 2000),  # past the log end
                                     commit("legacy", "orders", 0, 100, clock.ms - 9000, "zookeeper")]))
    billing = sampler.group("billing")
    assert billing is not None
    by_partition = {p.partition: p for p in billing.partitions}
    assert (by_partition[0].committed, by_partition[0].log_end, by_partition[0].lag) == (450, 500, 50)
    assert by_partition[1].lag == 0  # never below zero
    assert (by_partition[2].committed, by_partition[2].lag, by_partition[2].last_commit_ms) == (-1, 70, None)
    assert by_partition[0].owner == "app/10.0.0.7"
    assert (billing.total_lag, billing.last_commit_ms, billing.state, billing.storage) == (120, clock.ms - 2000,
                                                                                          "Stable", "kafka")
    legacy = sampler.group("legacy")
    assert legacy is not None and legacy.storage == "zookeeper"
    assert legacy.partitions[0].owner == "legacy_host-1600000000000-ab12cd34-0"
    assert (legacy.total_lag, legacy.last_commit_ms) == (400, clock.ms - 9000)
    assert [g.name for g in sampler.groups()] == ["billing", "legacy"]


def test_a_zookeeper_group_s_owner_is_its_owner_node_s_consumer_id(history, clock):
    """The collector lists a ZooKeeper group's consumers as members too (member and client id the consumer id, no
    host): the owner shown is still the owner node's consumer id."""
    consumer = "legacy_host-1600000000000-ab12cd34-0"
    zk = Group(name="legacy", storage="zookeeper", state="Active",
               members=(Member(consumer, consumer, "", (("orders", 0),)),), owners=(("orders", 0, consumer),))
    sampler = Sampler(history, clock=clock)
    sampler.ingest(snapshot(clock.ms, {("orders", 0): 500}, groups=[zk],
                            commits=[commit("legacy", "orders", 0, 100, clock.ms - 9000, "zookeeper")]))
    legacy = sampler.group("legacy")
    assert legacy is not None and [p.owner for p in legacy.partitions] == [consumer]


def test_lag_seconds_is_how_long_ago_the_log_end_passed_the_committed_offset(history, clock):
    sampler = Sampler(history, clock=clock)
    start = clock.ms
    for end in (0, 300, 600):  # 10 messages a second, sampled every 30 s
        sampler.ingest(snapshot(clock.ms, {("t", 0): end}, commits=[commit("g", "t", 0, 150, start)]))
        clock.advance(30)
    view = sampler.group("g")
    assert view is not None
    # offset 150 was written when the log end went past it: 15.1 s after the first sample (150 + 1 of 300 in 30 s),
    # and the last sample was taken at 60 s
    assert view.partitions[0].lag_seconds == pytest.approx(60 - 15.1)
    assert view.lag_seconds == pytest.approx(60 - 15.1)
    # past every in-memory sample: the history answers the same (a restart loses nothing)
    assert history.passed_ms("t", 0, 150) == pytest.approx(start + 15_100)


def test_a_caught_up_group_has_zero_lag_seconds_and_an_unknown_partition_none(history, clock):
    sampler = Sampler(history, clock=clock)
    sampler.ingest(snapshot(clock.ms, {("t", 0): 80}, commits=[commit("g", "t", 0, 80, clock.ms)]))
    view = sampler.group("g")
    assert view is not None and view.partitions[0].lag_seconds == 0.0 and view.lag_seconds == 0.0


def rounds(sampler: Sampler, clock: FakeClock, end: int, offset: int, committed_ms: int | None = None) -> None:
    """One round 30 s on: log end ``end``, and the group's commit of ``offset`` a second before (or at
    ``committed_ms``: a commit the store still holds from an earlier round)."""
    clock.advance(30)
    at = clock.ms - 1000 if committed_ms is None else committed_ms
    sampler.ingest(snapshot(clock.ms, {("t", 0): end}, commits=[commit("g", "t", 0, offset, at)]))


def status(sampler: Sampler, group: str = "g") -> str:
    view = sampler.group(group)
    assert view is not None
    return view.status


def test_a_consumer_that_stops_turns_stop_then_ok_when_it_resumes(history, clock):
    sampler = Sampler(history, clock=clock)
    end = 0
    for _ in range(10):  # keeping up: reads everything that arrives
        end += 100
        rounds(sampler, clock, end, end)
    assert status(sampler) == "OK"
    last, last_ms = end, clock.ms - 1000
    for i in range(30):  # stopped: the log end moves on, the store holds the last commit
        end += 100
        rounds(sampler, clock, end, last, last_ms)
        if i < 9:  # the log end was at its offset a few samples ago (Burrow: not stopped yet)
            assert status(sampler) == "OK"
    assert status(sampler) == "STOP"
    for _ in range(3):  # resumed: catching up
        last += 500
        end += 100
        rounds(sampler, clock, end, min(last, end))
    assert status(sampler) == "OK"


def test_commits_that_do_not_move_while_messages_wait_turn_stall(history, clock):
    sampler = Sampler(history, clock=clock)
    for i in range(5):
        rounds(sampler, clock, 1000 + 100 * i, 400)
    assert status(sampler) == "STALL"


def test_an_offset_going_back_turns_rewind_and_lag_growing_turns_warn(history, clock):
    sampler = Sampler(history, clock=clock)
    rewind, warn = [500, 600, 300, 350], [100, 150, 200, 250]
    for i, (r, w) in enumerate(zip(rewind, warn)):
        clock.advance(30)
        end = 1000 + 200 * i
        sampler.ingest(snapshot(clock.ms, {("t", 0): end}, commits=[commit("r", "t", 0, r, clock.ms - 1000),
                                                                    commit("w", "t", 0, w, clock.ms - 1000)]))
    assert (status(sampler, "r"), status(sampler, "w")) == ("REWIND", "WARN")


def test_the_same_commit_seen_in_two_rounds_is_stored_once(history, clock):
    sampler = Sampler(history, clock=clock)
    committed_at = clock.ms
    for end in (100, 200, 300):
        clock.advance(30)
        sampler.ingest(snapshot(clock.ms, {("t", 0): end}, commits=[commit("g", "t", 0, 50, committed_at)]))
    windows = history.commit_windows(10)
    assert [(p.offset, p.timestamp_ms) for p in windows[("g", "kafka", "t", 0)]] == [(50, committed_at)]


def test_a_name_stored_both_ways_is_two_groups(history, clock):
    sampler = Sampler(history, clock=clock)
    sampler.ingest(snapshot(clock.ms, {("t", 0): 100}, commits=[commit("same", "t", 0, 10, clock.ms),
                                                                commit("same", "t", 0, 90, clock.ms, "zookeeper")]))
    assert [(g.name, g.storage, g.total_lag) for g in sampler.groups()] == [("same", "kafka", 90),
                                                                             ("same", "zookeeper", 10)]
    view = sampler.group("same", "zookeeper")
    assert view is not None and view.total_lag == 10


def test_sparkline_charts_and_topic_rates(history, clock):
    sampler = Sampler(history, clock=clock)
    for i in range(70):
        clock.advance(30)
        ends = {("t", 0): 300 * i, ("t", 1): 150 * i}
        sampler.ingest(snapshot(clock.ms, ends, commits=[commit("g", "t", 0, 300 * i - i, clock.ms),
                                                         commit("g", "t", 1, 150 * i, clock.ms)],
                                rates=Rates(1000.0 + i, 2000.0, 15.0)))
    view = sampler.group("g")
    assert view is not None
    assert view.sparkline == tuple(range(10, 70))  # the last 60 total lags, oldest first
    assert sampler.topic_rates() == {"t": pytest.approx(15.0)}  # (300 + 150) messages in 30 s
    total = sampler.lag_chart("g", "1h")["total"]
    assert len(total) == 70 and total[-1] == (clock.ms // 1000 * 1000, 69.0)
    per_partition = sampler.lag_chart("g", "1h", per_partition=True)
    assert sorted(per_partition) == ["t-0", "t-1"]
    assert per_partition["t-1"][-1][1] == 0.0 and per_partition["t-0"][-1][1] == 69.0
    rates = sampler.rate_chart("1h")
    assert sorted(rates) == ["bytes_in", "bytes_out", "messages_in"]
    assert rates["bytes_in"][-1][1] == 1069.0 and len(rates["messages_in"]) == 70
    with pytest.raises(ValueError, match="unknown chart span"):
        sampler.lag_chart("g", "2h")  # type: ignore[arg-type]


def test_after_a_restart_windows_sparklines_and_charts_are_back(tmp_path, clock):
    path = tmp_path / "history.db"
    with History(path, clock=clock) as history:
        sampler = Sampler(history, clock=clock)
        for i in range(5):
            rounds(sampler, clock, 1000 + 100 * i, 400)  # stalling
        assert status(sampler) == "STALL"
        before = sampler.lag_chart("g", "1h")
    with History(path, clock=clock) as history:
        sampler = Sampler(history, clock=clock)
        assert sampler.groups() == []  # nothing until the first snapshot after the start
        assert sampler.lag_chart("g", "1h") == before
        rounds(sampler, clock, 1600, 400)
        view = sampler.group("g")
        assert view is not None
        assert view.status == "STALL"  # the window of commits came back from the file
        assert view.sparkline == (600, 700, 800, 900, 1000, 1200)
        assert len(history.commit_windows(10)[("g", "kafka", "t", 0)]) == 6


def test_rounds_and_reads_from_two_threads_take_turns(history, clock):
    sampler = Sampler(history, clock=clock)
    start = clock.ms

    def rounds_of(count: int) -> None:
        for i in range(1, count + 1):
            ends = {("t", p): 100 * i for p in range(20)}
            sampler.ingest(snapshot(start + 30_000 * i, ends, commits=[
                commit("g", "t", p, 100 * i - p, start + 30_000 * i) for p in range(20)]))

    def reads() -> list[int]:
        seen = []
        for _ in range(300):
            view = sampler.group("g")
            seen.append(view.total_lag if view else -1)
            sampler.topic_rates()
        return seen

    with ThreadPoolExecutor(2) as pool:
        writer, reader = pool.submit(rounds_of, 200), pool.submit(reads)
        writer.result()
        assert set(reader.result()) <= {-1, sum(range(20))}  # no read failed or saw another lag while rounds came
    view = sampler.group("g")
    assert view is not None and view.total_lag == sum(range(20)) and len(view.sparkline) == 60
