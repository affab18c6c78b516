"""The controller's requests at the versions Kafka 2.8 serves (LeaderAndIsr 0-5, StopReplica 0-3,
UpdateMetadata 0-7) reach the handlers in one shape: the partitions of the first versions, listed with
their topic names, are regrouped by topic; StopReplica's are flattened with their delete flag and (v3)
leader epoch; LeaderAndIsr v5 answers per topic id. Frames are built and decoded by kbroker's codecs."""
from __future__ import annotations

import uuid

import pytest

from kbroker.handlers import control_versions
from kbroker.protocol import decode_request, encode_request


def _roundtrip(key: int, version: int, body: dict):
    frame = encode_request(key, version, 1, "controller", body)
    header, request = decode_request(memoryview(frame)[4:])
    assert (header.api_key, header.api_version) == (key, version)
    return request


def _state(topic: str, index: int, leader: int) -> dict:
    return {"topic_name": topic, "partition_index": index, "controller_epoch": 3, "leader": leader, "leader_epoch": 7,
            "isr": [1, 2], "zk_version": 4, "replicas": [1, 2]}


def _grouped_state(topic: str, index: int, leader: int) -> dict:
    state = _state(topic, index, leader)
    del state["topic_name"]
    return dict(state, is_new=True)


def _grouped(request) -> dict:
    return {t.topic_name: [(p.partition_index, p.leader, p.leader_epoch, list(p.isr), p.zk_version, list(p.replicas))
                           for p in t.partition_states] for t in request.topic_states}


@pytest.mark.parametrize("version", [0, 1])
def test_leader_and_isr_before_v2_is_regrouped(version):
    request = _roundtrip(4, version, {"controller_id": 1, "controller_epoch": 3, "ungrouped_partition_states": [
        _state("a", 0, 1), _state("b", 0, 2), _state("a", 1, 2)], "live_leaders": []})
    control_versions.regroup_leader_and_isr(version, request)
    assert _grouped(request) == {"a": [(0, 1, 7, [1, 2], 4, [1, 2]), (1, 2, 7, [1, 2], 4, [1, 2])],
                                 "b": [(0, 2, 7, [1, 2], 4, [1, 2])]}
    assert all(p.adding_replicas == [] and p.removing_replicas == [] for t in request.topic_states
               for p in t.partition_states)


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_update_metadata_before_v5_is_regrouped(version):
    brokers = [{"id": 1, "v0_host": "h", "v0_port": 9092, "endpoints": [
        {"port": 9092, "host": "h", "listener": "PLAINTEXT", "security_protocol": 0}], "rack": None}]
    states = [dict(_state("a", 0, 1), offline_replicas=[2]), dict(_state("b", 3, 2), offline_replicas=[])]
    request = _roundtrip(6, version, {"controller_id": 1, "controller_epoch": 3, "ungrouped_partition_states": states,
                                      "live_brokers": brokers})
    control_versions.regroup_update_metadata(version, request)
    assert _grouped(request) == {"a": [(0, 1, 7, [1, 2], 4, [1, 2])], "b": [(3, 2, 7, [1, 2], 4, [1, 2])]}
    offline = {t.topic_name: t.partition_states[0].offline_replicas for t in request.topic_states}
    assert offline == ({"a": [2], "b": []} if version == 4 else {"a": [], "b": []})
    assert [b.id for b in request.live_brokers] == [1]


def test_stop_replica_partitions_at_every_version():
    v0 = _roundtrip(5, 0, {"controller_id": 1, "controller_epoch": 3, "delete_partitions": True,
                           "ungrouped_partitions": [{"topic_name": "a", "partition_index": 2}]})
    assert control_versions.stop_replica_partitions(0, v0) == [("a", 2, True, -1)]
    for version in (1, 2):
        v = _roundtrip(5, version, {"controller_id": 1, "controller_epoch": 3, "broker_epoch": 5,
                                    "delete_partitions": False, "topics": [{"name": "a", "partition_indexes": [0, 1]}]})
        assert control_versions.stop_replica_partitions(version, v) == [("a", 0, False, -1), ("a", 1, False, -1)]
    v3 = _roundtrip(5, 3, {"controller_id": 1, "controller_epoch": 3, "broker_epoch": 5, "topic_states": [
        {"topic_name": "a", "partition_states": [{"partition_index": 0, "leader_epoch": 4, "delete_partition": True},
                                                 {"partition_index": 1, "leader_epoch": -2,
                                                  "delete_partition": False}]}]})
    assert control_versions.stop_replica_partitions(3, v3) == [("a", 0, True, 4), ("a", 1, False, -2)]


def test_leader_and_isr_v5_answers_per_topic_id():
    topic_id = uuid.uuid4()
    request = _roundtrip(4, 5, {"controller_id": 1, "controller_epoch": 3, "broker_epoch": 9, "type": 0,
                                "topic_states": [{"topic_name": "a", "topic_id": topic_id,
                                                  "partition_states": [_grouped_state("a", 0, 1)]}],
                                "live_leaders": [{"broker_id": 1, "host_name": "h", "port": 1}]})
    results = [{"topic_name": "a", "partition_index": 0, "error_code": 0}]
    assert control_versions.leader_and_isr_answer(5, request, 0, results) == {
        "error_code": 0, "topics": [{"topic_id": topic_id, "partition_errors": [{"partition_index": 0,
                                                                              "error_code": 0}]}]}
    assert control_versions.leader_and_isr_answer(4, request, 0, results) == {"error_code": 0,
                                                                               "partition_errors": results}
