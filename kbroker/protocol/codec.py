"""Frames in, objects out, and back: the functions the network layer (and tests) call.

Conventions:
* `decode_*` take the frame *after* its 4-byte size prefix (the network layer has already read the
  size to know how much to receive); `encode_*` return wire bytes *including* the prefix.
* Decoding never raises anything but ProtocolError, whatever the bytes. Bytes left after the body
  are ignored unless `strict=True`.
* `encode_response` returns chunks: bytes, with every records value that is not bytes-like (a file
  slice with a `length`) as its own chunk, its length prefix already in the bytes before it.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kbroker.protocol.header import (
    API_VERSIONS_KEY,
    CORRELATION,
    REQUEST_PREFIX,
    RequestHeader,
    read_client_id,
    response_header_version,
    skip_header_tags,
    write_request_header,
)
from kbroker.protocol.messages import APIS
from kbroker.protocol.schema import Api, Struct
from kbroker.protocol.types import INT32, Buffer, Parts, ProtocolError

if TYPE_CHECKING:
    from kbroker.protocol import message_types as msg

__all__ = [
    "SUPPORTED_VERSIONS",
    "API_NAMES",
    "API_KEYS",
    "DEFAULT_MAX_FRAME",
    "frame_size",
    "is_flexible",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "encode_api_versions_unsupported",
]

#: api key -> (min version, max version): exactly what the declarations implement.
SUPPORTED_VERSIONS: dict[int, tuple[int, int]] = {
    k: (a.min_version, a.max_version) for k, a in sorted(APIS.items())
}
#: api key -> Kafka's name ("Metadata"), and back.
API_NAMES: dict[int, str] = {k: a.name for k, a in sorted(APIS.items())}
API_KEYS: dict[str, int] = {a.name: k for k, a in APIS.items()}

Codec = Callable[..., Any]  # a generated decoder or encoder (schema.Api.decoders, .encoders)
DEFAULT_MAX_FRAME = 104857600  # Kafka's socket.request.max.bytes default
UNSUPPORTED_VERSION_CODE = 35


def frame_size(prefix: Buffer, max_size: int = DEFAULT_MAX_FRAME) -> int:
    """Size from a frame's first 4 bytes; negative or oversized frames are refused before any
    allocation (Kafka closes the connection for both)."""
    if len(prefix) < 4:
        raise ProtocolError("a frame size needs 4 bytes")
    n: int = INT32.unpack_from(prefix, 0)[0]
    if n < 0 or n > max_size:
        raise ProtocolError(f"frame size {n} outside 0..{max_size}")
    return n


def is_flexible(api_key: int, version: int) -> bool:
    return APIS[api_key].is_flexible(version)


def _view(frame: Buffer) -> memoryview:
    buf = frame if frame.__class__ is memoryview else memoryview(frame)
    if buf.format != "B" or buf.ndim != 1:
        buf = buf.cast("B")
    return buf


def _context(exc: Exception, what: str, **attrs: int | None) -> ProtocolError:
    if isinstance(exc, ProtocolError):
        msg = f"{what}: {exc}"
    else:  # a short read inside struct, a bad UTF-8 string, an index past the end, ...
        msg = f"{what}: {type(exc).__name__}: {exc}"
    return ProtocolError(msg, ProtocolError.MALFORMED, **attrs)


def decode_request(frame: Buffer, *, strict: bool = False) -> tuple[RequestHeader, Struct]:
    """Decode one request frame (without its size prefix) into (header, body).

    Records fields of the body are memoryview slices of `frame`: keep the buffer alive (and
    unchanged, except for in-place offset assignment) as long as they are in use.
    """
    try:
        buf = _view(frame)
    except TypeError as e:
        raise ProtocolError(f"cannot read a frame from {type(frame).__name__}") from e
    end = len(buf)
    if end < 8:
        raise ProtocolError(f"request frame of {end} bytes is shorter than a header")
    api_key, version, correlation_id = REQUEST_PREFIX.unpack_from(buf, 0)
    api = APIS.get(api_key)
    if api is None:
        raise ProtocolError(f"unknown api key {api_key}", ProtocolError.UNKNOWN_API,
                            api_key=api_key, api_version=version, correlation_id=correlation_id)
    decode = api.decoders[0].get(version)
    if decode is None:
        raise ProtocolError(
            f"{api.name} v{version} is not supported (v{api.min_version}-{api.max_version})",
            ProtocolError.UNSUPPORTED_VERSION,
            api_key=api_key, api_version=version, correlation_id=correlation_id)
    try:
        client_id, p = read_client_id(buf, 8, end)
        if api.flexible is not None and version >= api.flexible:
            p = skip_header_tags(buf, p, end)
        body, p = decode(buf, p, end)
        if strict and p != end:
            raise ProtocolError(f"{end - p} bytes left after the body")
    except Exception as e:  # noqa: BLE001 - every failure on untrusted bytes is a ProtocolError
        raise _context(e, f"{api.name} v{version} request", api_key=api_key,
                       api_version=version, correlation_id=correlation_id) from e
    return RequestHeader(api_key, version, correlation_id, client_id), body


def decode_response(api_key: int, version: int, frame: Buffer, *, strict: bool = False) -> tuple[int, Struct]:
    """Decode a response frame (without its size prefix) into (correlation id, body)."""
    api = _api(api_key)
    decode = _codec(api, api.decoders[1], version)
    try:
        buf = _view(frame)
        end = len(buf)
        (correlation_id,) = CORRELATION.unpack_from(buf, 0)
        p = 4
        if response_header_version(api_key, api.is_flexible(version)) == 1:
            p = skip_header_tags(buf, p, end)
        body, p = decode(buf, p, end)
        if strict and p != end:
            raise ProtocolError(f"{end - p} bytes left after the body")
    except Exception as e:  # noqa: BLE001
        raise _context(e, f"{api.name} v{version} response", api_key=api_key,
                       api_version=version) from e
    return correlation_id, body


def encode_request(api_key: int, version: int, correlation_id: int, client_id: str | None,
                   body: object) -> bytes:
    """A complete request frame (size prefix included). `body` may be the request object or a dict."""
    api = _api(api_key)
    encode = _codec(api, api.encoders[0], version)
    flexible = api.is_flexible(version)
    parts = [b"", write_request_header(api_key, version, correlation_id, client_id, flexible)]
    holes: list[int] = []
    try:
        encode(body, parts, holes)
        if holes:
            raise ProtocolError("a request cannot carry file slices")
        parts[0] = INT32.pack(sum(map(len, parts)))
    except Exception as e:  # noqa: BLE001
        raise _context(e, f"encoding {api.name} v{version} request") from e
    return b"".join(parts)


def encode_response(api_key: int, version: int, correlation_id: int, body: object) -> Parts:
    """A complete response frame as chunks: `list[bytes | file slice]`, size prefix included.

    Consecutive bytes are joined; each records value without the buffer protocol (anything with a
    `length`, e.g. a log file slice to be sent with sendfile) is a chunk of its own, preceded by
    bytes that end with its length prefix. Without such values the list has exactly one bytes.
    """
    api = _api(api_key)
    encode = _codec(api, api.encoders[1], version)
    head = CORRELATION.pack(correlation_id)
    if response_header_version(api_key, api.is_flexible(version)) == 1:
        head += b"\x00"
    parts = [b"", head]
    holes: list[int] = []
    try:
        encode(body, parts, holes)
        return _chunks(parts, holes)
    except Exception as e:  # noqa: BLE001
        raise _context(e, f"encoding {api.name} v{version} response") from e


def _chunks(parts: Parts, holes: list[int]) -> Parts:
    """Join `parts` into bytes chunks around the file slices at the indexes in `holes`, and
    write the frame size (parts[0], still b"") once everything after the first slice is sized."""
    if not holes:
        parts[0] = INT32.pack(sum(map(len, parts)))
        return [b"".join(parts)]
    first = holes[0]
    size = sum(map(len, parts[:first]))
    chunks = []
    for k, i in enumerate(holes):
        piece = parts[i]
        chunks.append(piece)
        size += piece.length
        end = holes[k + 1] if k + 1 < len(holes) else len(parts)
        if end > i + 1:
            joined = b"".join(parts[i + 1:end])
            size += len(joined)
            chunks.append(joined)
    parts[0] = INT32.pack(size)
    chunks.insert(0, b"".join(parts[:first]))
    return chunks


def encode_api_versions_unsupported(correlation_id: int) -> Parts:
    """The answer to an ApiVersions request whose version we do not know (KIP-511): a v0 body with
    UNSUPPORTED_VERSION and only ApiVersions' own range, so the client can retry with one we do."""
    api = APIS[API_VERSIONS_KEY]
    body: msg.ApiVersionsResponse = {"error_code": UNSUPPORTED_VERSION_CODE, "api_keys": [
        {"api_key": API_VERSIONS_KEY, "min_version": api.min_version, "max_version": api.max_version}]}
    return encode_response(API_VERSIONS_KEY, 0, correlation_id, body)


def _api(api_key: int) -> Api:
    api = APIS.get(api_key)
    if api is None:
        raise ProtocolError(f"unknown api key {api_key}", ProtocolError.UNKNOWN_API, api_key=api_key)
    return api


def _codec(api: Api, table: dict[int, Codec], version: int) -> Codec:
    fn = table.get(version)
    if fn is None:
        raise ProtocolError(
            f"{api.name} v{version} is not supported (v{api.min_version}-{api.max_version})",
            ProtocolError.UNSUPPORTED_VERSION, api_key=api.key, api_version=version)
    return fn
