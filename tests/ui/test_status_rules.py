"""Burrow's evaluation rules (kbroker/ui/status_rules.py), one by one, on hand-written windows of commits."""
from __future__ import annotations

import pytest

from kbroker.ui.status_rules import CommitPoint, group_status, partition_status


def window(*commits: tuple[int, int, int | None]) -> list[CommitPoint]:
    """(offset, seconds, lag) -> commits one after another."""
    return [CommitPoint(offset, seconds * 1000, lag) for offset, seconds, lag in commits]


MOVING = window((100, 0, 10), (110, 10, 8), (120, 20, 5), (130, 30, 3))


def test_no_current_lag_is_ok_whatever_the_window_says():
    rewound = window((100, 0, 5), (50, 10, 5))
    assert partition_status(rewound, 0, [], 20_000) == "OK"


def test_a_consumer_keeping_up_with_lag_going_down_is_ok():
    assert partition_status(MOVING, 3, [200], 35_000) == "OK"


def test_any_zero_lag_in_the_window_is_ok():
    # offsets do not move and lag is there now, but it was zero at one commit
    stuck = window((100, 0, 0), (100, 10, 4), (100, 20, 9))
    assert partition_status(stuck, 9, [120], 25_000) == "OK"


def test_no_commit_for_longer_than_the_window_spans_is_stop():
    # the window spans 30 s; 31 s after the last commit it is STOP
    assert partition_status(MOVING, 50, [200, 210], 60_000) == "OK"
    assert partition_status(MOVING, 50, [200, 210], 61_001) == "STOP"


def test_stop_wins_over_an_old_zero_lag():
    caught_up_then_gone = window((100, 0, 0), (110, 10, 3), (120, 20, 6))
    assert partition_status(caught_up_then_gone, 40, [160, 170], 100_000) == "STOP"


def test_a_recent_log_end_at_the_last_commit_holds_stop_back():
    # the consumer read everything a few samples ago: not stopped yet (Burrow's checkIfRecentLagZero)
    assert partition_status(MOVING, 5, [130, 135], 100_000) == "OK"


def test_the_offset_going_back_is_rewind():
    assert partition_status(window((100, 0, 10), (120, 10, 8), (90, 20, 40)), 40, [], 25_000) == "REWIND"


def test_commits_that_do_not_move_while_lag_is_there_are_stall():
    assert partition_status(window((100, 0, 10), (100, 10, 20), (100, 20, 30)), 30, [130], 25_000) == "STALL"


def test_lag_growing_while_offsets_move_is_warn():
    assert partition_status(window((100, 0, 10), (110, 10, 20), (120, 20, 20), (130, 30, 35)), 35, [], 35_000) == "WARN"


def test_commits_of_unknown_lag_are_skipped_by_the_lag_rules():
    growing = window((100, 0, None), (110, 10, 20), (120, 20, None), (130, 30, 25))
    assert partition_status(growing, 25, [], 35_000) == "WARN"
    assert partition_status(window((100, 0, None), (110, 10, None)), 25, [], 15_000) == "WARN"


def test_one_commit_says_nothing_yet():
    assert partition_status(window((100, 0, 50)), 50, [], 1_000_000) == "OK"
    assert partition_status(window((100, 0, 50)), 50, [], 1_000_000, min_commits=1) == "STOP"
    assert partition_status([], 50, [], 1_000_000) == "OK"


@pytest.mark.parametrize(("statuses", "group"), [
    ([], "NOTFOUND"),
    (["OK", "OK"], "OK"),
    (["OK", "WARN"], "WARN"),
    (["OK", "WARN", "STOP"], "STOP"),
    (["STALL", "STALL", "OK"], "STALL"),
    (["REWIND", "WARN"], "REWIND"),
    (["STOP", "STALL"], "ERR"),
    (["STOP", "REWIND", "OK"], "ERR"),
])
def test_a_group_is_its_worst_partition_and_err_when_errors_differ(statuses, group):
    assert group_status(statuses) == group
