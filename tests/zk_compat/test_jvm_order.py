"""Key order and escaping against vectors produced by a real JVM (JDK 17, Jackson 2.14-2.20)
and by real Kafka clusters."""
from __future__ import annotations

import pytest

from zk_compat import _json
from zk_compat._jvm_order import (
    java_hashmap_order,
    java_properties_order,
    java_string_hash,
    scala_immutable_map_order,
    scala_mutable_map_order,
)


def test_java_string_hash_matches_the_jdk():
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("my-group") == (-1906497762) & 0xFFFFFFFF
    assert java_string_hash("grp-\U0001F600") == (-1235730613) & 0xFFFFFFFF  # two UTF-16 units


def test_properties_order_matches_jdk17_including_a_resize():
    keys = ["segment.bytes", "retention.ms", "cleanup.policy", "min.insync.replicas", "compression.type",
            "max.message.bytes", "segment.ms", "retention.bytes", "unclean.leader.election.enable",
            "message.timestamp.type", "flush.messages", "flush.ms", "delete.retention.ms", "preallocate"]
    # new Properties(); setProperty(k) for k in keys; Jackson's writeValueAsBytes (JDK 17)
    assert java_properties_order(keys) == [
        "compression.type", "max.message.bytes", "message.timestamp.type", "min.insync.replicas",
        "preallocate", "unclean.leader.election.enable", "retention.bytes", "delete.retention.ms",
        "cleanup.policy", "flush.ms", "segment.bytes", "retention.ms", "segment.ms", "flush.messages"]
    assert java_properties_order(["retention.ms", "cleanup.policy"]) == ["cleanup.policy", "retention.ms"]
    assert java_hashmap_order(keys) == java_properties_order(keys)  # same table, no collisions here


def test_scala_orders_match_real_cluster_dumps():
    assert scala_immutable_map_order(["version", "leader", "leader_epoch", "controller_epoch", "isr"]) == \
        ["controller_epoch", "leader", "version", "leader_epoch", "isr"]
    assert scala_immutable_map_order(["b", "a"]) == ["b", "a"]  # Map2 keeps insertion order
    assert scala_mutable_map_order(["version", "host", "port", "endpoints", "jmx_port", "timestamp"], initial=6,
                                   later=["listener_security_protocol_map", "features"]) == \
        ["features", "listener_security_protocol_map", "endpoints", "jmx_port", "port", "host", "version",
         "timestamp"]


@pytest.mark.parametrize("text, expected", [
    ("plain", b'"plain"'),
    ("q\"b\\", b'"q\\"b\\\\"'),
    ("\b\t\n\f\r", b'"\\b\\t\\n\\f\\r"'),
    ("\x00\x0b\x1f", b'"\\u0000\\u000B\\u001F"'),  # upper-case hex, as Jackson
    ("\x7f\u00e9\u2028", b'"' + "\x7f\u00e9\u2028".encode("utf-8") + b'"'),  # raw
    ("\U0001F600", b'"\\uD83D\\uDE00"'),  # escaped surrogate pair, as Jackson's UTF8JsonGenerator
    ("a/b", b'"a/b"'),
])
def test_json_string_escaping_matches_jackson(text, expected):
    assert _json.dumps(text) == expected


def test_json_is_compact_and_keeps_dict_order():
    assert _json.dumps({"b": [1, -2], "a": {"x": None, "y": True}}) == b'{"b":[1,-2],"a":{"x":null,"y":true}}'
    with pytest.raises(TypeError):
        _json.dumps({"f": 1.5})
