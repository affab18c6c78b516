"""The history file (kbroker/ui/history.py): bounded across a simulated month under a fake clock, charts read the
rolled-up tiers, old samples go, and everything survives a reopen."""
from __future__ import annotations

import sqlite3
from concurrent.futures import ThreadPoolExecutor

import pytest

from kbroker.ui.history import History, HistoryError, Round
from kbroker.ui.model import Rates
from kbroker.ui.sampler import Sampler

from .builders import FakeClock, commit, snapshot

DAY = 86400


def spacing(points) -> set[int]:
    return {(b[0] - a[0]) // 1000 for a, b in zip(points, points[1:])}


def test_the_file_stays_under_its_cap_across_a_month_and_charts_read_the_rollups(tmp_path):
    # 8 groups x 3 partitions sampled every 3 minutes for 30 days, maintained every 30 minutes, under a 1.5 MiB cap
    # that binds: the month holds more than that
    groups, partitions, every, cap = 8, 3, 180, 1536 * 1024
    clock = FakeClock()
    history = History(tmp_path / "history.db", cap_bytes=cap, clock=clock)
    sampler = Sampler(history, clock=clock)
    ends = {(f"t{g}", p): 0 for g in range(groups) for p in range(partitions)}
    sizes = []
    for round_ in range(30 * DAY // every):
        clock.advance(every)
        for key in ends:
            ends[key] += 1000
        behind = (round_ % 50) * 7  # each group's lag climbs and falls back
        sampler.ingest(snapshot(clock.ms, ends, rates=Rates(float(round_), 1.0, 2.0), commits=[
            commit(f"g{g}", f"t{g}", p, ends[(f"t{g}", p)] - behind - g, clock.ms - 1000)
            for g in range(groups) for p in range(partitions)]))
        if round_ % 10 == 9:
            sampler.maintain()
            sizes.append(history.size_bytes())
            assert sizes[-1] <= cap, f"day {round_ * every / DAY:.1f}: {sizes[-1]} bytes over the {cap} cap"
    assert max(sizes) > cap // 2  # the cap was what bounded the file, not the data's ages alone
    hour, day, week = (sampler.lag_chart("g1", span) for span in ("1h", "24h", "7d"))
    assert spacing(hour["total"]) == {every}  # raw samples
    assert spacing(day["total"]) == {300} and len(day["total"]) >= 280  # 5-minute buckets
    assert spacing(week["total"]) == {3600}  # hourly buckets, as far back as the cap left them
    # the month does not fit under the cap: every tier lost its oldest samples, in proportion to its age
    with sqlite3.connect(tmp_path / "history.db") as db:
        ages = [(clock.now - db.execute(f"SELECT min(ts) FROM partition_lag_{tier}").fetchone()[0]) / DAY
                for tier in ("raw", "m5", "h1")]
    assert all(0.3 < age / nominal < 0.9 for age, nominal in zip(ages, (1, 7, 30))), ages
    assert week["total"][0][0] <= (clock.now - 7 * DAY + 3600) * 1000  # a month shortened still holds the week
    # a bucket holds the largest lag of its samples: 50 rounds of 3 minutes make a saw with peaks of 49*7 per
    # partition, so each hour's bucket holds a peak or the rounds just before it
    assert max(v for _, v in week["total"]) == 3 * (49 * 7 + 1)
    assert max(v for _, v in hour["total"]) <= 3 * (49 * 7 + 1)
    per_partition = sampler.lag_chart("g1", "7d", per_partition=True)
    assert sorted(per_partition) == ["t1-0", "t1-1", "t1-2"] and spacing(per_partition["t1-0"]) == {3600}
    assert spacing(sampler.rate_chart("24h")["bytes_in"]) == {300}
    # the newest hour is still there after every drop: the oldest data went first
    assert hour["total"][-1][0] == clock.ms // 1000 * 1000
    # commits: Burrow's window of each partition is what is kept of them
    assert [len(w) for w in history.commit_windows(100).values()] == [10] * groups * partitions
    history.close()


def test_raw_samples_go_after_a_day_and_rollups_after_their_age(tmp_path):
    clock = FakeClock()
    with History(tmp_path / "h.db", clock=clock, raw_hours=1, five_minute_hours=3, hourly_hours=6) as history:
        for _ in range(8 * 60):  # a sample a minute for 8 hours
            clock.advance(60)
            history.add(Round(clock.ms, group_lags=[("g", "kafka", 5)]))
            if clock.now % 600 == 0:
                history.maintain()
        history.maintain()
        with sqlite3.connect(tmp_path / "h.db") as db:
            oldest = {tier: db.execute(f"SELECT min(ts) FROM group_lag_{tier}").fetchone()[0]
                      for tier in ("raw", "m5", "h1")}
        # raw rows go once past their age and rolled up (the rollup runs 2 minutes behind, by 5-minute buckets)
        assert clock.now - 3600 - 300 - 120 <= oldest["raw"] <= clock.now - 3600 + 60
        assert clock.now - 3 * 3600 - 300 <= oldest["m5"] <= clock.now - 3 * 3600 + 300
        assert clock.now - 6 * 3600 - 3600 <= oldest["h1"] <= clock.now - 6 * 3600 + 3600
        hour = history.group_lag_points("g", "kafka", "1h")
        assert len(hour) == 61 and spacing(hour) == {60}
        day = history.group_lag_points("g", "kafka", "24h")
        assert day[0][0] >= (clock.now - 3 * 3600 - 300) * 1000  # 5-minute buckets for 3 hours
        week = history.group_lag_points("g", "kafka", "7d")
        assert week[0][0] >= (clock.now - 6 * 3600 - 3600) * 1000 and spacing(week) == {3600}
        assert all(v == 5.0 for _, v in week)


def test_a_reopened_file_answers_what_was_stored(tmp_path):
    clock = FakeClock()
    path = tmp_path / "h.db"
    with History(path, clock=clock) as history:
        sampler = Sampler(history, clock=clock)
        for i in range(40):
            clock.advance(30)
            sampler.ingest(snapshot(clock.ms, {("t", 0): 100 * i}, rates=Rates(5.0, 6.0, 7.0),
                                    commits=[commit("g", "t", 0, 90 * i, clock.ms - 500)]))
        sampler.maintain()
        charts = (sampler.lag_chart("g", "1h"), sampler.lag_chart("g", "24h", per_partition=True),
                  sampler.rate_chart("1h"))
    with History(path, clock=clock) as history:
        sampler = Sampler(history, clock=clock)
        assert (sampler.lag_chart("g", "1h"), sampler.lag_chart("g", "24h", per_partition=True),
                sampler.rate_chart("1h")) == charts
        assert len(charts[0]["total"]) == 40
        assert history.log_end_at("t", 0, clock.ms - 15_000) == pytest.approx(3850)
        assert history.recent_log_ends(2)[("t", 0)] == [(clock.ms - 30_000, 3800), (clock.ms, 3900)]


def test_bad_settings_are_refused_with_a_message(tmp_path):
    with pytest.raises(ValueError, match="at least 1 MiB"):
        History(tmp_path / "a.db", cap_bytes=1000)
    with pytest.raises(ValueError, match="retention must grow"):
        History(tmp_path / "b.db", raw_hours=48, five_minute_hours=24)


def test_a_file_that_cannot_be_the_history_is_refused_with_a_message(tmp_path):
    not_sqlite = tmp_path / "notes.txt"
    not_sqlite.write_text("these are not the samples you are looking for\n" * 100)
    with pytest.raises(HistoryError, match="cannot use .*notes.txt as the history file"):
        History(not_sqlite)
    with pytest.raises(HistoryError, match="cannot use .*missing/h.db"):
        History(tmp_path / "missing" / "h.db")


def test_rounds_charts_and_maintenance_from_several_threads_at_once(tmp_path):
    clock = FakeClock()
    with History(tmp_path / "h.db", clock=clock) as history:
        start = clock.ms

        def write(group: str) -> None:
            for i in range(300):
                history.add(Round(start + 30_000 * i, group_lags=[(group, "kafka", i)],
                                  log_ends=[(group, 0, 10 * i)]))

        def read() -> None:
            for _ in range(100):
                history.group_lag_points("a", "kafka", "1h", start + 3_600_000)
                history.maintain()

        with ThreadPoolExecutor(3) as pool:
            for done in [pool.submit(write, "a"), pool.submit(write, "b"), pool.submit(read)]:
                done.result()
        for group in ("a", "b"):
            points = history.group_lag_points(group, "kafka", "1h", start + 299 * 30_000)
            assert [v for _, v in points] == [float(i) for i in range(299 - 120, 300)]
        assert history.log_end_at("b", 0, start + 45_000) == pytest.approx(15.0)


def test_when_the_log_end_passed_an_offset_is_read_from_the_rollups_once_raw_samples_are_gone(tmp_path):
    clock = FakeClock()
    first = clock.now
    with History(tmp_path / "h.db", clock=clock, raw_hours=1, five_minute_hours=3, hourly_hours=6) as history:
        for minute in range(5 * 60):  # a message a second, sampled every minute, from offset 6000 on
            clock.advance(60)
            history.add(Round(clock.ms, log_ends=[("t", 0, 6000 + 60 * (minute + 1))]))
            if minute % 10 == 9:
                history.maintain()
        written_at = (first + 60 * 60 * 3) * 1000  # offset 6000 + 3 hours of messages, 2 hours ago
        # raw: to the second
        assert history.passed_ms("t", 0, 6000 + 4 * 3600 + 0) == pytest.approx(written_at + 3600_000 + 1000)
        # 5-minute buckets (a bucket's largest log end stands at its end): within one sampling interval
        assert history.passed_ms("t", 0, 6000 + 3 * 3600) == pytest.approx(written_at + 1000, abs=60_000)
        # before every sample: back at the mean rate (a message a second), offset 0 100 minutes before the first
        assert history.passed_ms("t", 0, 0) == pytest.approx((first - 6000) * 1000, abs=120_000)
        assert history.passed_ms("t", 0, 6000 + 5 * 3600) is None  # not written yet
        assert history.passed_ms("u", 0, 5) is None  # never sampled
