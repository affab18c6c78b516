"""Faults injected into a ZooKeeper-mode cluster under load: anything acknowledged lost, duplicated or reordered.

A chaos run (bench.reliability.chaos), JSON lines on stdout; exit 1 on any loss, duplicate, reordering, divergence,
transaction or offset violation.

    python -m bench.reliability.chaos [--minutes M] [--seed S] [--interval S] [--faults kill9,net,...] [--host-mode]
"""
from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

from bench.harness.results_meta import header
from bench.reliability.chaos.faults import HOST_KINDS, KINDS
from bench.reliability.chaos.run import Options, run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.reliability.chaos", description=__doc__)
    parser.add_argument("--minutes", type=float, default=10.0, help="how long faults are injected")
    parser.add_argument("--seed", type=int, default=None, help="the fault schedule's seed (default: random)")
    parser.add_argument("--interval", type=float, default=10.0, help="mean seconds between faults")
    parser.add_argument("--faults", default=None,
                        help=f"comma-separated kinds of {','.join(KINDS)} (default: all); with --host-mode of "
                             f"{','.join(HOST_KINDS)} (default: all of those)")
    parser.add_argument("--host-mode", action="store_true",
                        help="three simulated servers (127.0.0.2-4) of two broker processes each, one kbroker serve "
                             "with broker.processes=2 per server, instead of --brokers single brokers")
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--rate", type=float, default=40.0, help="messages per second per producer")
    parser.add_argument("--workdir", type=Path, default=None, help="where the run's directory goes (kept on failure)")
    args = parser.parse_args(argv)
    known = HOST_KINDS if args.host_mode else KINDS
    kinds = [k.strip() for k in (args.faults or ",".join(known)).split(",") if k.strip()]
    unknown = [k for k in kinds if k not in known]
    if unknown or not kinds:
        parser.error(f"unknown fault kinds {unknown}{' in host mode' if args.host_mode else ''}; choose from "
                     f"{', '.join(known)}")
    seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    print(json.dumps(header(__file__, argv)), flush=True)
    summary = run(Options(minutes=args.minutes, seed=seed, interval=args.interval, faults=kinds,
                          brokers=args.brokers, rate=args.rate, workdir=args.workdir, host_mode=args.host_mode))
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
