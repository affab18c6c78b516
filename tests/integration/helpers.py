"""Helpers shared by the integration tests: topics, test messages, what the broker stored."""
from __future__ import annotations

import mmap
import random
from pathlib import Path

from kbroker._core import records as core_records

from .clients import DEADLINE, Msg


def create_topic(bootstrap: str, name: str, partitions: int = 1, configs: dict[str, str] | None = None) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, 1, config=configs or {})],
                                  operation_timeout=DEADLINE, request_timeout=DEADLINE)
    futures[name].result(DEADLINE)


def make_messages(n: int, seed: int, partitions: int | None = None, ts_base: int = 1_600_000_000_000) -> list[Msg]:
    """Varied records: null and binary keys, null, empty, random and compressible values, zero to
    three headers (repeated names, empty and binary values), explicit CreateTime timestamps that
    are not in send order. With ``partitions`` every other message names its partition."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        kind = i % 7
        key = None if kind == 3 else (b"key-%d" % i if kind % 2 else rng.randbytes(rng.randint(1, 24)))
        if kind == 5:
            value = None
        elif kind == 6:
            value = b""
        elif kind == 2:
            value = rng.randbytes(rng.randint(1, 3000))
        else:
            value = (b"value %d of seed %d; " % (i, seed)) * rng.randint(1, 80)
        headers = []
        for h in range(i % 4):
            name = f"h{h % 2}"  # repeated names are legal and keep their order
            headers.append((name, rng.choice([b"", rng.randbytes(rng.randint(1, 40)), b"text-%d" % h])))
        ts = ts_base + rng.randint(0, 10**9)
        partition = None
        if partitions and i % 2 == 0:
            partition = rng.randrange(partitions)
        out.append(Msg(partition, key, value, tuple(headers), ts))
    return out


def stored_batches(log_dir: Path, topic: str) -> dict[int, list]:
    """Batch headers of every segment of ``topic``, by partition, read from the broker's files."""
    out: dict[int, list] = {}
    for part_dir in Path(log_dir).glob(f"{topic}-*"):
        suffix = part_dir.name[len(topic) + 1:]
        if not suffix.isdigit():
            continue
        headers = []
        for seg in sorted(part_dir.glob("*.log")):
            size = seg.stat().st_size
            if not size:
                continue
            with open(seg, "rb") as f, mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ) as mm:
                view = memoryview(mm)
                found, _, _ = core_records.scan_batches(view, verify_crc=True)
                headers.extend(found)
                del found
                view.release()
        out[int(suffix)] = headers
    return out


def check_contiguous(acks: list[tuple[int, int]], start: dict[int, int] | None = None) -> None:
    """Acknowledged (partition, offset) pairs: no duplicates, and per partition exactly the
    offsets start..start+n-1 (no gaps)."""
    assert len(set(acks)) == len(acks), "an offset was acknowledged twice"
    by_part: dict[int, list[int]] = {}
    for p, o in acks:
        by_part.setdefault(p, []).append(o)
    for p, offsets in by_part.items():
        first = (start or {}).get(p, 0)
        assert sorted(offsets) == list(range(first, first + len(offsets))), f"partition {p}: gaps in {sorted(offsets)}"
