"""Batch builders and log factories shared by the storage tests."""
from __future__ import annotations

from pathlib import Path

from kbroker._core import records
from kbroker.log import LogConfig, PartitionLog, TopicPartition
from tests.oracles.batch_oracle import build_batch, parse_batches

TP = TopicPartition("orders", 0)


def make_batch(n: int, ts: int = 1_000, value_size: int = 100, tag: str = "", **kw) -> bytearray:
    """A client batch of ``n`` records with timestamps ts, ts+1, ... and recognisable values."""
    records = [(f"k{tag}{i}".encode(), f"{tag}:{i}:".encode().ljust(value_size, b"x"), [], ts + i)
               for i in range(n)]
    return bytearray(build_batch(records=records, **kw))


def values_of(data: bytes) -> list[bytes]:
    return [r["value"] for b in parse_batches(data) for r in b["records"]]


def offsets_of(data: bytes) -> list[int]:
    return [b["base_offset"] + r["offset_delta"] for b in parse_batches(data) for r in b["records"]]


def open_log(path: Path, appender, clock=None, **config) -> PartitionLog:
    kwargs = {"clock": clock} if clock else {}
    return PartitionLog(path / str(TP), TP, LogConfig(**config), appender, **kwargs)


def read_all(plog: PartitionLog, start: int | None = None) -> bytes:
    """Every byte from ``start`` to the log end, following segments as a consumer would."""
    out = bytearray()
    offset = plog.log_start_offset if start is None else start
    while offset < plog.log_end_offset:
        chunk = plog.read_bytes(offset, 1 << 20)
        assert chunk, f"no data at offset {offset} below the log end {plog.log_end_offset}"
        headers, whole, _ = records.scan_batches(chunk, verify_crc=True)
        assert headers, f"no whole batch at offset {offset}"
        out += chunk[:whole]
        offset = headers[-1].last_offset + 1
    return bytes(out)
