"""``kbroker dump-log`` (Kafka's DumpLogSegments, kafka-dump-log.sh): every batch of a segment's .log file, every
entry of its .index/.timeindex files, read with the compiled core's scans."""
from __future__ import annotations

import mmap
import sys
from pathlib import Path
from typing import TextIO

from kbroker._core import index, records

CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


def dump_log(paths: list[str], out: TextIO = sys.stdout) -> int:
    """Print every batch of .log files, every entry of .index/.timeindex files, like Kafka's
    DumpLogSegments. Returns 1 if any file is damaged."""
    status = 0
    for name in paths:
        path = Path(name)
        print(f"Dumping {path}", file=out)
        try:
            base = int(path.stem)
        except ValueError:
            print(f"  {path.name} is not named by a base offset (20 digits)", file=out)
            status = 1
            continue
        if path.suffix == ".log":
            size = path.stat().st_size
            print(f"Starting offset: {base}", file=out)
            if not size:
                continue
            with open(path, "rb") as f, mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ) as mm:
                view = memoryview(mm)
                headers, valid, state = records.scan_batches(view, verify_crc=True)
                for h in headers:
                    ts_kind = "LogAppendTime" if h.timestamp_type else "CreateTime"
                    if h.magic == 0:
                        ts_kind = "NoTimestampType"
                    # DumpLogSegments.printBatchLevel: a magic 0/1 entry shows its (last) offset only
                    batch_level = (f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.record_count} "
                                   f"baseSequence: {h.base_sequence} lastSequence: {h.last_sequence} "
                                   f"producerId: {h.producer_id} producerEpoch: {h.producer_epoch} "
                                   f"partitionLeaderEpoch: {h.partition_leader_epoch} "
                                   f"isTransactional: {str(h.is_transactional).lower()} "
                                   f"isControl: {str(h.is_control).lower()}") if h.magic >= 2 \
                        else f"offset: {h.last_offset}"
                    print(f"{batch_level} position: {h.position} "
                          f"{ts_kind}: {h.max_timestamp} size: {h.size} magic: {h.magic} "
                          f"compresscodec: {CODECS.get(h.compression, h.compression)} crc: {h.crc} isvalid: true",
                          file=out)
                del headers
                view.release()
            if valid != size:
                why = "a torn (incomplete) batch" if state == 1 else "a corrupt batch"
                print(f"Found {size - valid} invalid bytes at position {valid}: {why}", file=out)
                status = 1
        elif path.suffix in (".index", ".timeindex"):
            cls = index.OffsetIndex if path.suffix == ".index" else index.TimeIndex
            idx = cls(str(path), base, max(path.stat().st_size, 12), writable=False)
            try:
                for n in range(idx.entries):
                    a, b = idx.entry(n)
                    line = f"offset: {a} position: {b}" if path.suffix == ".index" else f"timestamp: {a} offset: {b}"
                    print(line, file=out)
            finally:
                idx.close()
        else:
            print(f"  unknown file type {path.suffix!r}: expected .log, .index or .timeindex", file=out)
            status = 1
    return status
