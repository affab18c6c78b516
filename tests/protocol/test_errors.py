"""Bad bytes raise ProtocolError, and only ProtocolError, with enough context to act on."""
from __future__ import annotations

import random
import struct

import pytest

from kbroker.protocol import (
    APIS,
    MetadataRequest,
    ProtocolError,
    decode_request,
    decode_response,
    encode_api_versions_unsupported,
    encode_request,
    encode_response,
    frame_size,
)

from .samples import FULL, NULLS, sample


def _frame(key: int, version: int, body, client_id: str = "c") -> bytes:
    """A request frame without its size prefix, as decode_request takes it."""
    return encode_request(key, version, 42, client_id, body)[4:]


def test_unknown_api_key():
    frame = struct.pack(">hhih", 99, 0, 5, -1)
    with pytest.raises(ProtocolError) as info:
        decode_request(frame)
    e = info.value
    assert (e.reason, e.api_key, e.api_version, e.correlation_id) == (ProtocolError.UNKNOWN_API, 99, 0, 5)


def test_unsupported_version():
    with pytest.raises(ProtocolError) as info:
        decode_request(struct.pack(">hhih", 3, 13, 6, -1))
    e = info.value
    assert (e.reason, e.api_key, e.api_version, e.correlation_id) == (
        ProtocolError.UNSUPPORTED_VERSION, 3, 13, 6)
    assert "Metadata v13" in str(e)


def test_api_versions_too_new_is_answered_with_a_v0_error_body():
    # kafka-python opens with ApiVersions v4 (flexible header v2, a body we do not parse)
    frame = struct.pack(">hhih", 18, 4, 77, 3) + b"abc" + b"\x00" + b"\x04kp\x00\x04v1\x00\x00"
    with pytest.raises(ProtocolError) as info:
        decode_request(frame)
    e = info.value
    assert e.reason == ProtocolError.UNSUPPORTED_VERSION and e.api_key == 18
    answer = encode_api_versions_unsupported(e.correlation_id)
    assert answer == [bytes.fromhex(
        "00000010" "0000004d"      # size 16, header v0 with correlation id 77
        "0023"                     # UNSUPPORTED_VERSION (35)
        "00000001" "0012" "0000" "0003")]  # only ApiVersions' own range


def test_truncated_header():
    for n in range(10):
        with pytest.raises(ProtocolError):
            decode_request(struct.pack(">hhih", 3, 1, 1, 5)[:n])


def test_negative_length_where_not_nullable():
    # Metadata v1: topic names are not nullable; the topics array is
    frame = bytearray(_frame(3, 1, MetadataRequest(topics=[MetadataRequest.Topic(name="ab")])))
    frame[-4:-2] = b"\xff\xff"  # name length -1
    with pytest.raises(ProtocolError, match="MetadataRequest.Topic.name: invalid length -1"):
        decode_request(frame)
    frame[-4:-2] = b"\xff\xfe"
    with pytest.raises(ProtocolError, match="invalid length -2"):
        decode_request(frame)


def test_length_past_the_end():
    frame = bytearray(_frame(3, 1, MetadataRequest(topics=[MetadataRequest.Topic(name="ab")])))
    frame[-4:-2] = b"\x00\x09"
    with pytest.raises(ProtocolError, match="runs past the end"):
        decode_request(frame)


def test_huge_array_count_is_refused_before_allocating():
    frame = bytearray(_frame(3, 1, MetadataRequest(topics=[])))
    frame[-4:] = b"\x7f\xff\xff\xff"
    with pytest.raises(ProtocolError, match="count 2147483647 exceeds"):
        decode_request(frame)


def test_varint_too_long():
    # Metadata v9 (flexible): topics compact count as a 6-byte varint
    frame = bytearray(_frame(3, 9, MetadataRequest(topics=[])))
    start = 8 + 3 + 1  # after api key, version, correlation id, client id "c", header tags
    assert frame[start] == 1  # the empty topics array: compact count 0 + 1
    frame[start:start + 1] = b"\xff\xff\xff\xff\xff\x01"
    with pytest.raises(ProtocolError, match="longer than 5 bytes"):
        decode_request(frame)


