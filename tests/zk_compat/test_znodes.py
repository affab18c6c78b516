"""Every znode's encoding against the bytes Kafka 2.8 writes (apache/kafka core/src/main/scala/kafka/zk/ZkData.scala),
decoding of
what older Kafka versions wrote, and clear errors on garbage.

Where Kafka builds the JSON from a hash map, its key order is a hash order (see
``zk_compat._jvm_order``), and the reference's examples list keys in source order instead. For
those znodes the test pins the bytes Kafka 2.8 (Scala 2.13 build) really writes -- as
``zookeeper-shell get`` shows them on real clusters -- and checks that the reference example
has the same content and decodes to the same value.
"""
from __future__ import annotations

import json

import pytest

from zk_compat import znodes


def same_json(a: bytes, b: bytes) -> bool:
    return json.loads(a) == json.loads(b)


# --- /controller, /controller_epoch -----------------------------------------------------------

def test_controller_encodes_the_2x_version_1_form():
    data = znodes.ControllerZNode.encode(2, 1633958339380)
    assert data == b'{"version":1,"brokerid":2,"timestamp":"1633958339380"}'
    assert znodes.ControllerZNode.decode(data) == znodes.ControllerInfo(2, 1633958339380)
    assert znodes.ControllerZNode.path() == "/controller"


def test_controller_decodes_kafka_3_version_2_and_0_8_bare_id():
    v2 = b'{"version":2,"brokerid":1,"timestamp":"1704032949256","kraftControllerEpoch":-1}'
    assert znodes.ControllerZNode.decode(v2) == znodes.ControllerInfo(1, 1704032949256)
    assert znodes.ControllerZNode.decode(b"3") == znodes.ControllerInfo(3, None)


def test_controller_epoch_is_bare_decimal():
    assert znodes.ControllerEpochZNode.encode(7) == b"7"
    assert znodes.ControllerEpochZNode.decode(b"7") == 7
    assert znodes.ControllerEpochZNode.path() == "/controller_epoch"
    with pytest.raises(ValueError, match="/controller_epoch"):
        znodes.ControllerEpochZNode.decode(b"7\n")


# --- /brokers/ids/<id> --------------------------------------------------------------------------

def broker_v5() -> znodes.BrokerInfo:
    return znodes.BrokerInfo.from_endpoints(
        1, [znodes.EndPoint("PLAINTEXT", "kafka1", 9092, "PLAINTEXT")], timestamp_ms=1633958339380)


def test_broker_v5_encodes_as_kafka_2_8_writes_it():
    data = znodes.BrokerIdZNode.encode(broker_v5())
    assert data == (b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
                    b'"endpoints":["PLAINTEXT://kafka1:9092"],"jmx_port":-1,"port":9092,"host":"kafka1",'
                    b'"version":5,"timestamp":"1633958339380"}')
    reference = (b'{"version":5,"host":"kafka1","port":9092,"endpoints":["PLAINTEXT://kafka1:9092"],'
                 b'"jmx_port":-1,"timestamp":"1633958339380","listener_security_protocol_map":'
                 b'{"PLAINTEXT":"PLAINTEXT"},"features":{}}')
    assert same_json(data, reference)
    assert znodes.BrokerIdZNode.decode(1, reference) == broker_v5()
    assert znodes.BrokerIdZNode.decode(1, data) == broker_v5()


def test_broker_v4_with_two_listeners_and_rack():
    info = znodes.BrokerInfo.from_endpoints(
        1, [znodes.EndPoint("CLIENT", "kafka1", 9092, "PLAINTEXT"),
            znodes.EndPoint("REPLICATION", "kafka1", 9093, "PLAINTEXT")],
        timestamp_ms=2233345666, rack="dc1", jmx_port=9999, version=4)
    data = znodes.BrokerIdZNode.encode(info)
    assert data == (b'{"listener_security_protocol_map":{"CLIENT":"PLAINTEXT","REPLICATION":"PLAINTEXT"},'
                    b'"endpoints":["CLIENT://kafka1:9092","REPLICATION://kafka1:9093"],"rack":"dc1",'
                    b'"jmx_port":9999,"port":9092,"host":"kafka1","version":4,"timestamp":"2233345666"}')
    reference = (b'{"version":4,"host":"kafka1","port":9092,"endpoints":["CLIENT://kafka1:9092",'
                 b'"REPLICATION://kafka1:9093"],"jmx_port":9999,"timestamp":"2233345666","rack":"dc1",'
                 b'"listener_security_protocol_map":{"CLIENT":"PLAINTEXT","REPLICATION":"PLAINTEXT"}}')
    assert same_json(data, reference)
    assert znodes.BrokerIdZNode.decode(1, reference) == info


