"""The codecs of a batch's records section, both ways, for the rare paths that must look inside
or rewrite batches (offset-by-timestamp lookups, compaction, format conversion, the coordinators'
logs). Produce and Fetch never do.

Kafka's framings: gzip = a gzip stream; snappy = xerial-framed blocks (librdkafka may also send
raw snappy, which is read too); lz4 = the LZ4 frame format as Kafka's KafkaLZ4BlockOutputStream
writes it (independent 64 KiB blocks, no content size, no checksums: Kafka's reader refuses linked
blocks); zstd = a zstd frame.
"""
from __future__ import annotations

import struct
import zlib

from kbroker.errors import CorruptMessageError

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)  # magic, version 1, compatible version 1
_XERIAL_BLOCK = 32 * 1024
_GZIP_LEVEL = 6  # java.util.zip.Deflater's default, which Kafka's GZIPOutputStream uses


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


def compress_records(codec: int, data: bytes) -> bytes:
    """``data`` (a records section) in ``codec``'s framing. A missing codec library raises
    ImportError: a batch is never silently written with another codec than it names."""
    if codec == GZIP:
        gzip = zlib.compressobj(_GZIP_LEVEL, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        return gzip.compress(data) + gzip.flush()
    if codec == SNAPPY:
        import cramjam

        out = bytearray(_XERIAL_HEADER)
        for i in range(0, len(data), _XERIAL_BLOCK):
            block = bytes(cramjam.snappy.compress_raw(data[i:i + _XERIAL_BLOCK]))
            out += struct.pack(">i", len(block))
            out += block
        return bytes(out)
    if codec == LZ4:
        import lz4.frame

        return lz4.frame.compress(data, block_linked=False, store_size=False, content_checksum=False)
    if codec == ZSTD:
        import zstandard

        return zstandard.ZstdCompressor().compress(data)
    raise ValueError(f"unknown compression codec {codec}")


def _snappy(data: bytes) -> bytes:
    import cramjam

    if not data.startswith(_XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(data))
    out = bytearray()
    pos = len(_XERIAL_HEADER)
    while pos < len(data):
        (length,) = struct.unpack_from(">i", data, pos)
        pos += 4
        out += bytes(cramjam.snappy.decompress_raw(data[pos:pos + length]))
        pos += length
    return bytes(out)
