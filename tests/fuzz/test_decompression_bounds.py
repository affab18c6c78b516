"""Compressed records sections are decompressed within a bound (kbroker.log.compression): a small
batch that expands to gigabytes is refused as CORRUPT_MESSAGE before it is allocated. Produce never
decompresses, so such a batch is stored as sent; the cleaner, offset-by-timestamp lookups and
down-conversion for old consumers were the ones to blow up. Fails on the old code, which returned
the whole expansion."""
from __future__ import annotations

import resource
import struct
import zlib

import lz4.frame
import pytest
import zstandard

from kbroker import errors
from kbroker.log import batches, legacy
from kbroker.log.compression import (
    GZIP,
    LZ4,
    SNAPPY,
    ZSTD,
    compress_records,
    decompress_records,
    decompressed_limit,
)

EXPANDED = 1 << 30  # 1 GiB of zeros
CHUNK = bytes(1 << 20)


def _bomb(codec: int) -> bytes:
    """EXPANDED zero bytes in `codec`'s framing, compressed a chunk at a time (never held whole)."""
    if codec == GZIP:
        # one chunk deflated once and repeated: after a full flush deflate starts afresh, so the
        # same bytes follow (compressing the whole GiB would take seconds)
        deflate = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
        block = deflate.compress(CHUNK) + deflate.flush(zlib.Z_FULL_FLUSH)
        crc = 0
        for _ in range(EXPANDED // len(CHUNK)):
            crc = zlib.crc32(CHUNK, crc)
        return (b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + block * (EXPANDED // len(CHUNK))
                + deflate.flush() + struct.pack("<II", crc, EXPANDED & 0xFFFFFFFF))
    if codec == LZ4:
        c = lz4.frame.LZ4FrameCompressor(block_linked=False, content_checksum=False)
        return c.begin() + b"".join(c.compress(CHUNK) for _ in range(EXPANDED // len(CHUNK))) + c.flush()
    zstd = zstandard.ZstdCompressor().compressobj()
    return b"".join(zstd.compress(CHUNK) for _ in range(EXPANDED // len(CHUNK))) + zstd.flush()


def _peak_mib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10


@pytest.mark.parametrize("codec", [GZIP, LZ4, ZSTD], ids=["gzip", "lz4", "zstd"])
def test_a_decompression_bomb_is_refused_before_it_is_allocated(codec):
    bomb = _bomb(codec)
    assert decompressed_limit(len(bomb)) <= EXPANDED // 3
    batch = batches.build_batch([(b"k", b"v", 1)])
    header = batches.parse_header(batch)
    batch = bytearray(batches.pack_header(header, batch_length=len(bomb) + batches.HEADER_SIZE - 12,
                                          attributes=codec) + bomb)
    batches.set_crc(batch)
    before = _peak_mib()
    with pytest.raises(errors.CorruptMessageError, match="decompress to more than"):
        batches.records_section(batch, batches.parse_header(batch))
    # about the limit (the codec's output buffer may double); the old code took the whole GiB
    assert _peak_mib() - before < (EXPANDED // 2) >> 20


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD], ids=["gzip", "snappy", "lz4", "zstd"])
def test_the_limit_is_exact(codec):
    section = bytes(range(256)) * 4096  # 1 MiB
    compressed = compress_records(codec, section)
    assert decompress_records(codec, compressed, limit=len(section)) == section
    with pytest.raises(errors.CorruptMessageError, match="decompress to more than"):
        decompress_records(codec, compressed, limit=len(section) - 1)


@pytest.mark.parametrize("codec", [GZIP, LZ4, ZSTD], ids=["gzip", "lz4", "zstd"])
def test_a_truncated_section_is_corrupt(codec):
    compressed = compress_records(codec, bytes(range(256)) * 64)
    with pytest.raises(errors.CorruptMessageError, match="undecodable"):
        decompress_records(codec, compressed[:len(compressed) // 2])


def test_a_magic0_lz4_wrapper_is_bounded_too():
    """Magic 0 LZ4 wrappers are read block by block by hand (Kafka's broken header checksum)."""
    bomb = _bomb(LZ4)
    before = _peak_mib()
    with pytest.raises(errors.CorruptMessageError, match="more than"):
        legacy.decompress(LZ4, bomb, 0)
    assert _peak_mib() - before < (EXPANDED // 2) >> 20