def test_broker_listener_map_order_follows_scala_immutable_map():
    # up to four listeners keep their order (Map1..Map4)
    endpoints = [znodes.EndPoint(f"L{i}", "h", 9000 + i, "SSL") for i in range(4)]
    info = znodes.BrokerInfo.from_endpoints(0, endpoints, timestamp_ms=1)
    obj = json.loads(znodes.BrokerIdZNode.encode(info))
    assert list(obj["listener_security_protocol_map"]) == ["L0", "L1", "L2", "L3"]
    assert obj["host"] is None and obj["port"] == -1  # no PLAINTEXT listener


def test_broker_ipv6_and_wildcard_hosts():
    info = znodes.BrokerInfo.from_endpoints(
        0, [znodes.EndPoint("PLAINTEXT", "::1", 9092, "PLAINTEXT"), znodes.EndPoint("SSL", None, 9093, "SSL")],
        timestamp_ms=5)
    obj = json.loads(znodes.BrokerIdZNode.encode(info))
    assert obj["endpoints"] == ["PLAINTEXT://[::1]:9092", "SSL://:9093"]
    assert znodes.BrokerIdZNode.decode(0, znodes.BrokerIdZNode.encode(info)) == info


def test_broker_decodes_versions_1_to_3():
    v1 = znodes.BrokerIdZNode.decode(
        7, b'{"version":1,"host":"localhost","port":9092,"jmx_port":9999,"timestamp":"2233345666"}')
    assert v1.endpoints == (znodes.EndPoint("PLAINTEXT", "localhost", 9092, "PLAINTEXT"),)
    assert (v1.host, v1.port, v1.version, v1.jmx_port) == ("localhost", 9092, 1, 9999)
    v2 = znodes.BrokerIdZNode.decode(7, b'{"version":2,"host":"h","port":9092,"jmx_port":-1,"timestamp":"1",'
                                 b'"endpoints":["PLAINTEXT://h:9092","SSL://h:9093"]}')
    assert [e.security_protocol for e in v2.endpoints] == ["PLAINTEXT", "SSL"]
    assert v2.listener_security_protocol_map == {"PLAINTEXT": "PLAINTEXT", "SSL": "SSL"}
    v3 = znodes.BrokerIdZNode.decode(7, b'{"version":3,"host":"h","port":9092,"jmx_port":-1,"timestamp":"1",'
                                 b'"endpoints":["PLAINTEXT://h:9092"],"rack":"r1"}')
    assert v3.rack == "r1"


def test_broker_decode_errors_name_the_path():
    with pytest.raises(ValueError, match=r"/brokers/ids/3: not valid JSON"):
        znodes.BrokerIdZNode.decode(3, b"{nope")
    with pytest.raises(ValueError, match=r"/brokers/ids/3: missing 'jmx_port'"):
        znodes.BrokerIdZNode.decode(3, b'{"version":4,"endpoints":[]}')
    with pytest.raises(ValueError, match=r"/brokers/ids/3: no security protocol defined for listener FOO"):
        znodes.BrokerIdZNode.decode(3, b'{"version":2,"jmx_port":-1,"endpoints":["FOO://h:1"]}')
    with pytest.raises(ValueError, match=r"/brokers/ids/3: the znode has no data"):
        znodes.BrokerIdZNode.decode(3, None)
    with pytest.raises(ValueError, match=r"/brokers/ids/3: 'port' must be an integer"):
        znodes.BrokerIdZNode.decode(3, b'{"version":1,"host":"h","port":"9092","jmx_port":-1}')


def test_broker_sequence_id_znode():
    assert znodes.BrokerSequenceIdZNode.path() == "/brokers/seqid"
    assert znodes.BrokerSequenceIdZNode.encode() == b""


# --- /brokers/topics/<t> --------------------------------------------------------------------------

