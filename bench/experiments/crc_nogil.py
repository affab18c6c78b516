"""Whether releasing the GIL around the CRC-32C check of large batches helps the event loop and other threads.

One process, one run, each figure with the GIL released from 64 KiB (``records.NOGIL_BYTES``, as shipped) and with
it held throughout.

    python -m bench.experiments.crc_nogil [--seconds 0.5] [--reps 7] [--sizes 16384,65536,262144,1048576]

The main thread stands for the event loop: per request some Python work (``--python-us`` of it) and
``records.validate`` of one client batch of --size bytes (the CRC is nearly all of validate's time). Beside it:

  alone        nothing else: what the GIL release itself costs
  python       a thread running Python without pause (the cleaner's record walk, ``batches.iter_records``, as a
               cleaner thread or a TLS thread's Python parts would): the loop's requests/s and p99 request time,
               and the other thread's records/s
  native       a thread hashing 1 MiB buffers (hashlib releases the GIL, as OpenSSL's record encryption does):
               the loop's requests/s and the other thread's MB/s

A released GIL lets the other thread run during the CRC, but the loop must then take it back, which a busy Python
thread holds for up to the switch interval (5 ms). The 16 KiB batches stay under the threshold in both variants:
their ratios are the noise of the run. JSON lines on stdout (medians), then a summary of the ratios nogil / gil.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import threading
import time

from bench.harness.batches import client_batch
from bench.harness.results_meta import header
from kbroker._core import records
from kbroker.log import batches

HELD = 1 << 62  # a NOGIL_BYTES no buffer reaches: the GIL is held throughout


def python_work(us: float) -> int:
    """About ``us`` microseconds of pure Python (a handler's share of a request)."""
    end = time.perf_counter() + us / 1e6
    n = 0
    while time.perf_counter() < end:
        n += 1
    return n


class Other(threading.Thread):
    """The thread beside the loop: ``python`` walks records as the cleaner does, ``native`` hashes 1 MiB buffers."""

    def __init__(self, kind: str) -> None:
        super().__init__(daemon=True)
        self.kind = kind
        self.done = 0
        self.stop = threading.Event()
        section = bytes(batches.records_section(client_batch(1 << 20), records.scan_batches(client_batch(1 << 20),
                                                                                            verify_crc=False)[0][0]))
        self._section = section
        self._count = records.scan_batches(client_batch(1 << 20), verify_crc=False)[0][0].record_count
        self._buffer = bytes(1 << 20)

    def run(self) -> None:
        while not self.stop.is_set():
            if self.kind == "python":
                for _ in batches.iter_records(self._section, self._count):
                    self.done += 1
            else:
                hashlib.sha256(self._buffer).digest()
                self.done += len(self._buffer)


def loop(batch: bytearray, seconds: float, python_us: float) -> tuple[int, list[float]]:
    """Requests done in ``seconds``, and each one's time."""
    times: list[float] = []
    end = time.perf_counter() + seconds
    while True:
        start = time.perf_counter()
        if start >= end:
            return len(times), times
        python_work(python_us)
        records.validate(batch, max_batch_bytes=len(batch) + 1)
        times.append(time.perf_counter() - start)


def p99_ms(times: list[float]) -> float:
    ordered = sorted(times)
    return round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1000, 3)


def measure(scenario: str, size: int, variant: str, args: argparse.Namespace) -> dict:
    batch = client_batch(size)
    previous = records._set_nogil_bytes(65536 if variant == "nogil" else HELD)
    other = Other(scenario) if scenario != "alone" else None
    try:
        if other is not None:
            other.start()
            time.sleep(0.05)
            before = other.done
        done, times = loop(batch, args.seconds, args.python_us)
        if other is not None:
            other_done = other.done - before
    finally:
        if other is not None:
            other.stop.set()
            other.join()
        records._set_nogil_bytes(previous)
    record = {"bench": "crc_nogil", "scenario": scenario, "size": len(batch), "variant": variant,
              "loop_requests_s": round(done / args.seconds), "loop_mb_s": round(done * len(batch) / 1e6 / args.seconds),
              "loop_p99_ms": p99_ms(times)}
    if other is not None:
        unit = "records_s" if scenario == "python" else "mb_s"
        scale = 1 if scenario == "python" else 1e6
        record[f"other_{unit}"] = round(other_done / scale / args.seconds)
    if args.verbose:
        print(json.dumps(record), flush=True)
    return record


def median_row(rows: list[dict]) -> dict:
    out = dict(rows[0])
    for key, value in rows[0].items():
        if isinstance(value, (int, float)) and key != "size":
            out[key] = statistics.median(r[key] for r in rows)
    out["reps"] = len(rows)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=0.5, help="per measurement")
    parser.add_argument("--reps", type=int, default=7, help="measurements per figure, the variants alternating")
    parser.add_argument("--sizes", default="16384,65536,262144,1048576", help="client batch sizes (bytes)")
    parser.add_argument("--python-us", type=float, default=50.0, help="Python work per request (microseconds)")
    parser.add_argument("--scenarios", default="alone,python,native")
    parser.add_argument("--verbose", action="store_true", help="print every measurement, not only the medians")
    args = parser.parse_args(argv)
    print(json.dumps(header(__file__, argv)), flush=True)
    print(json.dumps({"bench": "crc_nogil", "crc": records._crc_backend(),
                      "switch_interval_s": sys.getswitchinterval()}), flush=True)
    summary: dict = {"bench": "crc_nogil", "kind": "summary"}
    for scenario in args.scenarios.split(","):
        for size in (int(s) for s in args.sizes.split(",")):
            # The variants alternate, who goes first too, so the drift of a shared machine hits both alike; each
            # figure is the median of --reps measurements.
            runs: dict[str, list[dict]] = {"gil": [], "nogil": []}
            for rep in range(args.reps):
                for variant in ("gil", "nogil") if rep % 2 == 0 else ("nogil", "gil"):
                    runs[variant].append(measure(scenario, size, variant, args))
            rows = {variant: median_row(runs[variant]) for variant in runs}
            for row in rows.values():
                print(json.dumps({**row, "kind": "median"}), flush=True)
            for key in rows["gil"]:
                if key.endswith(("_s", "_ms")) and rows["gil"][key]:
                    summary[f"{scenario}.{size}.{key}.nogil_over_gil"] = round(rows["nogil"][key] / rows["gil"][key], 3)
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
