"""The advertised ranges, header versions and tagged-field rules."""
from __future__ import annotations

import struct

import pytest

from kbroker import protocol
from kbroker.protocol import (
    API_KEYS,
    API_NAMES,
    SUPPORTED_VERSIONS,
    ApiVersionsRequest,
    FetchRequest,
    FetchResponse,
    MetadataRequest,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    is_flexible,
)

# Kafka 2.8 (ZooKeeper mode) ranges, and none above them (issue 30: ListOffsets v7, Metadata v12, OffsetFetch v8 and
# FindCoordinator v4 made clients take kbroker for a Kafka 3.x)
EXPECTED = {
    0: (0, 9), 1: (0, 12), 2: (0, 6), 3: (0, 11), 4: (0, 5), 5: (0, 3), 6: (0, 7), 7: (0, 3), 8: (0, 8), 9: (0, 7),
    10: (0, 3), 11: (0, 7), 12: (0, 4), 13: (0, 4), 14: (0, 5), 15: (0, 5), 16: (0, 4), 17: (0, 1), 18: (0, 3),
    19: (0, 7), 20: (0, 6), 21: (0, 2), 22: (0, 4), 23: (0, 4), 24: (0, 3), 25: (0, 3), 26: (0, 3),
    27: (0, 1), 28: (0, 3), 32: (0, 4), 33: (0, 2), 34: (0, 2), 35: (0, 2), 37: (0, 3), 42: (0, 2),
    43: (0, 2), 44: (0, 1), 45: (0, 0), 46: (0, 0), 47: (0, 0), 56: (0, 0), 60: (0, 0),
    # security (issue 13): ACLs, SaslAuthenticate, client quotas, SCRAM credentials, as in Kafka 2.8
    29: (0, 2), 30: (0, 2), 31: (0, 2), 36: (0, 2), 48: (0, 1), 49: (0, 1), 50: (0, 0), 51: (0, 0),
    # delegation tokens, UpdateFeatures, DescribeProducers, as in Kafka 2.8
    38: (0, 2), 39: (0, 2), 40: (0, 2), 41: (0, 2), 57: (0, 0), 61: (0, 0),
}
FIRST_FLEXIBLE = {
    0: 9, 1: 12, 2: 6, 3: 9, 4: 4, 5: 2, 6: 6, 7: 3, 8: 8, 9: 6, 10: 3, 11: 6, 12: 4, 13: 4, 14: 4, 15: 5, 16: 3,
    17: None, 18: 3, 19: 5, 20: 4, 21: 2, 22: 2, 23: 4, 24: 3, 25: 3, 26: 3, 27: 1, 28: 3, 32: 4,
    33: 2, 34: 2, 35: 2, 37: 2, 42: 2, 43: 2, 44: 1, 45: 0, 46: 0, 47: None, 56: 0, 60: 0,
    29: 2, 30: 2, 31: 2, 36: 2, 48: 1, 49: 1, 50: 0, 51: 0,
    38: 2, 39: 2, 40: 2, 41: 2, 57: 0, 61: 0,
}


def test_supported_versions():
    assert SUPPORTED_VERSIONS == EXPECTED
    assert {protocol.APIS[k].flexible for k in EXPECTED} >= {None}
    assert {k: protocol.APIS[k].flexible for k in EXPECTED} == FIRST_FLEXIBLE
    assert API_NAMES[3] == "Metadata" and API_KEYS["TxnOffsetCommit"] == 28
    assert protocol.request_class(1) is FetchRequest and protocol.response_class(1) is FetchResponse


@pytest.mark.parametrize("key,version,flexible", [(3, 8, False), (3, 9, True), (17, 1, False), (60, 0, True)])
def test_request_header_version_follows_flexibility(key, version, flexible):
    assert is_flexible(key, version) is flexible
    api = protocol.APIS[key]
    parts: list = []
    api.encoders[0][version](api.request(), parts, [])
    body = b"".join(parts)
    frame = encode_request(key, version, 1, "abc", api.request())
    assert frame[4:12] == struct.pack(">hhi", key, version, 1)
    assert frame[12:17] == b"\x00\x03abc"  # ClientId: int16 length, even in header v2
    # header v2 = v1 + an empty tag section
    assert frame[17:] == (b"\x00" + body if flexible else body)


