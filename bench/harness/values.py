"""Message values that compress like text, so the compression codecs have something to do.

A fixed-seed vocabulary of 2,000 lower-case words (3 to 10 letters), drawn with Zipf-like weights into
space-separated text: lz4 and snappy shrink it to about half, zstd and gzip to about a third (printed by
``python -m bench.harness.values``). The same sizes and seed give the same values in every run and every process.
"""
from __future__ import annotations

import json
import random
import string
import zlib

from bench.harness.results_meta import header


def text_values(size: int, count: int = 16, seed: int = 7) -> list[bytes]:
    """``count`` distinct values of exactly ``size`` bytes each."""
    rng = random.Random(seed)
    words = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 10))) for _ in range(2000)]
    weights = [1 / (rank + 1) for rank in range(len(words))]
    values = []
    for _ in range(count):
        out = bytearray()
        while len(out) < size:
            out += " ".join(rng.choices(words, weights, k=64)).encode() + b" "
        values.append(bytes(out[:size]))
    return values


if __name__ == "__main__":
    sample = b"".join(text_values(1024, 64))
    print(json.dumps(header(__file__)))
    print(json.dumps({"bytes": len(sample), "zlib_ratio": round(len(sample) / len(zlib.compress(sample, 6)), 2)}))
