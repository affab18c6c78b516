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


# What a records section may decompress to: at least 64 MiB (any batch a producer builds), more
# only for batches at least a MiB large (64 times their size, beyond what real data compresses to).
# Without a bound, a 1 MiB zstd batch of zeros is 32 GiB: it passes produce validation (which never
# decompresses) and then takes the broker down in the cleaner, a timestamp lookup or a down-conversion.
MIN_DECOMPRESSED_LIMIT = 64 << 20
MAX_RATIO = 64
_STEP = 1024  # zstd input fed per call: one call's output stays within _STEP * zstd's ratio (<= 32 MiB)


def decompressed_limit(compressed_size: int) -> int:
    return max(MIN_DECOMPRESSED_LIMIT, MAX_RATIO * compressed_size)


def decompress_records(codec: int, data: bytes | memoryview, limit: int | None = None) -> bytes:
    """The records section of ``codec``'s framing; CorruptMessageError for anything undecodable,
    and for output past ``limit`` bytes (default ``decompressed_limit(len(data))``), refused before
    more than about ``limit`` bytes are allocated."""
    if limit is None:
        limit = decompressed_limit(len(data))
    try:
        if codec == GZIP:
            gzip = zlib.decompressobj(16 + zlib.MAX_WBITS)
            out = gzip.decompress(bytes(data), limit + 1)
            if len(out) <= limit and not gzip.eof:
                raise ValueError("truncated gzip stream")
            return _within(out, limit)
        if codec == SNAPPY:
            return _snappy(bytes(data), limit)
        if codec == LZ4:
            import lz4.frame

            lz4_stream = lz4.frame.LZ4FrameDecompressor()
            out = lz4_stream.decompress(bytes(data), max_length=limit + 1)
            if len(out) <= limit and not lz4_stream.eof:
                raise ValueError("truncated LZ4 frame")
            return _within(out, limit)
        if codec == ZSTD:
            import zstandard

            zstd_stream = zstandard.ZstdDecompressor().decompressobj()
            raw, parts, size = bytes(data), [], 0
            for i in range(0, len(raw), _STEP):
                part = zstd_stream.decompress(raw[i:i + _STEP])
                parts.append(part)
                size += len(part)
                _within(b"", limit, size)
                if zstd_stream.eof:
                    break
            if not zstd_stream.eof:
                raise ValueError("truncated zstd frame")
            return b"".join(parts)
    except ImportError as exc:
        raise CorruptMessageError(f"cannot decompress codec {codec}: {exc.name} is not installed") from None
    except _TooLarge as exc:
        raise CorruptMessageError(f"compressed records (codec {codec}) decompress to {exc}") from None
    except Exception as exc:  # each codec library has its own error types
        raise CorruptMessageError(f"undecodable compressed records (codec {codec}): {exc}") from None
    raise CorruptMessageError(f"unknown compression codec {codec}")


class _TooLarge(Exception):
    pass


def _within(out: bytes, limit: int, size: int | None = None) -> bytes:
    n = len(out) if size is None else size
    if n > limit:
        raise _TooLarge(f"more than {limit} bytes")
    return out


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

        frame: bytes = lz4.frame.compress(data, block_linked=False, store_size=False, content_checksum=False)
        return frame
    if codec == ZSTD:
        import zstandard

        return zstandard.ZstdCompressor().compress(data)
    raise ValueError(f"unknown compression codec {codec}")


def _snappy(data: bytes, limit: int) -> bytes:
    import cramjam

    if not data.startswith(_XERIAL_MAGIC):
        return _within(bytes(cramjam.snappy.decompress_raw(data)), limit)
    out = bytearray()
    pos = len(_XERIAL_HEADER)
    while pos < len(data):
        (length,) = struct.unpack_from(">i", data, pos)
        pos += 4
        out += bytes(cramjam.snappy.decompress_raw(data[pos:pos + length]))  # at most ~21x its input
        _within(b"", limit, len(out))
        pos += length
    return bytes(out)
