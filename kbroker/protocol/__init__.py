"""Kafka wire protocol: framing, headers, and a codec for every API kbroker speaks.

Public API::

    decode_request(frame, *, strict=False) -> (RequestHeader, body)
    decode_response(api_key, version, frame, *, strict=False) -> (correlation_id, body)
    encode_request(api_key, version, correlation_id, client_id, body) -> bytes
    encode_response(api_key, version, correlation_id, body) -> list[bytes | file slice]
    encode_api_versions_unsupported(correlation_id) -> list[bytes]
    frame_size(first_4_bytes, max_size=DEFAULT_MAX_FRAME) -> int
    SUPPORTED_VERSIONS  {api_key: (min, max)}     API_NAMES {api_key: "Metadata"}
    API_KEYS {"Metadata": 3}                      APIS {api_key: Api}
    ProtocolError (reason, api_key, api_version, correlation_id)

`frame` is the bytes after the 4-byte size prefix (a memoryview of the receive bytearray, ideally);
encoders return the size prefix too. Bodies are instances of generated slotted classes named after
Kafka's messages (`MetadataRequest`, `FetchResponse`, ...), with snake_case fields and nested struct
classes as attributes (`FetchResponse.PartitionData`); encoders also take plain dicts. What mypy knows of them is
`message_types.pyi`, written from the same declarations by `python -m kbroker.protocol.typegen`.
"""
from __future__ import annotations

from kbroker.protocol import codec
from kbroker.protocol.codec import *  # noqa: F403 - the tables and functions of codec.__all__
from kbroker.protocol.header import RequestHeader
from kbroker.protocol.messages import APIS
from kbroker.protocol.schema import Api, Struct
from kbroker.protocol.types import ProtocolError

__all__ = [
    *codec.__all__,
    "APIS",
    "Api",
    "ProtocolError",
    "RequestHeader",
    "Struct",
    "request_class",
    "response_class",
]

# Every message class under its Kafka name: MetadataRequest, MetadataResponse, ...
for _api in APIS.values():
    for _cls in (_api.request, _api.response):
        globals()[_cls.__name__] = _cls
        __all__.append(_cls.__name__)
del _api, _cls


def request_class(api_key: int) -> type[Struct]:
    return APIS[api_key].request


def response_class(api_key: int) -> type[Struct]:
    return APIS[api_key].response
