"""bench.harness.latency.pacing on synthetic runs: the backlog flag says true for a target that falls behind the offered
rate (a queue growing over the run, or one left to drain after the last send) and false for one that keeps up,
whatever its tail (a stall at the very end) or a high but steady latency."""
from __future__ import annotations

import random

from bench.harness.latency import Paced, pacing
from bench.suite.report import backlog, figure, medians

RATE = 1000.0
SECONDS = 3.0


def run(latency_of) -> tuple[list[float], list[tuple[float, float]]]:
    """A 3 s run at 1000 msgs/s; ``latency_of(i, sent)`` gives message i's latency in s."""
    sent = [i / RATE for i in range(int(RATE * SECONDS))]
    return sent, [(s, s + latency_of(i, s)) for i, s in enumerate(sent)]


def finished(completed: list[tuple[float, float]]) -> float:
    return max(done for _, done in completed)


def test_a_target_that_keeps_up_has_no_backlog_whatever_its_tail():
    rng = random.Random(7)
    # 0.2-2 ms, a p99 of 20-30 ms, and the very last message 120 ms late (4 % of the run: the ack rate 96 %)
    sent, completed = run(lambda i, s: 0.12 if i == 2999 else rng.choice((0.02, 0.03)) if rng.random() < 0.01
                          else rng.uniform(0.0002, 0.002))
    p = pacing(sent, completed, finished(completed))
    assert p["backlog"] is False, p
    assert p["offered_msgs_s"] == 1000.0 and 950 < p["done_msgs_s"] < 1000 and p["after_last_send_ms"] == 120.0
    # a stall of 250 ms at the end of the run: the ack rate 8 % short, but the last quarter's median waits 1 ms
    sent, completed = run(lambda i, s: 0.25 if i == 2999 else 0.001)
    p = pacing(sent, completed, finished(completed))
    assert p["done_msgs_s"] < 0.95 * p["offered_msgs_s"] and p["last_quarter_p50_ms"] == 1.0
    assert p["backlog"] is False


def test_a_high_steady_latency_answered_on_time_is_no_backlog():
    sent, completed = run(lambda i, s: 0.040)  # 40 ms each, every one on time: the rate is kept
    p = pacing(sent, completed, finished(completed))
    assert p["first_quarter_p50_ms"] == p["last_quarter_p50_ms"] == 40.0
    assert p["backlog"] is False and p["done_msgs_s"] > 0.95 * RATE


def test_a_queue_growing_over_the_run_is_a_backlog():
    # 600 msgs/s served: message i waits until the server reaches it (the kbroker cluster's acks=all at 1000/s)
    sent, completed = run(lambda i, s: (i + 1) / 600.0 - s)
    p = pacing(sent, completed, finished(completed))
    assert p["backlog"] is True
    assert 590 < p["done_msgs_s"] < 610 and p["after_last_send_ms"] > 1900
    assert p["last_quarter_p50_ms"] > 2 * p["first_quarter_p50_ms"]
    # a slow growth (97 % served) that never reaches 2x ... still a backlog once the completions fall behind
    sent, completed = run(lambda i, s: 0.2 + (i + 1) / 970.0 - s)
    p = pacing(sent, completed, finished(completed))
    assert p["last_quarter_p50_ms"] < 2 * p["first_quarter_p50_ms"] and p["done_msgs_s"] < 0.95 * RATE
    assert p["backlog"] is True


def test_a_queue_standing_from_the_start_is_a_backlog():
    # 300 messages queued at once, then served at the offered rate: 300 ms waits from start to end
    sent, completed = run(lambda i, s: 0.3)
    p = pacing(sent, completed, finished(completed))
    assert p["first_quarter_p50_ms"] == p["last_quarter_p50_ms"] == 300.0
    assert p["done_msgs_s"] < 0.95 * RATE and p["backlog"] is True


def test_too_few_completions_give_no_verdict():
    p = pacing([0.0, 0.001, 0.002], [(0.0, 0.5), (0.001, 0.6)], 0.6)
    assert p["backlog"] is None and p["done_msgs_s"] is not None
    assert pacing([], [], 0.0)["backlog"] is None


def test_the_latency_figures_and_the_table_cell():
    sent = [i / RATE for i in range(3000)]
    acked: list[float | None] = [(i + 1) / 600.0 for i in range(3000)]
    acked[5] = None  # failed
    paced = Paced(sent=sent, acked=acked, failed=1, flushed=5.0)
    figures = paced.figures()
    assert figures["messages"] == 2999 and figures["failed"] == 1 and figures["backlog"] is True
    assert figures["flush_ms"] == round((5.0 - sent[-1]) * 1000, 3) and 590 < figures["acked_msgs_s"] < 610
    cell = figure({"scenario": "latency", **figures})
    assert cell.startswith(f"{figures['p50_ms']} / ") and "(backlog: 600 of 1000 msgs/s acknowledged" in cell
    assert backlog({"scenario": "latency", **figures, "backlog": False}) == ""
    # --rounds: a cell is a backlog when most of its rounds were
    cells = [{"target": "t", "sweep": "base", "scenario": "latency", "p50_ms": 1.0, "backlog": flag}
             for flag in (True, False, True)]
    (median,) = medians(cells)
    assert median["backlog"] is True and median["backlog_rounds"] == [True, False, True]
