"""Request and response headers.

Headers are fixed by the protocol rather than declared per API, so they are written by hand here.
Which header version applies follows from (api key, version) alone, which is why the network layer
can pick it from the first 4 bytes of a frame before parsing anything else:

* request header v2 (v1 + a tag section) for flexible versions, else v1. ClientId stays a classic
  int16-length nullable string even in v2. (v0, without ClientId, is only ControlledShutdown v0,
  which we do not implement.)
* response header v1 (v0 + a tag section) for flexible versions, else v0 — except ApiVersions,
  whose response header is always v0: the client cannot yet know what the broker understood.
"""
from __future__ import annotations

import codecs
import struct

from kbroker.protocol.types import INT16, Buffer, ProtocolError, read_uvarint, skip_tagged_fields

API_VERSIONS_KEY = 18
_utf8 = codecs.utf_8_decode

REQUEST_PREFIX = struct.Struct(">hhi")  # api key, api version, correlation id
CORRELATION = struct.Struct(">i")


class RequestHeader:
    """A decoded request header. A null ClientId is reported as "" (as Kafka treats it)."""

    __slots__ = ("api_key", "api_version", "correlation_id", "client_id")

    def __init__(self, api_key: int, api_version: int, correlation_id: int, client_id: str = "") -> None:
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not RequestHeader:
            return NotImplemented
        return (self.api_key, self.api_version, self.correlation_id, self.client_id) == (
            other.api_key, other.api_version, other.correlation_id, other.client_id)

    __hash__ = None  # type: ignore[assignment]  # unhashable, as __eq__ says (typeshed types object.__hash__ as a method)

    def __repr__(self) -> str:
        return (f"RequestHeader(api_key={self.api_key}, api_version={self.api_version}, "
                f"correlation_id={self.correlation_id}, client_id={self.client_id!r})")


def response_header_version(api_key: int, flexible: bool) -> int:
    return 1 if flexible and api_key != API_VERSIONS_KEY else 0


def read_client_id(buf: Buffer, p: int, end: int) -> tuple[str, int]:
    """The classic nullable ClientId at buf[p]; returns (client id, next position)."""
    (n,) = INT16.unpack_from(buf, p)
    p += 2
    if n < 0:
        if n != -1:
            raise ProtocolError(f"RequestHeader.client_id: invalid length {n}")
        return "", p
    e = p + n
    if e > end:
        raise ProtocolError(f"RequestHeader.client_id: length {n} runs past the end of the frame")
    return _utf8(buf[p:e])[0], e


def skip_header_tags(buf: Buffer, p: int, end: int) -> int:
    n = buf[p]
    if n < 128:
        p += 1
    else:
        n, p = read_uvarint(buf, p)
    return skip_tagged_fields(buf, p, end, n) if n else p


def write_request_header(api_key: int, api_version: int, correlation_id: int,
                         client_id: str | None, flexible: bool) -> bytes:
    if client_id is None:
        cid = b"\xff\xff"
    else:
        raw = client_id.encode()
        cid = INT16.pack(len(raw)) + raw
    tail = b"\x00" if flexible else b""
    return REQUEST_PREFIX.pack(api_key, api_version, correlation_id) + cid + tail
