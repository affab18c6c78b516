"""Byte-exact frames written out by hand from Kafka's protocol guide (kafka.apache.org/protocol: framing,
request and response headers, primitive types) and the message definitions in apache/kafka
clients/src/main/resources/common/message/.

Each hex string is split by field so that it can be checked against the reference by eye.
"""
from __future__ import annotations

from kbroker.protocol import (
    ApiVersionsResponse,
    MetadataRequest,
    MetadataResponse,
    ProduceRequest,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)


def h(*fields: str) -> bytes:
    return bytes.fromhex("".join(fields))


def _api_keys():
    V = ApiVersionsResponse.ApiVersion
    return [V(api_key=0, min_version=0, max_version=9), V(api_key=18, min_version=0, max_version=3)]


def test_api_versions_v0_response():
    expected = h(
        "00000016",                    # size 22
        "00000007",                    # header v0: correlation id
        "0000",                        # error_code
        "00000002",                    # api_keys: int32 count
        "0000" "0000" "0009",          # Produce 0-9
        "0012" "0000" "0003",          # ApiVersions 0-3
    )
    body = ApiVersionsResponse(error_code=0, api_keys=_api_keys())
    assert encode_response(18, 0, 7, body) == [expected]
    assert decode_response(18, 0, expected[4:], strict=True) == (7, body)


def test_api_versions_v3_response_has_v0_header_and_no_default_tags():
    expected = h(
        "0000001a",                    # size 26
        "00000007",                    # header v0 even though the body is flexible: no tag byte
        "0000",                        # error_code
        "03",                          # api_keys: compact count 2 + 1
        "0000" "0000" "0009" "00",     # ... each element ends with an empty tag section
        "0012" "0000" "0003" "00",
        "00000000",                    # throttle_time_ms
        "00",                          # tag section: defaults (epoch -1, empty lists) not written
    )
    body = ApiVersionsResponse(error_code=0, api_keys=_api_keys(), throttle_time_ms=0)
    assert encode_response(18, 3, 7, body) == [expected]
    assert decode_response(18, 3, expected[4:], strict=True) == (7, body)


def test_api_versions_v3_response_writes_tags_that_differ_from_default():
    body = ApiVersionsResponse(api_keys=[], finalized_features_epoch=5)
    expected = h(
        "00000016", "00000007", "0000", "01", "00000000",   # size 22, header v0, error, [], throttle
        "01",                          # one tagged field
        "01" "08" "0000000000000005",  # tag 1 (finalized_features_epoch), size 8, int64
    )
    assert encode_response(18, 3, 7, body) == [expected]
    assert decode_response(18, 3, expected[4:], strict=True)[1].finalized_features_epoch == 5


def test_metadata_v1_request():
    expected = h(
        "00000014",                    # size 20
        "0003" "0001" "00000001",      # header v1: api key 3, version 1, correlation id 1
        "0002" "6162",                 # client id "ab" (classic string)
        "00000001",                    # topics: int32 count
        "0002" "7431",                 # name "t1"
    )
    body = MetadataRequest(topics=[MetadataRequest.Topic(name="t1")])
    assert encode_request(3, 1, 1, "ab", body) == expected
    header, decoded = decode_request(memoryview(bytearray(expected))[4:], strict=True)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (3, 1, 1, "ab")
    assert decoded == body


def test_metadata_v1_request_null_topics_means_all():
    expected = h("00000010", "0003" "0001" "00000001", "0002" "6162", "ffffffff")
    assert encode_request(3, 1, 1, "ab", MetadataRequest(topics=None)) == expected
    assert decode_request(expected[4:])[1].topics is None


def test_produce_v3_request():
    expected = h(
        "00000029",                    # size 41
        "0000" "0003" "00000002",      # header v1: Produce v3, correlation id 2
        "0001" "63",                   # client id "c"
        "ffff",                        # transactional_id: null
        "ffff",                        # acks -1
        "000003e8",                    # timeout_ms 1000
        "00000001",                    # topic_data count
        "0001" "74",                   # name "t"
        "00000001",                    # partition_data count
        "00000000",                    # index 0
        "00000003" "010203",           # records: int32 length + bytes
    )
    P = ProduceRequest
    body = P(transactional_id=None, acks=-1, timeout_ms=1000, topic_data=[
        P.TopicData(name="t", partition_data=[P.TopicData.PartitionData(index=0, records=b"\x01\x02\x03")])])
    assert encode_request(0, 3, 2, "c", body) == expected
    header, decoded = decode_request(memoryview(bytearray(expected))[4:], strict=True)
    assert header.api_version == 3 and decoded == body


