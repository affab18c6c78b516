"""Every API x every implemented version, request and response, in three fillings (samples.py)."""
from __future__ import annotations

import pytest

from kbroker.protocol import (
    APIS,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)

from .samples import VARIANTS, sample

CASES = [(key, v) for key in sorted(APIS)
         for v in range(APIS[key].min_version, APIS[key].max_version + 1)]


@pytest.mark.parametrize("key,version", CASES, ids=[f"{APIS[k].name}-v{v}" for k, v in CASES])
def test_request_round_trip(key, version):
    api = APIS[key]
    for variant in VARIANTS:
        body = sample(api, 0, version, variant)
        frame = encode_request(key, version, 0x01020304, "client-é", body)
        assert int.from_bytes(frame[:4], "big") == len(frame) - 4
        header, decoded = decode_request(memoryview(bytearray(frame))[4:], strict=True)
        assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (
            key, version, 0x01020304, "client-é")
        assert decoded == body, f"variant {variant}"
        assert encode_request(key, version, 0x01020304, "client-é", decoded) == frame
        # plain dicts (nested all the way down) encode to the same bytes
        assert encode_request(key, version, 0x01020304, "client-é", body.to_dict()) == frame


@pytest.mark.parametrize("key,version", CASES, ids=[f"{APIS[k].name}-v{v}" for k, v in CASES])
def test_response_round_trip(key, version):
    api = APIS[key]
    for variant in VARIANTS:
        body = sample(api, 1, version, variant)
        chunks = encode_response(key, version, -7, body)
        assert len(chunks) == 1 and type(chunks[0]) is bytes
        frame = chunks[0]
        assert int.from_bytes(frame[:4], "big") == len(frame) - 4
        correlation_id, decoded = decode_response(key, version, memoryview(frame)[4:], strict=True)
        assert correlation_id == -7
        assert decoded == body, f"variant {variant}"
        assert encode_response(key, version, -7, decoded) == chunks
        assert encode_response(key, version, -7, body.to_dict()) == chunks


def test_fields_absent_from_a_version_decode_to_defaults():
    from kbroker.protocol import FetchRequest, MetadataRequest

    frame = encode_request(3, 0, 1, "c", MetadataRequest(topics=[MetadataRequest.Topic(name="a")],
                                                          allow_auto_topic_creation=False))
    _, body = decode_request(frame[4:])
    assert body.allow_auto_topic_creation is True  # not on the wire before v4: the default
    assert body.topics[0].topic_id.int == 0

    F = FetchRequest
    frame = encode_request(1, 4, 1, "c", F(max_wait_ms=500, min_bytes=1, session_epoch=9, topics=[
        F.FetchTopic(topic="t", partitions=[F.FetchTopic.FetchPartition(partition=0, log_start_offset=5)])]))
    _, body = decode_request(frame[4:])
    assert (body.session_id, body.session_epoch, body.rack_id, body.forgotten_topics_data) == (0, -1, "", [])
    assert body.topics[0].partitions[0].log_start_offset == -1
    assert body.topics[0].partitions[0].current_leader_epoch == -1


def test_objects_compare_repr_and_convert():
    from kbroker.protocol import MetadataResponse as M

    a = M(brokers=[M.Broker(node_id=1, host="h", port=1)])
    b = M(brokers=[{"node_id": 1, "host": "h", "port": 1}])
    assert a != b  # a dict is not a Broker...
    assert encode_response(3, 5, 0, a) == encode_response(3, 5, 0, b)  # ...but encodes like one
    assert "node_id=1" in repr(a) and repr(a).startswith("MetadataResponse(")
    assert a.to_dict()["brokers"] == [{"node_id": 1, "host": "h", "port": 1, "rack": None}]
    assert M.Broker.__qualname__ == "MetadataResponse.Broker"
    with pytest.raises(AttributeError):
        a.no_such_field = 1  # slotted
