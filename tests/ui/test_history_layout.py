"""The history's per-partition lags, packed a row per group and time (kbroker/ui/history.py): what a round costs at
1,000 groups x 10 partitions, the packing read back exactly, buckets holding each partition's largest lag, and a
file from before the packing opened with its other series kept."""
from __future__ import annotations

import logging
import sqlite3

import pytest

from kbroker.ui.history import History, Round
from kbroker.ui.packed_rows import pack_pairs, unpack_pairs

from .builders import FakeClock

# 1,000 groups x 10 partitions: a round of raw samples (each partition's lag, each group's total, the log ends)
# took ~200 KB in a row per partition; packed, ~57 KB (measured from SQLite's page counts, which a given sequence of
# rounds fixes). The budget leaves room for SQLite's own page-fill variations, not for a row per partition again.
GROUPS, PARTITIONS = 1000, 10
BUDGET_BYTES_PER_ROUND = 80_000


def lag_round(ts_ms: int, i: int, groups: int = GROUPS, partitions: int = PARTITIONS) -> Round:
    lags = {(g, p): (g * 7 + p * 13 + i * 3) % 5000 for g in range(groups) for p in range(partitions)}
    return Round(ts_ms, log_ends=[("t", p, 100_000 + 50 * i) for p in range(partitions)],
                 group_lags=[(f"g{g}", "kafka", sum(lags[g, p] for p in range(partitions))) for g in range(groups)],
                 partition_lags=[(f"g{g}", "kafka", "t", p, lag) for (g, p), lag in lags.items()])


def test_a_round_of_1000_groups_by_10_partitions_stays_under_its_byte_budget(tmp_path):
    clock = FakeClock()
    with History(tmp_path / "h.db", clock=clock) as history:
        for i in range(3):  # the names and the tables' first pages
            clock.advance(30)
            history.add(lag_round(clock.ms, i))
        before = history.used_bytes()
        rounds = 10
        for i in range(3, 3 + rounds):
            clock.advance(30)
            history.add(lag_round(clock.ms, i))
        per_round = (history.used_bytes() - before) / rounds
    assert per_round < BUDGET_BYTES_PER_ROUND, f"{per_round:.0f} bytes a round"


@pytest.mark.parametrize("values", [{}, {0: 0}, {3: 1, 4: 127, 9: 128, 700: 2 ** 40, 701: -5, 100_000: 16_383}])
def test_packed_pairs_read_back_exactly(values):
    blob = pack_pairs(values)
    assert unpack_pairs(blob) == sorted(values.items())
    if values:
        with pytest.raises(ValueError, match="ends inside a number"):
            unpack_pairs(blob[:-1] + bytes([blob[-1] | 0x80]))


def test_per_partition_buckets_hold_each_partitions_largest_lag_before_and_after_the_rollup(tmp_path):
    clock = FakeClock(1_800_000_000 // 3600 * 3600)
    with History(tmp_path / "h.db", clock=clock) as history:
        sent: dict[tuple[int, int], list[int]] = {}  # (5-minute bucket, partition) -> lags
        for i in range(60):  # 30 minutes, a round every 30 s
            clock.advance(30)
            r = lag_round(clock.ms, i, groups=2, partitions=3)
            history.add(r)
            for g, _, _, p, lag in r.partition_lags:
                if g == "g1":
                    sent.setdefault((clock.ms // 1000 // 300 * 300, p), []).append(lag)
        expected = {p: [(b * 1000, float(max(v))) for (b, q), v in sorted(sent.items()) if q == p] for p in range(3)}
        on_the_fly = history.partition_lag_points("g1", "kafka", "24h")
        history.maintain()
        rolled = history.partition_lag_points("g1", "kafka", "24h")
        with sqlite3.connect(tmp_path / "h.db") as db:
            assert db.execute("SELECT count(*) FROM partition_lag_m5").fetchone()[0] > 0  # read from the rollup
    assert {tp[1]: list(points) for tp, points in on_the_fly.items()} == expected
    assert rolled == on_the_fly


def test_a_file_with_a_row_per_partition_loses_those_rows_with_a_warning_and_keeps_the_rest(tmp_path, caplog):
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:  # the layout before the packing: a row per (time, group, partition)
        db.execute("CREATE TABLE consumer_group(id INTEGER PRIMARY KEY, name TEXT NOT NULL, storage TEXT NOT NULL, "
                   "UNIQUE(name, storage))")
        db.execute("CREATE TABLE topic_partition(id INTEGER PRIMARY KEY, topic TEXT NOT NULL, "
                   "partition INTEGER NOT NULL, UNIQUE(topic, partition))")
        db.execute("CREATE TABLE meta(key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID")
        db.execute("INSERT INTO meta VALUES ('rolled:partition_lag:m5', 1800000000)")
        for tier in ("raw", "m5", "h1"):
            db.execute(f"CREATE TABLE partition_lag_{tier}(ts INTEGER NOT NULL, gid INTEGER NOT NULL, "
                       "pid INTEGER NOT NULL, lag INTEGER NOT NULL, PRIMARY KEY(ts, gid, pid)) WITHOUT ROWID")
            db.execute(f"CREATE TABLE group_lag_{tier}(ts INTEGER NOT NULL, gid INTEGER NOT NULL, "
                       "lag INTEGER NOT NULL, PRIMARY KEY(ts, gid)) WITHOUT ROWID")
        db.execute("INSERT INTO consumer_group VALUES (1, 'g', 'kafka')")
        db.execute("INSERT INTO topic_partition VALUES (1, 't', 0)")
        clock = FakeClock()
        db.execute("INSERT INTO group_lag_raw VALUES (?, 1, 42)", (int(clock.now) - 60,))
        db.execute("INSERT INTO partition_lag_raw VALUES (?, 1, 1, 42)", (int(clock.now) - 60,))
    with caplog.at_level(logging.WARNING, logger="kbroker.ui.history"), History(path, clock=clock) as history:
        assert f"history {path}: its per-partition lags are in the older layout" in caplog.text
        assert history.group_lag_points("g", "kafka", "1h") == (((int(clock.now) - 60) * 1000, 42.0),)
        assert history.partition_lag_points("g", "kafka", "1h") == {}
        history.add(Round(clock.ms, partition_lags=[("g", "kafka", "t", 0, 7)]))
        assert history.partition_lag_points("g", "kafka", "1h") == {("t", 0): ((clock.ms // 1000 * 1000, 7.0),)}
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="kbroker.ui.history"), History(path, clock=clock) as history:
        assert caplog.text == ""  # once: the file has the packed layout now
        assert len(history.partition_lag_points("g", "kafka", "1h")[("t", 0)]) == 1