def test_metadata_v9_response_flexible_compact_strings():
    expected = h(
        "00000047",                    # size 71
        "00000003" "00",               # header v1: correlation id + empty tag section
        "00000000",                    # throttle_time_ms
        "02",                          # brokers: compact count 1 + 1
        "00000001",                    #   node_id
        "02" "68",                     #   host "h": compact string, length 1 + 1
        "00002384",                    #   port 9092
        "00",                          #   rack: null (compact 0)
        "00",                          #   tag section
        "02" "63",                     # cluster_id "c"
        "00000001",                    # controller_id
        "02",                          # topics: 1
        "0000",                        #   error_code
        "02" "74",                     #   name "t"
        "00",                          #   is_internal false
        "02",                          #   partitions: 1
        "0000" "00000000" "00000001",  #     error_code, partition_index 0, leader_id 1
        "00000005",                    #     leader_epoch 5
        "02" "00000001",               #     replica_nodes [1]
        "02" "00000001",               #     isr_nodes [1]
        "01",                          #     offline_replicas []
        "00",                          #     tag section
        "80000000",                    #   topic_authorized_operations: INT32_MIN
        "00",                          #   tag section
        "80000000",                    # cluster_authorized_operations (v8-10)
        "00",                          # tag section
    )
    M = MetadataResponse
    body = M(throttle_time_ms=0, brokers=[M.Broker(node_id=1, host="h", port=9092, rack=None)],
             cluster_id="c", controller_id=1, topics=[M.Topic(error_code=0, name="t", partitions=[
                 M.Topic.Partition(partition_index=0, leader_id=1, leader_epoch=5,
                                   replica_nodes=[1], isr_nodes=[1])])])
    assert encode_response(3, 9, 3, body) == [expected]
    assert decode_response(3, 9, expected[4:], strict=True) == (3, body)


def test_offset_for_leader_epoch_v3_request_and_response():
    body = {"replica_id": 1, "topics": [{"topic": "t", "partitions": [
        {"partition": 0, "current_leader_epoch": 3, "leader_epoch": 2}]}]}
    expected = h(
        "00000026",                    # size 38
        "0017" "0003" "00000007",      # OffsetForLeaderEpoch v3, correlation id 7
        "0001" "63",                   # client id "c"
        "00000001",                    # replica_id (v3+)
        "00000001" "0001" "74",        # topics: 1, "t"
        "00000001" "00000000",         # partitions: 1, partition 0
        "00000003",                    # current_leader_epoch (v2+)
        "00000002",                    # leader_epoch
    )
    assert bytes(encode_request(23, 3, 7, "c", body)) == expected
    header, decoded = decode_request(expected[4:], strict=True)
    assert (header.api_key, header.api_version, decoded.replica_id) == (23, 3, 1)
    assert decoded.topics[0].partitions[0].leader_epoch == 2
    response = h(
        "00000007",                    # correlation id
        "00000000",                    # throttle_time_ms (v2+)
        "00000001" "0001" "74",        # topics: 1, "t"
        "00000001",                    # partitions: 1
        "0000" "00000000",             # error_code, partition
        "00000002",                    # leader_epoch (v1+)
        "0000000000000064",            # end_offset 100
    )
    _, got = decode_response(23, 3, response, strict=True)
    p = got.topics[0].partitions[0]
    assert (p.error_code, p.partition, p.leader_epoch, p.end_offset) == (0, 0, 2, 100)


def test_offset_for_leader_epoch_v4_is_flexible():
    body = {"replica_id": -1, "topics": [{"topic": "t", "partitions": [
        {"partition": 0, "current_leader_epoch": 3, "leader_epoch": 2}]}]}
    expected = h(
        "00000023",
        "0017" "0004" "00000007" "0001" "63" "00",   # header v2: empty tag buffer
        "ffffffff",                    # replica_id -1: a consumer
        "02" "0274",                   # compact array of 1, compact string "t"
        "02" "00000000" "00000003" "00000002" "00",  # one partition and its tags
        "00" "00",                     # topic tags, request tags
    )
    assert bytes(encode_request(23, 4, 7, "c", body)) == expected


def test_leader_and_isr_v2_request():
    """v2: partitions grouped by topic, broker epoch; no adding/removing replicas (v3), not flexible."""
    body = {"controller_id": 1, "controller_epoch": 2, "broker_epoch": 7, "topic_states": [{
        "topic_name": "t", "partition_states": [{
            "partition_index": 0, "controller_epoch": 2, "leader": 3, "leader_epoch": 4, "isr": [3, 1],
            "zk_version": 5, "replicas": [3, 1], "is_new": True}]}],
        "live_leaders": [{"broker_id": 3, "host_name": "h", "port": 9092}]}
    expected = h(
        "00000062",                    # size 98
        "0004" "0002" "00000007" "0001" "63",
        "00000001" "00000002",         # controller id, controller epoch
        "0000000000000007",            # broker epoch (v2+)
        "00000001" "0001" "74",        # topic_states: 1, "t"
        "00000001",                    # partition_states: 1
        "00000000" "00000002",         # partition 0, controller epoch 2
        "00000003" "00000004",         # leader 3, leader epoch 4
        "00000002" "00000003" "00000001",  # isr [3, 1]
        "00000005",                    # zk_version
        "00000002" "00000003" "00000001",  # replicas [3, 1]
        "01",                          # is_new (v1+)
        "00000001" "00000003" "0001" "68" "00002384",  # live_leaders: 3 at h:9092
    )
    assert bytes(encode_request(4, 2, 7, "c", body)) == expected
    _, decoded = decode_request(expected[4:], strict=True)
    assert decoded.topic_states[0].partition_states[0].isr == [3, 1]
