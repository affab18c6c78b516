"""Latency at a fixed rate: send to acknowledgement (paced_run, paced_produce) and send to receive (end_to_end),
each value stamped with its send time; percentiles p50/p99/p999 in milliseconds, and whether the target kept up
with the offered rate (``pacing``).

A percentile alone does not say whether a run measured a broker's latency or the queue in front of it: with
linger.ms 0 and one request per connection on the broker at a time, a target slower than the offered rate
queues the messages in the client, and the latency then grows with the queue for as long as the run lasts
(p50 hundreds of ms for a target whose round trip is one). ``pacing`` says so next to the percentiles.
"""
from __future__ import annotations

import statistics
import struct
import threading
import time
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

# The backlog rule (``pacing``): messages waited (the median latency of the last quarter of the sends is above
# BACKLOG_WAIT_MS), and either that wait grew over the run (the last quarter's median is more than BACKLOG_GROWTH
# times the first quarter's) or the completions fell behind the sends (the achieved rate is more than
# BACKLOG_SHORTFALL below the offered rate).
BACKLOG_WAIT_MS = 10.0
BACKLOG_GROWTH = 2.0
BACKLOG_SHORTFALL = 0.05


def percentiles(values: list[float]) -> dict:
    if not values:
        return {"p50_ms": None, "p99_ms": None, "p999_ms": None}
    v = sorted(values)

    def q(f: float) -> float:
        return round(v[min(len(v) - 1, int(f * len(v)))] * 1000, 3)

    return {"p50_ms": q(0.50), "p99_ms": q(0.99), "p999_ms": q(0.999)}


def pacing(sent: list[float], completed: list[tuple[float, float]], finished: float) -> dict:
    """Whether the target kept up with a paced run: ``sent`` the send instants of every message (s, in order),
    ``completed`` (send instant, completion instant) of the messages that completed (acknowledged, or received),
    ``finished`` when the run's wait for the last of them ended.

    - ``offered_msgs_s``: the sends over the time from the first to the last (what the pacer achieved, the
      requested rate unless the client itself fell behind);
    - ``done_msgs_s``: the completed messages over the time from the first send to the last completion;
    - ``after_last_send_ms``: from the last send to ``finished`` (the final flush, or the wait for the last
      receipt);
    - ``first_quarter_p50_ms``, ``last_quarter_p50_ms``: the median latency of the first and the last quarter of
      the completed messages, in send order;
    - ``backlog``: True when messages queued up, by this rule: the last quarter's median is above BACKLOG_WAIT_MS
      and either more than BACKLOG_GROWTH times the first quarter's (the wait grew over the run: a queue that
      keeps growing) or ``done_msgs_s`` is more than BACKLOG_SHORTFALL below ``offered_msgs_s`` (the completions
      fell behind the sends: a queue left to drain after the last send). None with fewer than 4 completions.

    Why this rule: a target that keeps up answers most messages in a few milliseconds even on a loaded machine,
    so its last quarter's median stays under BACKLOG_WAIT_MS whatever its tail; a late answer or two at the end
    (the last message's p999, which can be 5 % of a short run) move neither the wait nor the medians. A target
    that falls behind queues messages in the client at (offered - achieved) per second: the wait grows from the
    first quarter to the last, and the queue left at the last send takes the flush past the run's 5 %. A high
    but steady latency with every completion on time (a slow disk, a long poll) is not a backlog."""
    out: dict = {"offered_msgs_s": None, "done_msgs_s": None, "after_last_send_ms": None,
                 "first_quarter_p50_ms": None, "last_quarter_p50_ms": None, "backlog": None}
    if not sent:
        return out
    if len(sent) > 1 and sent[-1] > sent[0]:
        out["offered_msgs_s"] = round((len(sent) - 1) / (sent[-1] - sent[0]), 1)
    out["after_last_send_ms"] = round(max(0.0, finished - sent[-1]) * 1000, 3)
    if not completed:
        return out
    ordered = sorted(completed)
    last_done = max(done for _, done in ordered)
    if last_done > sent[0]:
        out["done_msgs_s"] = round(len(ordered) / (last_done - sent[0]), 1)
    quarter = len(ordered) // 4
    if quarter == 0:
        return out
    first = statistics.median(done - s for s, done in ordered[:quarter]) * 1000
    last = statistics.median(done - s for s, done in ordered[-quarter:]) * 1000
    out["first_quarter_p50_ms"], out["last_quarter_p50_ms"] = round(first, 3), round(last, 3)
    offered, done_rate = out["offered_msgs_s"], out["done_msgs_s"]
    fell_behind = bool(offered and done_rate is not None and done_rate < (1 - BACKLOG_SHORTFALL) * offered)
    out["backlog"] = last > BACKLOG_WAIT_MS and (last > BACKLOG_GROWTH * first or fell_behind)
    return out


