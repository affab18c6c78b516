"""Several clients at once: each producer or consumer in its own process (spawned, so each has its own GIL and
librdkafka), started together behind a barrier; the figure is the bytes of all of them over the time from the
first start to the last finish.

Producers split the messages between them and each sends round-robin over all partitions; consumers split the
partitions (client i reads the partitions p with p % n == i, assign(), no group) and each checks its partitions'
offsets run 0, 1, 2, ... and that it got exactly the messages the producers put there.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from bench.harness import broker_load


class _Remote:
    """What broker_load.produce/consume need of a broker, inside a worker: the bootstrap and whether the
    broker processes still exist."""

    def __init__(self, bootstrap: str, pids: list[int]) -> None:
        self.bootstrap = bootstrap
        self.pids = pids

    def alive(self) -> bool:
        try:
            for pid in self.pids:
                os.kill(pid, 0)
        except OSError:
            return False
        return True


def split(total: int, n: int) -> list[int]:
    return [total // n + (1 if i < total % n else 0) for i in range(n)]


def per_partition(shares: list[int], partitions: int) -> list[int]:
    """Messages each partition holds after producers sent ``shares`` messages each, round-robin from 0."""
    counts = [0] * partitions
    for share in shares:
        for p, c in enumerate(split(share, partitions)):
            counts[p] += c
    return counts


def _worker(role: str, args: argparse.Namespace, bootstrap: str, pids: list[int], topic: str, acks: str,
            parts: list[int] | None, expected: int | None, barrier, results) -> None:
    broker = _Remote(bootstrap, pids)
    try:
        barrier.wait(60)
        start = time.monotonic()
        if role == "produce":
            measured = broker_load.produce(args, broker, topic, acks)
        else:
            measured = broker_load.consume(args, broker, topic, parts, expected)
        results.put({"start": start, "end": time.monotonic(), "messages": measured["messages"],
                     "bytes": measured["bytes"]})
    except BaseException as exc:  # reported to the parent: one failing client fails the scenario
        results.put({"error": f"{type(exc).__name__}: {exc}"})


def run(role: str, args: argparse.Namespace, target, topic: str, acks: str, clients: int) -> dict:
    """``clients`` producers (args.messages split between them) or consumers (the partitions split between
    them) against ``target``; returns elapsed_s, messages, bytes as broker_load.produce does."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(clients)
    results = ctx.Queue()
    shares = split(args.messages, clients)
    counts = per_partition(shares, args.partitions)
    procs = []
    for i in range(clients):
        worker_args = argparse.Namespace(**vars(args))
        parts, expected = None, None
        if role == "produce":
            worker_args.messages = shares[i]
        else:
            parts = [p for p in range(args.partitions) if p % clients == i]
            expected = sum(counts[p] for p in parts)
        procs.append(ctx.Process(target=_worker, args=(role, worker_args, target.bootstrap, target.pids(), topic,
                                                       acks, parts, expected, barrier, results), daemon=True))
    for proc in procs:
        proc.start()
    got: list[dict] = []
    try:
        deadline = time.monotonic() + args.phase_timeout + 90
        while len(got) < clients:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"{clients - len(got)} of {clients} {role} clients did not finish")
            try:
                got.append(results.get(timeout=min(left, 1.0)))
            except Exception:  # queue.Empty: check the workers are still there
                if not any(p.is_alive() for p in procs) and results.empty():
                    raise RuntimeError(f"{role} clients exited without a result "
                                       f"(exit codes {[p.exitcode for p in procs]})") from None
    finally:
        reap(procs)
    refuse_failed(got, clients, f"{role} clients")
    return {"elapsed_s": max(r["end"] for r in got) - min(r["start"] for r in got),
            "messages": sum(r["messages"] for r in got), "bytes": sum(r["bytes"] for r in got)}


def reap(procs: Sequence[multiprocessing.process.BaseProcess]) -> None:
    """Client processes joined, or killed when they do not end within 10 s."""
    for proc in procs:
        proc.join(10)
        if proc.is_alive():
            proc.kill()


def refuse_failed(got: Sequence[Mapping[str, Any]], clients: int, what: str) -> None:
    """RuntimeError naming the first failure when any of ``clients`` reported an error."""
    errors = [r["error"] for r in got if "error" in r]
    if errors:
        raise RuntimeError(f"{len(errors)} of {clients} {what} failed, first: {errors[0]}")