def test_request_header_v2_tags_are_skipped_and_null_client_id_reads_as_empty():
    body = MetadataRequest(topics=None)
    plain = encode_request(3, 9, 5, None, body)[4:]
    assert plain[8:10] == b"\xff\xff"
    header, decoded = decode_request(plain, strict=True)
    assert header.client_id == "" and decoded.topics is None
    # an unknown tag in the header: count 1, tag 9, size 2, two bytes
    tagged = plain[:10] + b"\x01\x09\x02\xaa\xbb" + plain[11:]
    assert decode_request(tagged, strict=True)[1] == decoded


def test_response_header_v1_except_api_versions():
    meta = encode_response(3, 9, 5, protocol.MetadataResponse())[0]
    assert meta[4:9] == b"\x00\x00\x00\x05\x00"  # correlation id + tag section
    apiv = encode_response(18, 3, 5, protocol.ApiVersionsResponse())[0]
    assert apiv[4:10] == b"\x00\x00\x00\x05\x00\x00"  # correlation id, then error_code at once


def test_unknown_tags_are_skipped():
    body = MetadataRequest(topics=[MetadataRequest.Topic(name="t")])
    frame = encode_request(3, 9, 1, "c", body)[4:]
    assert frame.endswith(b"\x00")  # the body's empty tag section
    extra = b"\x02" + b"\x07\x03abc" + b"\x81\x01\x00"  # tags 7 and 129 (two-byte varint), unknown
    assert decode_request(frame[:-1] + extra, strict=True)[1] == body


def test_tagged_field_written_only_when_not_default():
    F = FetchRequest
    plain = F(max_wait_ms=1, topics=[])
    with_cluster = F(max_wait_ms=1, topics=[], cluster_id="abc")
    a = encode_request(1, 12, 1, "c", plain)
    b = encode_request(1, 12, 1, "c", with_cluster)
    assert a.endswith(b"\x00")
    assert b.endswith(b"\x01" + b"\x00\x04" + b"\x04abc")  # 1 tag: tag 0, size 4, compact "abc"
    assert decode_request(b[4:], strict=True)[1].cluster_id == "abc"
    assert decode_request(a[4:], strict=True)[1].cluster_id is None
    # not in v11 at all (not flexible): silently left out
    assert encode_request(1, 11, 1, "c", with_cluster) == encode_request(1, 11, 1, "c", plain)


def test_tagged_structs():
    T = FetchResponse.TopicResponse
    P = T.PartitionData

    def frame(**tags):
        body = FetchResponse(responses=[T(topic="t", partitions=[P(records=b"", **tags)])])
        return encode_response(1, 12, 1, body)[0]

    base = frame()
    assert frame(current_leader=P.LeaderIdAndEpoch()) == base  # default-valued: not written
    assert frame(current_leader={"leader_id": -1, "leader_epoch": -1}) != base  # a dict is "set"
    led = frame(current_leader=P.LeaderIdAndEpoch(leader_id=3, leader_epoch=7))
    assert len(led) == len(base) + 1 + 1 + 8 + 1  # tag, size, two int32, nested tag section
    decoded = decode_response(1, 12, led[4:], strict=True)[1].responses[0].partitions[0]
    assert (decoded.current_leader.leader_id, decoded.current_leader.leader_epoch) == (3, 7)
    assert decoded.diverging_epoch is None and decoded.snapshot_id is None


def test_api_versions_request_v3_software_fields():
    frame = encode_request(18, 3, 1, "rdkafka", ApiVersionsRequest(
        client_software_name="confluent-kafka-python", client_software_version="2.16.1-rdkafka-2.16.0"))
    header, body = decode_request(frame[4:], strict=True)
    assert body.client_software_name == "confluent-kafka-python"
    # ApiVersions v0 has an empty body: only the header
    assert len(encode_request(18, 0, 1, "x", ApiVersionsRequest())) == 4 + 8 + 3
    assert struct.unpack(">hh", frame[4:8]) == (18, 3)


def test_api_versions_response_built_from_supported_versions():
    R = protocol.ApiVersionsResponse
    body = R(api_keys=[R.ApiVersion(k, lo, hi) for k, (lo, hi) in SUPPORTED_VERSIONS.items()])
    for version in range(4):
        chunks = encode_response(18, version, 1, body)
        _, decoded = decode_response(18, version, chunks[0][4:], strict=True)
        assert {k.api_key: (k.min_version, k.max_version) for k in decoded.api_keys} == SUPPORTED_VERSIONS