@dataclass
class Paced:
    """One paced run of a producer: each message's send instant (perf_counter s, in send order) and its
    acknowledgement instant (None: failed, or still unacknowledged when the flush gave up), and when the final
    flush returned."""
    sent: list[float] = field(default_factory=list)
    acked: list[float | None] = field(default_factory=list)
    failed: int = 0
    flushed: float = 0.0

    def latencies(self) -> list[float]:
        """Send to acknowledgement (s) of the acknowledged messages, in send order."""
        return [a - s for s, a in zip(self.sent, self.acked) if a is not None]

    def figures(self) -> dict:
        """The latency scenario's figures: percentiles, and ``pacing`` of the acknowledgements (``acked_msgs_s``,
        ``flush_ms``: from the last send to the final flush's return)."""
        p = pacing(self.sent, [(s, a) for s, a in zip(self.sent, self.acked) if a is not None], self.flushed)
        return {"messages": len(self.latencies()), "failed": self.failed, **percentiles(self.latencies()),
                "offered_msgs_s": p["offered_msgs_s"], "acked_msgs_s": p["done_msgs_s"],
                "flush_ms": p["after_last_send_ms"], "first_quarter_p50_ms": p["first_quarter_p50_ms"],
                "last_quarter_p50_ms": p["last_quarter_p50_ms"], "backlog": p["backlog"]}


def paced_run(broker, topic: str, acks: str, size: int, rate: float, seconds: float,
              stop_early: threading.Event | None = None) -> Paced:
    """Send ``rate`` x ``seconds`` messages at a fixed rate (linger.ms 0), each value stamped with its send
    time, then flush (30 s at most). ``stop_early``, once set, ends the sending sooner (a load beside a step
    of unknown length).

    The pacer sleeps between sends and a second thread blocks in ``poll``, which runs each delivery callback (and
    stamps the acknowledgement) as soon as librdkafka queues the report. One thread doing both would have to spin:
    ``poll``'s timeout has whole milliseconds (under 1 ms is 0, a busy loop), so at 1,000 msgs/s it would poll
    without pause between sends and take a core from the brokers it measures on a 2-core machine."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": acks, "linger.ms": 0,
                         "enable.idempotence": False})
    n = int(rate * seconds)
    run = Paced(sent=[0.0] * n, acked=[None] * n)
    acked = run.acked
    failed = [0]
    pad = b"\0" * max(0, size - 8)
    stop = threading.Event()

    def serve_reports() -> None:
        while not stop.is_set():
            producer.poll(0.05)

    poller = threading.Thread(target=serve_reports, name="delivery-reports", daemon=True)
    poller.start()
    try:
        start = time.perf_counter()
        for i in range(n):
            if stop_early is not None and stop_early.is_set():
                del run.sent[i:], run.acked[i:]
                break
            wait = start + i / rate - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            sent = run.sent[i] = time.perf_counter()

            def on_delivery(err, msg, i=i) -> None:
                if err is not None:
                    failed[0] += 1
                else:
                    acked[i] = time.perf_counter()

            producer.produce(topic, struct.pack(">d", sent) + pad, on_delivery=on_delivery)
    finally:
        stop.set()
        poller.join()
    left = producer.flush(30)
    run.flushed = time.perf_counter()
    run.failed = failed[0] + left
    return run


def paced_produce(broker, topic: str, acks: str, size: int, rate: float, seconds: float) -> tuple:
    """Send at a fixed rate; returns (acknowledgement latencies in s, failures)."""
    run = paced_run(broker, topic, acks, size, rate, seconds)
    return run.latencies(), run.failed


def end_to_end(broker, topic: str, acks: str, size: int, rate: float, seconds: float, partitions: int = 1) -> dict:
    """paced_run with a consumer in the same process: send-to-receive percentiles, and ``pacing`` of the receipts
    (``received_msgs_s``, ``drain_ms``: from the last send to the last receipt)."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"bench-e2e-{time.monotonic_ns()}",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 5, "enable.partition.eof": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    received: list[tuple[float, float]] = []  # (send instant, receive instant)
    stop = threading.Event()
    errors: list[str] = []

    def run() -> None:
        while not stop.is_set():
            # poll() returns at the first record (consume(n, timeout) would wait for n records or the timeout)
            m = consumer.poll(0.05)
            batch = [m] if m is not None else []
            for m in batch:
                now = time.perf_counter()
                if m.error() is not None:
                    if m.error().code() != KafkaError._PARTITION_EOF:
                        errors.append(str(m.error()))
                    continue
                received.append((struct.unpack(">d", m.value()[:8])[0], now))

    t = threading.Thread(target=run)
    t.start()
    failed = expected = 0
    sent: list[float] = []
    try:
        produced = paced_run(broker, topic, acks, size, rate, seconds)
        failed, sent = produced.failed, produced.sent
        expected = int(rate * seconds) - failed
        # wait for the rest while it keeps coming (5 s without a message: lost, e.g. by a broker under acks=0)
        seen, last_progress = len(received), time.monotonic()
        while len(received) < expected and time.monotonic() - last_progress < 5:
            time.sleep(0.05)
            if len(received) > seen:
                seen, last_progress = len(received), time.monotonic()
    finally:
        stop.set()
        t.join()
        consumer.close()
    p = pacing(sent, received, max((r for _, r in received), default=sent[-1] if sent else 0.0))
    return {"messages": len(received), "failed": failed, "lost": max(0, expected - len(received)),
            "errors": errors[:3], **percentiles([r - s for s, r in received]),
            "offered_msgs_s": p["offered_msgs_s"], "received_msgs_s": p["done_msgs_s"],
            "drain_ms": p["after_last_send_ms"], "first_quarter_p50_ms": p["first_quarter_p50_ms"],
            "last_quarter_p50_ms": p["last_quarter_p50_ms"], "backlog": p["backlog"]}
