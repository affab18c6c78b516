"""Records fields: zero-copy views on decode, file slices as chunks of their own on encode."""
from __future__ import annotations

import pytest

from kbroker.protocol import (
    FetchResponse,
    ProduceRequest,
    ProtocolError,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)

P = ProduceRequest
F = FetchResponse
T = FetchResponse.TopicResponse


class FileSlice:
    """Stands in for the log's file slice: a length, and no buffer protocol."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.length = len(data)


def _produce(version: int, batches: list[bytes]) -> bytes:
    return encode_request(0, version, 1, "c", P(acks=1, timeout_ms=100, topic_data=[
        P.TopicData(name="t", partition_data=[
            P.TopicData.PartitionData(index=i, records=b) for i, b in enumerate(batches)])]))


@pytest.mark.parametrize("version", [3, 8, 9])
def test_produce_records_are_views_sharing_the_receive_buffer(version):
    frame = _produce(version, [b"A" * 70, b"B" * 200])
    buffer = bytearray(frame[4:])
    _, body = decode_request(memoryview(buffer))
    first, second = (p.records for p in body.topic_data[0].partition_data)
    assert type(first) is memoryview and first.obj is buffer and not first.readonly
    assert bytes(first) == b"A" * 70 and bytes(second) == b"B" * 200

    # the buffer changes show through the view (the log assigns offsets in place)...
    start = buffer.index(b"A" * 70)
    buffer[start:start + 8] = (12345).to_bytes(8, "big")
    assert bytes(first[:8]) == (12345).to_bytes(8, "big")
    # ...and writes through the view land in the buffer
    second[0:1] = b"Z"
    assert buffer[buffer.index(b"Z" + b"B" * 199)] == ord("Z")


def test_fetch_response_records_decode_as_views():
    body = F(responses=[T(topic="t", partitions=[T.PartitionData(records=b"xyz")])])
    frame = bytearray(encode_response(1, 12, 1, body)[0])
    _, decoded = decode_response(1, 12, memoryview(frame)[4:])
    records = decoded.responses[0].partitions[0].records
    assert type(records) is memoryview and records.obj is frame and bytes(records) == b"xyz"


def _fetch_body(records: list) -> F:
    return F(session_id=0, responses=[T(topic="t", partitions=[
        T.PartitionData(partition_index=i, high_watermark=10, records=r)
        for i, r in enumerate(records)])])


def _splice(chunks: list) -> bytes:
    return b"".join(c.data if isinstance(c, FileSlice) else c for c in chunks)


@pytest.mark.parametrize("version", [4, 11, 12])
def test_file_slices_become_their_own_chunks(version):
    s1, s2 = FileSlice(b"1" * 300), FileSlice(b"2" * 5)
    records = [b"in-memory", s1, memoryview(bytearray(b"view")), s2]
    chunks = encode_response(1, version, 9, _fetch_body(records))

    kinds = [type(c) for c in chunks]
    assert kinds[:4] == [bytes, FileSlice, bytes, FileSlice]
    assert chunks[1] is s1 and chunks[3] is s2
    assert len(chunks) == 5 or version < 12  # flexible: tag bytes follow the last slice
    assert all(c for c in chunks if type(c) is bytes)  # no empty chunks

    # the length prefix written just before each slice
    if version >= 12:
        assert chunks[0].endswith(bytes([301 & 0x7F | 0x80, 301 >> 7]))  # uvarint(300 + 1)
        assert chunks[2].endswith(bytes([6]))
    else:
        assert chunks[0].endswith((300).to_bytes(4, "big"))
        assert chunks[2].endswith((5).to_bytes(4, "big"))

    # the size prefix counts the slices' bytes too
    size = sum(len(c) if type(c) is bytes else c.length for c in chunks) - 4
    assert int.from_bytes(chunks[0][:4], "big") == size

    # once spliced, it is the same frame as with the data in memory
    wire = _splice(chunks)
    in_memory = _fetch_body([b"in-memory", s1.data, b"view", s2.data])
    assert [wire] == encode_response(1, version, 9, in_memory)
    _, decoded = decode_response(1, version, wire[4:], strict=True)
    assert [bytes(p.records) for p in decoded.responses[0].partitions] == [
        b"in-memory", s1.data, b"view", s2.data]


def test_slice_at_the_very_end_leaves_no_empty_chunk():
    # non-flexible Fetch: the records of the last partition are the last bytes of the frame
    s = FileSlice(b"tail")
    chunks = encode_response(1, 4, 1, _fetch_body([s]))
    assert len(chunks) == 2 and chunks[1] is s


def test_requests_cannot_carry_file_slices():
    body = P(acks=1, timeout_ms=1, topic_data=[
        P.TopicData(name="t", partition_data=[P.TopicData.PartitionData(records=FileSlice(b"x"))])])
    with pytest.raises(ProtocolError, match="file slices"):
        encode_request(0, 7, 1, "c", body)


def test_other_buffer_objects_and_null_records():
    import array
    chunks = encode_response(1, 11, 1, _fetch_body([array.array("i", [1, 2]), None]))
    _, decoded = decode_response(1, 11, chunks[0][4:])
    assert bytes(decoded.responses[0].partitions[0].records) == array.array("i", [1, 2]).tobytes()
    assert decoded.responses[0].partitions[1].records is None
    with pytest.raises(ProtocolError):
        encode_response(1, 11, 1, _fetch_body([object()]))
