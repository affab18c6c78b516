"""Decompression of a batch's records section, for the rare paths that must look inside
(offset-by-timestamp lookups, later compaction and format conversion). Produce and Fetch never do.

Kafka's framings: gzip = a gzip stream; snappy = xerial-framed blocks (librdkafka may also send
raw snappy); lz4 = the LZ4 frame format; zstd = a zstd frame.
"""
from __future__ import annotations

import struct
import zlib

from kbroker.errors import CorruptMessageError

GZIP, SNAPPY, LZ4, ZSTD = 1, 2, 3, 4
_XERIAL_MAGIC = b"\x82SNAPPY\x00"


def decompress_records(codec: int, data: bytes | memoryview) -> bytes:
    try:
        if codec == GZIP:
            return zlib.decompress(bytes(data), 16 + zlib.MAX_WBITS)
        if codec == SNAPPY:
            return _snappy(bytes(data))
        if codec == LZ4:
            import lz4.frame

            return lz4.frame.decompress(bytes(data))
        if codec == ZSTD:
            import zstandard

            stream = zstandard.ZstdDecompressor().decompressobj()
            out = stream.decompress(bytes(data))
            if not stream.eof:
                raise ValueError("truncated zstd frame")
            return out
    except ImportError as exc:
        raise CorruptMessageError(f"cannot decompress codec {codec}: {exc.name} is not installed") from None
    except Exception as exc:  # each codec library has its own error types
        raise CorruptMessageError(f"undecodable compressed records (codec {codec}): {exc}") from None
    raise CorruptMessageError(f"unknown compression codec {codec}")


def _snappy(data: bytes) -> bytes:
    import cramjam

    if not data.startswith(_XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(data))
    out = bytearray()
    pos = 16  # magic (8) + version (4) + compatible version (4)
    while pos < len(data):
        (length,) = struct.unpack_from(">i", data, pos)
        pos += 4
        out += bytes(cramjam.snappy.decompress_raw(data[pos:pos + length]))
        pos += length
    return bytes(out)
