"""kcat (librdkafka's command-line client) round trip: ``kcat -P`` 100k keyed messages with
headers, ``kcat -C -e`` them back, byte for byte and in per-partition order."""
from __future__ import annotations

import random
import shutil
import subprocess

import pytest

from .helpers import create_topic, stored_batches

COUNT = 100_000
PARTITIONS = 3
HEADERS = [("trace", b"abc-123"), ("source", b"kcat\xc3\xa9")]
# every byte but the two delimiters (tab between key and value, newline between messages)
ALPHABET = bytes(b for b in range(1, 256) if b not in (0x09, 0x0A))

pytestmark = pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed (make debs)")


def test_kcat_round_trip(broker, tmp_path):
    topic = "kcat-roundtrip"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    rng = random.Random(7)
    messages = []
    for i in range(COUNT):
        key = b"key-%06d-" % i + bytes(rng.choices(ALPHABET, k=rng.randint(0, 8)))
        value = b"v%06d:" % i + bytes(rng.choices(ALPHABET, k=rng.randint(0, 120)))
        messages.append((key, value))
    source = tmp_path / "in.txt"
    source.write_bytes(b"".join(k + b"\t" + v + b"\n" for k, v in messages))

    header_args = [arg for name, value in HEADERS for arg in ("-H", f"{name}={value.decode()}")]
    with source.open("rb") as stdin:
        produced = subprocess.run(
            ["kcat", "-P", "-b", broker.bootstrap, "-t", topic, "-K", "\t", "-z", "lz4", "-q",
             "-X", "linger.ms=20", "-X", "acks=all", *header_args],
            stdin=stdin, capture_output=True, timeout=300)
    assert produced.returncode == 0, produced.stderr.decode(errors="replace")
    stored = stored_batches(broker.dirs, topic)
    assert sum(h.record_count for headers in stored.values() for h in headers) == COUNT

    consumed = subprocess.run(
        ["kcat", "-C", "-b", broker.bootstrap, "-t", topic, "-o", "beginning", "-e", "-q",
         "-f", "%p\t%o\t%k\t%h\t%s\n"],
        capture_output=True, timeout=300)
    assert consumed.returncode == 0, consumed.stderr.decode(errors="replace")
    lines = consumed.stdout.split(b"\n")
    assert lines[-1] == b""
    lines = lines[:-1]
    assert len(lines) == COUNT

    expected_headers = b",".join(name.encode() + b"=" + value for name, value in HEADERS)
    expected = dict(messages)
    seen: dict[int, list[int]] = {}   # partition -> offsets in output order
    order: dict[int, list[int]] = {}  # partition -> message numbers in output order
    keys = set()
    for line in lines:
        partition, offset, key, headers, value = line.split(b"\t", 4)
        assert headers == expected_headers
        assert expected.get(key) == value, f"message {key!r} came back different"
        keys.add(key)
        seen.setdefault(int(partition), []).append(int(offset))
        order.setdefault(int(partition), []).append(int(key[4:10]))
    assert len(keys) == COUNT
    assert sorted(seen) == list(range(PARTITIONS))
    for p, offsets in seen.items():
        assert offsets == list(range(len(offsets))), f"partition {p}: offsets not 0..n-1 in order"
        assert order[p] == sorted(order[p]), f"partition {p}: messages not in the order produced"