def test_topic_v3_encodes_as_kafka_2_8_writes_it():
    assignment = znodes.TopicAssignment({0: [1, 2, 3], 1: [2, 3, 1]}, topic_id="hT3mGhJ5R0ui7eYU2nUb0Q")
    data = znodes.TopicZNode.encode(assignment)
    assert data == (b'{"partitions":{"0":[1,2,3],"1":[2,3,1]},"topic_id":"hT3mGhJ5R0ui7eYU2nUb0Q",'
                    b'"adding_replicas":{},"removing_replicas":{},"version":3}')
    reference = (b'{"version":3,"partitions":{"0":[1,2,3],"1":[2,3,1]},"adding_replicas":{},'
                 b'"removing_replicas":{},"topic_id":"hT3mGhJ5R0ui7eYU2nUb0Q"}')
    assert same_json(data, reference)
    assert znodes.TopicZNode.decode("orders", reference) == assignment
    assert znodes.TopicZNode.path("orders") == "/brokers/topics/orders"


def test_topic_during_reassignment():
    reference = (b'{"version":3,"partitions":{"0":[4,5,6,1,2,3],"1":[2,3,1]},"adding_replicas":{"0":[4,5,6]},'
                 b'"removing_replicas":{"0":[1,2,3]},"topic_id":"hT3mGhJ5R0ui7eYU2nUb0Q"}')
    decoded = znodes.TopicZNode.decode("orders", reference)
    assert decoded.adding_replicas == {0: [4, 5, 6]} and decoded.removing_replicas == {0: [1, 2, 3]}
    assert same_json(znodes.TopicZNode.encode(decoded), reference)


def test_topic_partition_keys_in_scala_hash_order_after_table_growth():
    # A real 12-partition topic written without a topic id (IBP < 2.8): the partitions map grew
    # from 16 to 32 buckets, which puts "11" first and "10" last.
    assignment = {0: [0, 1, 2], 1: [1, 2, 3], 2: [2, 3, 4], 3: [3, 4, 0], 4: [4, 0, 1], 5: [0, 2, 3],
                  6: [1, 3, 4], 7: [2, 4, 0], 8: [3, 0, 1], 9: [4, 1, 2], 10: [1, 2, 3], 11: [1, 3, 4]}
    data = znodes.TopicZNode.encode(znodes.TopicAssignment(assignment))
    assert data == (b'{"partitions":{"11":[1,3,4],"0":[0,1,2],"1":[1,2,3],"2":[2,3,4],"3":[3,4,0],'
                    b'"4":[4,0,1],"5":[0,2,3],"6":[1,3,4],"7":[2,4,0],"8":[3,0,1],"9":[4,1,2],"10":[1,2,3]},'
                    b'"adding_replicas":{},"removing_replicas":{},"version":3}')


def test_topic_decodes_versions_1_and_2():
    v1 = znodes.TopicZNode.decode("t", b'{"version":1,"partitions":{"0":[1,2,3],"1":[2,3,1]}}')
    assert v1 == znodes.TopicAssignment({0: [1, 2, 3], 1: [2, 3, 1]}, version=1)
    v2 = znodes.TopicZNode.decode(
        "t", b'{"version":2,"partitions":{"0":[1]},"adding_replicas":{},"removing_replicas":{}}')
    assert v2.partitions == {0: [1]} and v2.topic_id is None and v2.version == 2


def test_topic_decode_errors_name_the_path():
    with pytest.raises(ValueError, match=r"/brokers/topics/t: partition id 'x'"):
        znodes.TopicZNode.decode("t", b'{"version":1,"partitions":{"x":[1]}}')
    with pytest.raises(ValueError, match=r"/brokers/topics/t: 'partitions.0' must be a list of integers"):
        znodes.TopicZNode.decode("t", b'{"version":1,"partitions":{"0":["1"]}}')
    with pytest.raises(ValueError, match=r"/brokers/topics/t: expected a JSON object"):
        znodes.TopicZNode.decode("t", b"[1,2]")


def test_topic_paths_refuse_path_injection():
    with pytest.raises(ValueError):
        znodes.TopicZNode.path("a/b")
    with pytest.raises(ValueError):
        znodes.TopicZNode.path("..")


