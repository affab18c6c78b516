"""Burrow's consumer-lag evaluation rules, as pure functions over a window of commits.

The rules are those of Burrow's wiki, "Consumer Lag Evaluation Rules", and of its evaluator
(core/internal/evaluator/caching.go, github.com/linkedin/Burrow). A partition is judged on the last ``window``
commits of its group (Burrow's ``intervals``, 10 by default), each with the lag it had when it was made:

* no current lag: OK, whatever came before;
* STOP: the time since the last commit is longer than the window spans (first to last commit), unless one of the
  partition's recent log-end samples was at or below the last committed offset (it caught up lately);
* any commit of the window with zero lag: OK (checked after STOP: an old zero must not hide a consumer gone away);
* REWIND: an offset lower than the one before it;
* STALL: commits that never move the offset while there is lag;
* WARN: offsets move but the lag never goes down from one commit to the next;
* otherwise OK.

One commit shows no trend, so a window needs ``min_commits`` (2) before any of the rules speaks: the analogue of
Burrow's ``minimum-complete``. Without it every lagging consumer would read STOP on the first sample after a start
(the time since its only commit is longer than the nothing its window spans).

A group is the worst of its partitions (OK < WARN < STOP < STALL < REWIND). Burrow folds every error into ERR; the
page names the error instead when all erring partitions agree (a stopped consumer shows STOP), and says ERR when they
are in different error states. A group with no partition known is NOTFOUND.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kbroker.ui.model import Status

PartitionStatus = Status  # one of OK, WARN, STOP, STALL, REWIND for a partition

# The order of severity among partition statuses (Burrow's StatusConstant order).
_SEVERITY: dict[Status, int] = {"NOTFOUND": 0, "OK": 1, "WARN": 2, "ERR": 3, "STOP": 4, "STALL": 5, "REWIND": 6}
_ERRORS = frozenset({"STOP", "STALL", "REWIND"})


@dataclass(frozen=True)
class CommitPoint:
    """One commit as the rules see it."""
    offset: int
    timestamp_ms: int
    lag: int | None  # the partition's log end when it was committed minus the offset (>= 0); None: log end unknown


def partition_status(window: Sequence[CommitPoint], current_lag: int, recent_log_ends: Sequence[int],
                     now_ms: int, *, min_commits: int = 2) -> PartitionStatus:
    """The status of one partition: ``window`` oldest first, ``recent_log_ends`` the last samples of its log end."""
    if len(window) < max(1, min_commits) or current_lag <= 0:
        return "OK"
    if stopped(window, now_ms) and not recently_caught_up(window, recent_log_ends):
        return "STOP"
    if any(point.lag == 0 for point in window):
        return "OK"
    if rewound(window):
        return "REWIND"
    if stalled(window):
        return "STALL"
    if lag_not_decreasing(window):
        return "WARN"
    return "OK"


def stopped(window: Sequence[CommitPoint], now_ms: int) -> bool:
    """No commit for longer than the window spans: the consumer stopped committing this partition."""
    first, last = window[0].timestamp_ms, window[-1].timestamp_ms
    return now_ms - last > last - first


def recently_caught_up(window: Sequence[CommitPoint], recent_log_ends: Sequence[int]) -> bool:
    """A recent log end at or below the last commit: the consumer had nothing to read a few samples ago."""
    last = window[-1].offset
    return any(end <= last for end in recent_log_ends)


def rewound(window: Sequence[CommitPoint]) -> bool:
    return any(later.offset < earlier.offset for earlier, later in zip(window, window[1:]))


def stalled(window: Sequence[CommitPoint]) -> bool:
    """Every commit of the window at the same offset (the caller has seen lag on all of them)."""
    return all(point.offset == window[0].offset for point in window)


def lag_not_decreasing(window: Sequence[CommitPoint]) -> bool:
    """The lag known at each commit never drops from one to the next (commits of unknown lag are skipped)."""
    lags = [point.lag for point in window if point.lag is not None]
    return all(later >= earlier for earlier, later in zip(lags, lags[1:]))


def group_status(partitions: Iterable[Status]) -> Status:
    """The group's status from its partitions': the worst, with several different errors reported as ERR."""
    statuses = list(partitions)
    if not statuses:
        return "NOTFOUND"
    errors = {status for status in statuses if status in _ERRORS}
    if len(errors) > 1:
        return "ERR"
    return max(statuses, key=_SEVERITY.__getitem__)
