"""Wire primitives shared by the header codec and the generated message codecs.

Everything here is called from code that `schema.py` generates, so the helpers are small and flat:
the generated code inlines the common cases (one-byte uvarints, fixed-width runs through
precompiled `struct.Struct` objects) and calls these only for the rare paths.
"""
from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any

__all__ = [
    "ProtocolError",
    "FIXED_FORMATS",
    "ZERO_UUID",
    "read_uvarint",
    "uvarint_bytes",
    "skip_tagged_fields",
    "skip_tag_section",
    "write_tagged_fields",
    "encode_records",
]


class ProtocolError(Exception):
    """Bad bytes on the wire, or a request we cannot parse.

    The only exception the decoders raise. `reason` tells the network layer what to do:
    MALFORMED and UNKNOWN_API close the connection; UNSUPPORTED_VERSION closes it too, except for
    ApiVersions, which is answered with a v0 error body (see `encode_api_versions_unsupported`).
    `api_key`, `api_version` and `correlation_id` are set whenever the first 8 bytes were readable.
    """

    MALFORMED = "malformed"
    UNKNOWN_API = "unknown_api"
    UNSUPPORTED_VERSION = "unsupported_version"

    def __init__(
        self,
        message: str,
        reason: str = MALFORMED,
        *,
        api_key: int | None = None,
        api_version: int | None = None,
        correlation_id: int | None = None,
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


# Fixed-width types -> struct format character. bool uses "?": any non-zero byte decodes as True,
# which is Kafka's rule, and packing accepts any truthy value.
FIXED_FORMATS: dict[str, str] = {
    "int8": "b",
    "int16": "h",
    "int32": "i",
    "int64": "q",
    "uint16": "H",
    "uint32": "I",
    "float64": "d",
    "bool": "?",
}

ZERO_UUID = uuid.UUID(int=0)

Buffer = bytes | bytearray | memoryview  # what frames are read from
# An encoded message in pieces: bytes-likes, and file slices (anything with a ``length``) sent with sendfile.
Parts = list[Any]

INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")

# A compact length/count is almost always < 128: one preallocated byte string each.
UVARINT_1 = tuple(bytes((i,)) for i in range(128))


def read_uvarint(buf: Buffer, p: int) -> tuple[int, int]:
    """Unsigned LEB128 at buf[p]; returns (value, next position). At most 5 bytes (a uint32)."""
    value = 0
    shift = 0
    while True:
        b = buf[p]  # IndexError past the end: the caller turns it into ProtocolError
        p += 1
        if shift == 28:
            if b > 0x0F:
                raise ProtocolError("unsigned varint is longer than 5 bytes")
            return value | (b << 28), p
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, p
        shift += 7


def uvarint_bytes(n: int) -> bytes:
    if n < 0x80:
        return UVARINT_1[n]
    if n < 0x4000:  # records lengths up to 16 KiB
        return bytes((n & 0x7F | 0x80, n >> 7))
    if n < 0x200000:
        return bytes((n & 0x7F | 0x80, n >> 7 & 0x7F | 0x80, n >> 14))
    return bytes((n & 0x7F | 0x80,)) + uvarint_bytes(n >> 7)  # the low 7 bits, then the rest


def skip_tagged_fields(buf: Buffer, p: int, end: int, count: int) -> int:
    """Skip `count` (tag, size, value) entries we do not know; receivers must ignore unknown tags."""
    if count > end - p:
        raise ProtocolError(f"tagged field count {count} exceeds the {end - p} bytes left")
    for _ in range(count):
        _tag, p = read_uvarint(buf, p)
        size, p = read_uvarint(buf, p)
        p += size
        if p > end:
            raise ProtocolError(f"tagged field of {size} bytes runs past the end of the frame")
    return p


def skip_tag_section(buf: Buffer, p: int, end: int) -> int:
    """Skip a whole tag section (count included) of which we know no tag."""
    count, p = read_uvarint(buf, p)
    return skip_tagged_fields(buf, p, end, count)


def write_tagged_fields(tags: list[tuple[int, bytes]], append: Callable[[bytes], object]) -> None:
    """Write a tag section from (tag, encoded value) pairs already in ascending tag order."""
    append(uvarint_bytes(len(tags)))
    for tag, value in tags:
        append(uvarint_bytes(tag))
        append(uvarint_bytes(len(value)))
        append(value)


def encode_records(value: Any, parts: Parts, holes: list[int], compact: bool) -> None:
    """Append a non-null records value with its length prefix.

    bytes-like values become parts. An object with a `length` attribute that is not one of the
    bytes types (a file slice the network layer will sendfile) is appended as itself and its index
    is recorded in `holes`, so the caller can cut the output into chunks around it. Any other
    buffer-protocol object is sent as its bytes.
    """
    t = type(value)
    if t is bytes or t is bytearray:
        n = len(value)
    elif t is memoryview:
        if value.format != "B" or value.ndim != 1:
            value = value.cast("B")
        n = value.nbytes
    elif hasattr(value, "length"):
        n = value.length
        parts.append(uvarint_bytes(n + 1) if compact else INT32.pack(n))
        holes.append(len(parts))
        parts.append(value)
        return
    else:
        value = memoryview(value).cast("B")  # TypeError: neither bytes-like nor a file slice
        n = value.nbytes
    parts.append(uvarint_bytes(n + 1) if compact else INT32.pack(n))
    parts.append(value)