# --- partition state ----------------------------------------------------------------------------

def test_partition_state_bytes_match_reference():
    state = znodes.PartitionState(leader=2, leader_epoch=13, isr=[2, 3, 1], controller_epoch=7)
    data = znodes.TopicPartitionStateZNode.encode(state)
    assert data == b'{"controller_epoch":7,"leader":2,"version":1,"leader_epoch":13,"isr":[2,3,1]}'
    assert znodes.TopicPartitionStateZNode.decode("orders", 0, data) == state
    assert znodes.TopicPartitionStateZNode.path("orders", 0) == "/brokers/topics/orders/partitions/0/state"
    assert znodes.TopicPartitionZNode.path("orders", 0) == "/brokers/topics/orders/partitions/0"
    assert znodes.TopicPartitionsZNode.path("orders") == "/brokers/topics/orders/partitions"


def test_partition_state_decodes_construction_order_and_3x_recovery_state():
    data = b'{"version":1,"leader":-1,"leader_epoch":0,"controller_epoch":1,"isr":[3],"leader_recovery_state":0}'
    assert znodes.TopicPartitionStateZNode.decode("t", 1, data) == znodes.PartitionState(-1, 0, [3], 1)
    with pytest.raises(ValueError, match=r"/brokers/topics/t/partitions/1/state: missing 'leader_epoch'"):
        znodes.TopicPartitionStateZNode.decode("t", 1, b'{"version":1,"leader":1,"isr":[1],"controller_epoch":1}')


# --- configs ------------------------------------------------------------------------------------

@pytest.mark.parametrize("entity_type, name, config, expected", [
    ("topics", "new-topic", {}, b'{"version":1,"config":{}}'),
    ("brokers", "<default>", {"log.cleaner.threads": "2"}, b'{"version":1,"config":{"log.cleaner.threads":"2"}}'),
    ("users", "alice/clients/app1", {"producer_byte_rate": "1048576"},
     b'{"version":1,"config":{"producer_byte_rate":"1048576"}}'),
])
def test_config_entity_bytes_match_reference(entity_type, name, config, expected):
    assert znodes.ConfigEntityZNode.encode(config) == expected
    assert znodes.ConfigEntityZNode.decode(entity_type, name, expected) == config


def test_config_entity_orders_keys_as_a_jdk11_properties():
    data = znodes.ConfigEntityZNode.encode({"retention.ms": "86400000", "cleanup.policy": "compact"})
    assert data == b'{"version":1,"config":{"cleanup.policy":"compact","retention.ms":"86400000"}}'
    # the reference shows the same content in JDK 8's Hashtable order
    reference = b'{"version":1,"config":{"retention.ms":"86400000","cleanup.policy":"compact"}}'
    assert same_json(data, reference)
    assert znodes.ConfigEntityZNode.decode("topics", "orders", reference) == {"retention.ms": "86400000",
                                                                       "cleanup.policy": "compact"}
    assert znodes.ConfigEntityZNode.path("topics", "orders") == "/config/topics/orders"


def test_config_entity_decode_accepts_null_and_rejects_non_strings():
    assert znodes.ConfigEntityZNode.decode("topics", "t", None) == {}
    with pytest.raises(ValueError, match=r"/config/topics/t: config value of 'retention.ms' must be a string"):
        znodes.ConfigEntityZNode.decode("topics", "t", b'{"version":1,"config":{"retention.ms":1000}}')
    with pytest.raises(ValueError, match="unknown config entity type"):
        znodes.ConfigEntityZNode.path("groups", "g")


def test_sanitize_entity_names_like_kafka():
    assert znodes.sanitize_entity_name("user 1*@x.com") == "user%201%2A%40x.com"
    assert znodes.sanitize_entity_name("CN=host,O=ü") == "CN%3Dhost%2CO%3D%C3%BC"
    assert znodes.desanitize_entity_name("user%201%2A%40x.com") == "user 1*@x.com"