def test_bad_utf8():
    frame = bytearray(_frame(3, 1, MetadataRequest(topics=[MetadataRequest.Topic(name="ab")])))
    frame[-2:] = b"\xc3\x28"
    with pytest.raises(ProtocolError, match="UnicodeDecodeError"):
        decode_request(frame)


def test_trailing_bytes_are_ignored_unless_strict():
    frame = _frame(12, 0, APIS[12].request(group_id="g", member_id="m")) + b"junk"
    assert decode_request(frame)[1].group_id == "g"
    with pytest.raises(ProtocolError, match="4 bytes left"):
        decode_request(frame, strict=True)


def test_decode_response_errors():
    with pytest.raises(ProtocolError):
        decode_response(3, 1, b"\x00\x00")
    with pytest.raises(ProtocolError) as info:
        decode_response(3, 99, b"")
    assert info.value.reason == ProtocolError.UNSUPPORTED_VERSION


def test_encode_errors_are_protocol_errors():
    with pytest.raises(ProtocolError, match="None is not allowed"):
        encode_request(3, 1, 1, "c", MetadataRequest(topics=[MetadataRequest.Topic(name=None)]))
    with pytest.raises(ProtocolError):
        encode_request(3, 1, 1, "c", MetadataRequest(topics=[{"no_such_field": 1}]))
    with pytest.raises(ProtocolError):
        encode_response(3, 1, 1, APIS[3].response(controller_id="x"))
    with pytest.raises(ProtocolError) as info:
        encode_request(77, 0, 1, "c", {})
    assert info.value.reason == ProtocolError.UNKNOWN_API


def test_frame_size():
    assert frame_size(b"\x00\x00\x01\x00") == 256
    with pytest.raises(ProtocolError):
        frame_size(b"\xff\xff\xff\xff")
    with pytest.raises(ProtocolError):
        frame_size(b"\x10\x00\x00\x00", max_size=1000)
    with pytest.raises(ProtocolError):
        frame_size(b"\x00")


def _corpus() -> list[bytes]:
    frames = []
    for key, api in sorted(APIS.items()):
        for v in range(api.min_version, api.max_version + 1):
            for variant in (FULL, NULLS):
                frames.append(_frame(key, v, sample(api, 0, v, variant)))
    return frames


def _mutations(rng: random.Random, frame: bytes):
    yield frame[: rng.randrange(len(frame))]                       # truncated
    b = bytearray(frame)
    for _ in range(rng.randint(1, 4)):                              # a few bytes changed
        b[rng.randrange(len(b))] = rng.choice((0x00, 0x7F, 0x80, 0xFF, rng.randrange(256)))
    yield bytes(b)
    b = bytearray(frame)                                            # a length made huge/negative
    i = rng.randrange(8, max(9, len(b) - 1))
    b[i:i + 2] = rng.choice((b"\xff\xff", b"\x7f\xff", b"\x80\x00", b"\xff\x7f"))
    yield bytes(b)
    i = rng.randrange(len(frame))                                   # bytes inserted or removed
    yield frame[:i] + rng.randbytes(rng.randint(1, 6)) + frame[i:]
    yield frame[:i] + frame[i + rng.randint(1, 6):]
    yield frame[:8] + rng.randbytes(rng.randint(0, 64))             # valid prefix, random body
    yield rng.randbytes(rng.randint(0, 40))                         # anything at all


def test_fuzz_only_protocol_errors():
    rng = random.Random(20240607)
    corpus = _corpus()
    fed = decoded = 0
    for _ in range(6):
        for frame in corpus:
            for mutated in _mutations(rng, frame):
                fed += 1
                buffer = memoryview(bytearray(mutated))
                try:
                    decode_request(buffer)
                    decoded += 1
                except ProtocolError:
                    pass
                # any other exception fails the test with its traceback
    assert fed > 5000
    assert 0 < decoded < fed  # both outcomes were exercised
