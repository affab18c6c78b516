"""What a follower's fetch costs the leader per partition of its session, when nothing changed (issue 31).

A leader hosting ``--partitions`` replicated partitions (real logs in a temporary dir, a real replica manager,
purgatory and Fetch handler in this process, no network) answers a follower's fetch session: one full Fetch
(v12) opens it, then ``--fetches`` incremental ones name nothing new and do not wait (max_wait 0), as a caught-up
follower's after each answer. Kafka reads every partition of a session at every fetch (``IncrementalFetchContext``),
and so did kbroker until its sessions skipped their quiet partitions (``kbroker.replication.quiet``); the figure to
watch is microseconds per partition per fetch: a follower fetches after every append to any partition it follows,
so at thousands of partitions per session this bounds the rate of acks=all writes a leader can acknowledge.
``--moving`` makes each round an acks=all write's: one record appended to the next partition, the follower's fetch
that reads it, and its next one naming the new offset (which moves the high watermark). ``--profile`` prints the
functions that take the time.

    python -m bench.experiments.idle_fetch [--partitions 2000] [--fetches 50] [--moving] [--profile]
"""
from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import pstats
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from bench.harness.results_meta import header
from kbroker._core.appender import open_appender
from kbroker.config.broker import load_config
from kbroker.handlers import fetch as fetch_handler
from kbroker.handlers.fetch_sessions import FetchSessionCache
from kbroker.log import LogConfig, PartitionLog, TopicPartition
from kbroker.log.batches import build_batch
from kbroker.replicas.replica_manager import ReplicaManager
from kbroker.replication.partition import Partition
from kbroker.replication.purgatory import Purgatory
from kbroker.security.entity_configs import EntityConfigs
from kbroker.security.quotas import QuotaManager

FOLLOWER = 2
VERSION = 12
RECORD = bytes(build_batch([(None, bytes(1000), 1_000)]))  # one 1 KiB record


def leader(directory: Path, partitions: int) -> Any:
    """A Fetch handler's context over a replica manager leading ``partitions`` partitions of topic ``t``."""
    purgatory = Purgatory()
    replicas = ReplicaManager(1, load_config(), SimpleNamespace(), purgatory)
    appender = open_appender("pwritev")
    for i in range(partitions):
        tp = TopicPartition("t", i)
        p = Partition(tp, PartitionLog(directory / str(tp), tp, LogConfig(), appender), 1, single_replica=False)
        p.become_leader(0, [1, FOLLOWER], [1, FOLLOWER], zk_version=0, controller_epoch=1)
        replicas.partitions[tp] = p
    return SimpleNamespace(purgatory=purgatory, replicas=replicas, metrics=None, fetch_sessions=FetchSessionCache(),
                           security=SimpleNamespace(authorizer=None, quotas=QuotaManager(load_config(),
                                                                                         EntityConfigs(None))),
                           topics=SimpleNamespace(exists=lambda topic, index: topic == "t"))


def request(partitions: list[int], session_id: int, epoch: int, offset: int = 0) -> Any:
    parts = [SimpleNamespace(partition=i, fetch_offset=offset, partition_max_bytes=1 << 20, current_leader_epoch=0,
                             log_start_offset=-1) for i in partitions]
    return SimpleNamespace(replica_id=FOLLOWER, max_wait_ms=0, min_bytes=1, max_bytes=1 << 24, isolation_level=0,
                           session_id=session_id, session_epoch=epoch, forgotten_topics_data=[], rack_id="",
                           topics=[SimpleNamespace(topic="t", partitions=parts)] if parts else [])


def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="idle-fetch-") as tmp:
        async def main() -> dict[str, Any]:
            ctx = leader(Path(tmp), args.partitions)
            header = SimpleNamespace(api_version=VERSION)
            opened = fetch_handler.fetch(ctx, header, request(list(range(args.partitions)), 0, 0), None)
            session_id = opened["session_id"]
            profiler = cProfile.Profile() if args.profile else None
            started, cpu = time.perf_counter(), time.process_time()
            if profiler is not None:
                profiler.enable()
            epoch = 1
            for i in range(args.fetches):
                if not args.moving:
                    answer = fetch_handler.fetch(ctx, header, request([], session_id, epoch), None)
                    assert answer["error_code"] == 0 and not answer["responses"], answer
                    epoch += 1
                    continue
                index = i % args.partitions
                moved = ctx.replicas.partitions[TopicPartition("t", index)]
                offset = moved.log.log_end_offset
                ctx.replicas.append_as_leader(moved, memoryview(bytearray(RECORD)), -1)
                answer = fetch_handler.fetch(ctx, header, request([], session_id, epoch), None)
                [out] = answer["responses"][0]["partitions"]
                assert out["partition_index"] == index and out["records"], answer
                answer = fetch_handler.fetch(ctx, header, request([index], session_id, epoch + 1, offset + 1), None)
                [out] = answer["responses"][0]["partitions"]
                assert out["high_watermark"] == offset + 1, answer
                epoch += 2
            if profiler is not None:
                profiler.disable()
                pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(20)
            seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
            ctx.purgatory.close()
            per_round_ms = seconds / args.fetches * 1000
            fetches = 2 if args.moving else 1  # per round
            per_fetch_ms = per_round_ms / fetches
            return {"partitions": args.partitions, "moving": args.moving, "rounds": args.fetches,
                    "fetches": args.fetches * fetches, "ms_per_round": round(per_round_ms, 3),
                    "ms_per_fetch": round(per_fetch_ms, 3),
                    "us_per_partition": round(per_fetch_ms * 1000 / args.partitions, 3),
                    "cpu_ms_per_fetch": round(cpu / args.fetches / fetches * 1000, 3)}
        return asyncio.run(main())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.experiments.idle_fetch", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--partitions", type=int, default=2000)
    p.add_argument("--fetches", type=int, default=50, help="rounds: one fetch each, two with --moving")
    p.add_argument("--moving", action="store_true", help="each round, a record appended to one partition")
    p.add_argument("--profile", action="store_true", help="print the top functions (cProfile) to stderr")
    args = p.parse_args(argv)
    print(json.dumps(header(__file__, argv)))
    print(json.dumps({"kind": "result", "experiment": "idle_fetch", **run(args)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