def test_config_change_notification():
    data = znodes.ConfigEntityChangeNotificationSequenceZNode.encode("topics/orders")
    assert data == b'{"version":2,"entity_path":"topics/orders"}'
    assert znodes.ConfigEntityChangeNotificationSequenceZNode.decode(data) == "topics/orders"
    v1 = b'{"version":1,"entity_type":"topics","entity_name":"foo"}'
    assert znodes.ConfigEntityChangeNotificationSequenceZNode.decode(v1) == "topics/foo"
    assert znodes.ConfigEntityChangeNotificationSequenceZNode.create_path() == "/config/changes/config_change_"
    assert znodes.ConfigEntityChangeNotificationSequenceZNode.sequence_number("config_change_0000000012") == 12
    with pytest.raises(ValueError, match="/config/changes/config_change_0000000001: unsupported"):
        znodes.ConfigEntityChangeNotificationSequenceZNode.decode(
            b'{"version":3}', "/config/changes/config_change_0000000001")


# --- admin --------------------------------------------------------------------------------------

def test_delete_topic_znode_paths():
    assert znodes.DeleteTopicsZNode.path() == "/admin/delete_topics"
    assert znodes.DeleteTopicZNode.path("orders") == "/admin/delete_topics/orders"


def test_reassign_partitions_bytes_match_reference():
    data = znodes.ReassignPartitionsZNode.encode({("orders", 0): [4, 5, 6]})
    assert data == b'{"version":1,"partitions":[{"topic":"orders","partition":0,"replicas":[4,5,6]}]}'
    assert znodes.ReassignPartitionsZNode.decode(data) == {("orders", 0): [4, 5, 6]}
    # the admin tool's file format (with log_dirs) is accepted too
    tool = b'{"version":1,"partitions":[{"topic":"a","partition":1,"replicas":[1],"log_dirs":["any"]}]}'
    assert znodes.ReassignPartitionsZNode.decode(tool) == {("a", 1): [1]}


def test_preferred_replica_election_bytes_match_reference():
    data = znodes.PreferredReplicaElectionZNode.encode([("orders", 0)])
    assert data == b'{"version":1,"partitions":[{"topic":"orders","partition":0}]}'
    assert znodes.PreferredReplicaElectionZNode.decode(data) == [("orders", 0)]
    with pytest.raises(ValueError, match="/admin/preferred_replica_election: 'partition' must be an integer"):
        znodes.PreferredReplicaElectionZNode.decode(b'{"version":1,"partitions":[{"topic":"a","partition":"0"}]}')


# --- notifications ------------------------------------------------------------------------------

def test_isr_change_notification_bytes_match_reference():
    data = znodes.IsrChangeNotificationSequenceZNode.encode([("orders", 0), ("orders", 4)])
    assert data == (b'{"version":1,"partitions":[{"topic":"orders","partition":0},'
                    b'{"topic":"orders","partition":4}]}')
    assert znodes.IsrChangeNotificationSequenceZNode.decode(data) == [("orders", 0), ("orders", 4)]
    isr_change = "/isr_change_notification/isr_change_0000000003"
    assert znodes.IsrChangeNotificationSequenceZNode.sequence_number(isr_change) == 3


def test_log_dir_event_notification_bytes_match_reference():
    data = znodes.LogDirEventNotificationSequenceZNode.encode(3)
    assert data == b'{"version":1,"broker":3,"event":1}'
    assert znodes.LogDirEventNotificationSequenceZNode.decode(data) == 3
    assert znodes.LogDirEventNotificationSequenceZNode.create_path() == "/log_dir_event_notification/log_dir_event_"


def test_sequence_number_rejects_foreign_names():
    with pytest.raises(ValueError):
        znodes.parse_sequence_number("isr_change_12x", "isr_change_")


# --- cluster id, producer id block, feature -------------------------------------------------------

def test_cluster_id_bytes_match_reference():
    data = znodes.ClusterIdZNode.encode("qUIbSCjVRYS7N4bEYWQ2yA")
    assert data == b'{"version":"1","id":"qUIbSCjVRYS7N4bEYWQ2yA"}'
    assert znodes.ClusterIdZNode.decode(data) == "qUIbSCjVRYS7N4bEYWQ2yA"
    with pytest.raises(ValueError, match="/cluster/id: missing 'id'"):
        znodes.ClusterIdZNode.decode(b'{"version":"1"}')


def test_producer_id_block_bytes_match_reference():
    block = znodes.ProducerIdBlock(broker_id=2, block_start=3000, block_end=3999)
    data = znodes.ProducerIdBlockZNode.encode(block)
    assert data == b'{"version":1,"broker":2,"block_start":"3000","block_end":"3999"}'
    assert znodes.ProducerIdBlockZNode.decode(data) == block
    assert znodes.ProducerIdBlockZNode.decode(None) is None and znodes.ProducerIdBlockZNode.decode(b"") is None
    big = znodes.ProducerIdBlockZNode.encode(znodes.ProducerIdBlock(1, 2**40, 2**40 + 999))
    assert b'"block_start":"1099511627776"' in big


def test_feature_znode():
    data = znodes.FeatureZNode.encode(znodes.FeatureZNodeData(status=1))
    assert data == b'{"features":{},"version":1,"status":1}'
    reference = b'{"version":1,"status":1,"features":{}}'
    assert same_json(data, reference)
    assert znodes.FeatureZNode.decode(reference) == znodes.FeatureZNodeData(1, {}, 1)
    with_features = znodes.FeatureZNodeData(1, {"metadata.version": (1, 3)})
    assert znodes.FeatureZNode.decode(znodes.FeatureZNode.encode(with_features)) == with_features
    v2 = znodes.FeatureZNode.decode(b'{"version":2,"status":1,"features":{"f":{"max_version_level":4}}}')
    assert v2.features == {"f": (1, 4)}
    with pytest.raises(ValueError, match="/feature: unknown feature status 7"):
        znodes.FeatureZNode.decode(b'{"version":1,"status":7,"features":{}}')


# --- /consumers -----------------------------------------------------------------------------------

def test_consumer_offset_is_bare_decimal():
    assert znodes.ConsumerOffsetZNode.path("app", "orders", 0) == "/consumers/app/offsets/orders/0"
    assert znodes.ConsumerOffsetZNode.encode(1234) == b"1234"
    assert znodes.ConsumerOffsetZNode.decode(b"1234") == 1234
    assert znodes.ConsumerOffsetZNode.decode(b"-1") == -1
    assert znodes.ConsumerOffsetZNode.decode(None) is None
    for bad in (b"1234\n", b" 1", b"1_000", b"", b"9" * 30):
        with pytest.raises(ValueError):
            znodes.ConsumerOffsetZNode.decode(bad, "/consumers/app/offsets/orders/0")


def test_old_consumer_registration_bytes_match_reference():
    reg = znodes.ConsumerRegistration({"orders": 2}, "static", 1400000000000)
    data = znodes.ConsumerIdZNode.encode(reg)
    assert data == b'{"version":1,"subscription":{"orders":2},"pattern":"static","timestamp":"1400000000000"}'
    assert znodes.ConsumerIdZNode.decode(data) == reg
    assert znodes.ConsumerIdZNode.path("app", "app_host1-1400000000000-1a2b3c4d") == \
        "/consumers/app/ids/app_host1-1400000000000-1a2b3c4d"


def test_pykafka_registration_is_plain_topic_name():
    assert znodes.ConsumerIdZNode.decode(b"orders") == "orders"


def test_consumer_owner_paths_for_old_consumer_and_pykafka():
    assert znodes.ConsumerOwnerZNode.path("app", "orders", 0) == "/consumers/app/owners/orders/0"
    assert znodes.ConsumerOwnerZNode.path("app", "orders", "2-0") == "/consumers/app/owners/orders/2-0"
    owner = "app_host1-1400000000000-1a2b3c4d-0"
    assert znodes.ConsumerOwnerZNode.decode(znodes.ConsumerOwnerZNode.encode(owner)) == owner
    assert znodes.ConsumerPathZNode.offsets_path("app") == "/consumers/app/offsets"
    assert znodes.ConsumerPathZNode.ids_path("app") == "/consumers/app/ids"
    assert znodes.ConsumerPathZNode.owners_path("app", "orders") == "/consumers/app/owners/orders"


def test_persistent_paths_are_kafkas_list():
    assert znodes.PERSISTENT_ZK_PATHS == (
        "/consumers", "/brokers/ids", "/brokers/topics", "/config/changes", "/admin/delete_topics",
        "/brokers/seqid", "/isr_change_notification", "/latest_producer_id_block",
        "/log_dir_event_notification", "/config/topics", "/config/clients", "/config/users",
        "/config/brokers", "/config/ips")
