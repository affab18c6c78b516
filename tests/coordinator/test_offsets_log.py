"""``__consumer_offsets``: partition choice, Kafka's key/value bytes, the batch encoding, and
replay of a partition into a fresh coordinator."""
from __future__ import annotations

import struct

import pytest

from kbroker.coordinator.group import GroupConfig, GroupCoordinator, OffsetAndMetadata, partition_for
from kbroker.coordinator.group.offsets_log import (
    GroupKey,
    GroupMetadataRecord,
    MemberRecord,
    OffsetKey,
    OffsetsLog,
    build_batch,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
    iter_batches,
)
from tests.oracles import batch_oracle
from zk_compat.jvm import java_int_hash

from .conftest import Env, ManualTimer, settle
from .helpers import stable_group

TS = 1_700_000_000_000  # 0x0000018BCFE56800
TS_HEX = "0000018bcfe56800"


def java_hash_reference(text: str) -> int:
    """The textbook definition: sum of s[i] * 31^(n-1-i) over UTF-16 code units, mod 2^32, signed."""
    units = [int.from_bytes(text.encode("utf-16-be", "surrogatepass")[i:i + 2], "big")
             for i in range(0, len(text.encode("utf-16-be", "surrogatepass")), 2)]
    n = len(units)
    total = sum(u * 31 ** (n - 1 - i) for i, u in enumerate(units)) % 2 ** 32
    return total - 2 ** 32 if total >= 2 ** 31 else total


# --- partition choice ------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("", 0),
    ("hello", 99162322),
    ("Aa", 2112), ("BB", 2112),  # the classic collision
    ("polygenelubricants", -2 ** 31),  # hashes to Integer.MIN_VALUE
])
def test_java_string_hash_known_values(text, expected):
    assert java_int_hash(text) == expected


@pytest.mark.parametrize("text", ["console-consumer-12345", "test-consumer-group", "my-group", "group-ü",
                                  "\U0001F600", "x" * 100])
def test_java_string_hash_matches_the_definition(text):
    assert java_int_hash(text) == java_hash_reference(text)


def test_partition_for_uses_kafkas_abs():
    assert partition_for("hello", 50) == 99162322 % 50 == 22
    assert java_int_hash("test-consumer-group") < 0
    assert partition_for("test-consumer-group", 50) == abs(java_hash_reference("test-consumer-group")) % 50
    assert partition_for("polygenelubricants", 50) == 0  # Utils.abs(MIN_VALUE) == 0, not negative
    assert partition_for("polygenelubricants", 7) == 0
    assert partition_for("\U0001F600", 50) == (0xD83D * 31 + 0xDE00) % 50  # surrogate pair: two code units


# --- key and value bytes ---------------------------------------------------------------------

def test_offset_commit_key_bytes():
    assert encode_offset_commit_key("grp", "topic", 3) == bytes.fromhex(
        "0001"                  # key version 1
        "0003" "677270"         # group "grp"
        "0005" "746f706963"     # topic "topic"
        "00000003")             # partition 3


def test_offset_commit_value_v3_bytes():
    value = OffsetAndMetadata(offset=42, leader_epoch=7, metadata="meta", commit_timestamp_ms=TS)
    assert encode_offset_commit_value(value) == bytes.fromhex(
        "0003"                  # value version 3
        "000000000000002a"      # offset 42
        "00000007"              # leader epoch 7
        "0004" "6d657461"       # metadata "meta"
        + TS_HEX)               # commit timestamp
    assert decode_offset_commit_value(encode_offset_commit_value(value)) == value


def test_offset_commit_value_v1_when_retention_was_explicit():
    value = OffsetAndMetadata(offset=42, leader_epoch=7, metadata="", commit_timestamp_ms=TS,
                              expire_timestamp_ms=TS + 1000)
    assert encode_offset_commit_value(value) == bytes.fromhex(
        "0001"                  # value version 1: no leader epoch, with expire timestamp
        "000000000000002a"
        "0000"                  # metadata ""
        + TS_HEX +
        "0000018bcfe56be8")     # expire timestamp = TS + 1000
    assert decode_offset_commit_value(encode_offset_commit_value(value)) == OffsetAndMetadata(
        42, -1, "", TS, TS + 1000)


def test_group_metadata_key_and_value_v3_bytes():
    assert encode_group_metadata_key("grp") == bytes.fromhex("0002" "0003" "677270")
    value = GroupMetadataRecord(
        protocol_type="consumer", generation_id=5, protocol_name="range", leader_id="m-1", state_timestamp_ms=TS,
        members=(MemberRecord("m-1", None, "c", "/1.2.3.4", 30000, 10000, b"\xab\xcd", b"\xef"),
                 MemberRecord("m-2", "inst", "c", "/1.2.3.4", 30000, 10000, b"", b"")))
    assert encode_group_metadata_value(value) == bytes.fromhex(
        "0003"                          # value version 3
        "0008" "636f6e73756d6572"       # protocolType "consumer"
        "00000005"                      # generation 5
        "0005" "72616e6765"             # protocol "range"
        "0003" "6d2d31"                 # leader "m-1"
        + TS_HEX +                      # currentStateTimestamp
        "00000002"                      # 2 members
        "0003" "6d2d31"                 #   memberId "m-1"
        "ffff"                          #   groupInstanceId null
        "0001" "63"                     #   clientId "c"
        "0008" "2f312e322e332e34"       #   clientHost "/1.2.3.4"
        "00007530"                      #   rebalanceTimeout 30000
        "00002710"                      #   sessionTimeout 10000
        "00000002" "abcd"               #   subscription
        "00000001" "ef"                 #   assignment
        "0003" "6d2d32"                 #   memberId "m-2"
        "0004" "696e7374"               #   groupInstanceId "inst"
        "0001" "63" "0008" "2f312e322e332e34" "00007530" "00002710"
        "00000000" "00000000")          #   empty subscription and assignment
    assert decode_group_metadata_value(encode_group_metadata_value(value)) == value


def test_empty_group_metadata_value_has_null_protocol_and_leader():
    value = GroupMetadataRecord("consumer", 2, None, None, TS)
    assert encode_group_metadata_value(value) == bytes.fromhex(
        "0003" "0008" "636f6e73756d6572" "00000002" "ffff" "ffff" + TS_HEX + "00000000")


def test_decode_older_value_versions():
    # offset commit value v0 (offset, metadata, commitTimestamp) and v1 (+ expireTimestamp)
    v0 = bytes.fromhex("0000" "0000000000000009" "0001" "78" + TS_HEX)
    assert decode_offset_commit_value(v0) == OffsetAndMetadata(9, -1, "x", TS)
    v1_no_expiry = bytes.fromhex("0001" "0000000000000009" "0000" + TS_HEX + "ffffffffffffffff")
    assert decode_offset_commit_value(v1_no_expiry) == OffsetAndMetadata(9, -1, "", TS)
    # group metadata v0: no rebalance timeout, no state timestamp, no instance id
    g0 = bytes.fromhex("0000" "0008" "636f6e73756d6572" "00000001" "0005" "72616e6765" "0001" "6d"
                       "00000001" "0001" "6d" "0001" "63" "0001" "68" "00002710" "00000000" "00000001" "01")
    assert decode_group_metadata_value(g0) == GroupMetadataRecord(
        "consumer", 1, "range", "m", -1, (MemberRecord("m", None, "c", "h", 10000, 10000, b"", b"\x01"),))


def test_decode_keys():
    assert decode_key(encode_offset_commit_key("g", "t", 1)) == OffsetKey("g", "t", 1)
    assert decode_key(bytes.fromhex("0000" "0001" "67" "0001" "74" "00000001")) == OffsetKey("g", "t", 1)  # v0
    assert decode_key(encode_group_metadata_key("g")) == GroupKey("g")
    assert decode_key(bytes.fromhex("0003" "0001" "67")) is None  # KIP-848 records: not ours


# --- record batch v2 -----------------------------------------------------------------------

def test_batch_is_a_valid_client_style_batch():
    records = [(encode_offset_commit_key("g", "t", p), encode_offset_commit_value(OffsetAndMetadata(p, -1, "", TS)))
               for p in range(3)] + [(encode_group_metadata_key("g"), None)]
    batch = build_batch(records, TS)
    assert isinstance(batch, bytearray)
    (parsed,) = batch_oracle.parse_batches(batch)
    assert parsed["crc_valid"]
    assert (parsed["base_offset"], parsed["partition_leader_epoch"], parsed["magic"], parsed["attributes"]) == (
        0, -1, 2, 0)
    assert (parsed["producer_id"], parsed["producer_epoch"], parsed["base_sequence"]) == (-1, -1, -1)
    assert (parsed["last_offset_delta"], parsed["record_count"]) == (3, 4)
    assert (parsed["base_timestamp"], parsed["max_timestamp"]) == (TS, TS)
    assert [(r["offset_delta"], r["timestamp"], r["key"], r["value"], r["headers"]) for r in parsed["records"]] == [
        (i, TS, k, v, []) for i, (k, v) in enumerate(records)]
    records_mod = pytest.importorskip("kbroker._core.records")
    info = records_mod.validate(batch)  # what the produce path accepts from clients
    assert (info.batch_count, info.record_count, info.compression) == (1, 4, 0)


def test_batch_bytes_by_hand():
    batch = build_batch([(b"k", None)], 0)
    record = bytes([
        0x0E,           # record length 7 (zigzag varint)
        0x00,           # attributes
        0x00,           # timestampDelta 0
        0x00,           # offsetDelta 0
        0x02, 0x6B,     # key length 1, "k"
        0x01,           # value length -1: tombstone
        0x00])          # no headers
    header_after_crc = struct.pack(">hiqqqhii", 0, 0, 0, 0, -1, -1, -1, 1)
    crc = batch_oracle.crc32c(header_after_crc + record)
    expected = struct.pack(">qiibI", 0, 49 + len(record), -1, 2, crc) + header_after_crc + record
    assert bytes(batch) == expected


def test_iter_batches_skips_a_truncated_tail_and_rejects_corruption():
    one = bytes(build_batch([(b"k", b"v")], TS))
    two = bytes(build_batch([(b"k2", b"v2")], TS))
    assert [b.records for b in iter_batches(one + two[:30])] == [[(b"k", b"v")]]
    corrupt = bytearray(one)
    corrupt[-1] ^= 0xFF
    with pytest.raises(ValueError, match="CRC"):
        list(iter_batches(bytes(corrupt)))


# --- persistence round trip ------------------------------------------------------------------

def reload(env: Env, **kwargs) -> GroupCoordinator:
    """A fresh coordinator (a broker restart or a new leader) fed what the log holds."""
    timer = kwargs.pop("timer", None) or ManualTimer(env.timer.now)
    fresh = GroupCoordinator(env.config, append=env.log.append, clock=timer.clock, timer=timer)
    for partition, batches in sorted(env.log.partitions.items()):
        fresh.load_partition(partition, batches)
    return fresh


async def test_offsets_and_group_metadata_survive_a_reload(env):
    results, syncs = await stable_group(env, 3, instance_ids=[None, "inst-b", None])
    await env.coordinator.commit_offsets("g", results[1].member_id, 1, "inst-b", {
        ("orders", 0): (10, 3, "m0"), ("orders", 1): (20, -1, "")})
    await env.coordinator.commit_offsets("g", results[0].member_id, 1, None, {("orders", 0): (11, 3, "later")})
    committed_at = env.timer.now
    await env.coordinator.commit_offsets("standalone", "", -1, None, {("t", 0): (5, -1, "")}, retention_ms=60_000)

    fresh = reload(env)
    for group_id in ("g", "standalone"):
        assert fresh.fetch_offsets(group_id, None) == env.coordinator.fetch_offsets(group_id, None)
        assert fresh.get_group(group_id).offsets == env.coordinator.get_group(group_id).offsets
        assert fresh.describe_group(group_id) == env.coordinator.describe_group(group_id)
    assert fresh.fetch_offsets("g", None)[("orders", 0)] == (11, 3, "later", 0)
    assert fresh.get_group("standalone").offsets[("t", 0)].expire_timestamp_ms == committed_at + 60_000
    group = fresh.get_group("g")
    assert (group.generation_id, group.leader_id, group.protocol_name) == (1, results[0].member_id, "range")
    assert group.static_members == {"inst-b": results[1].member_id}
    assert set(fresh.list_groups()[1]) == set(env.coordinator.list_groups()[1])
    # the members carry on against the new coordinator with the same generation
    assert [fresh.heartbeat("g", r.member_id, 1) for r in results] == [0, 0, 0]
    assignment = await fresh.sync_group("g", 1, results[2].member_id)
    assert assignment.assignment == syncs[2].assignment
    # and the same record bytes come out when the reloaded group is stored again
    assert fresh.get_group("g").to_record({m: b"" for m in group.members}) == \
        env.coordinator.get_group("g").to_record({m: b"" for m in group.members})


async def test_reloaded_members_must_heartbeat(env):
    results, _ = await stable_group(env, 2)
    timer = ManualTimer(env.timer.now)
    fresh = reload(env, timer=timer)
    timer.advance(5000)
    assert fresh.heartbeat("g", results[0].member_id, 1) == 0
    timer.advance(5000)  # member 1 stayed silent for a session timeout since the load
    assert fresh.describe_group("g").state == "PreparingRebalance"
    assert fresh.heartbeat("g", results[1].member_id, 1) == 25


async def test_an_emptied_group_reloads_empty(env):
    results, _ = await stable_group(env, 1)
    env.coordinator.leave_group("g", [results[0].member_id])
    fresh = reload(env)
    group = fresh.get_group("g")
    assert (group.state.value, group.generation_id, group.protocol_type, group.protocol_name, group.leader_id) == (
        "Empty", 2, "consumer", None, None)
    assert fresh.describe_group("g").state == "Empty"


async def test_deleted_groups_stay_deleted_after_a_reload(env):
    results, _ = await stable_group(env, 1)
    await env.coordinator.commit_offsets("g", results[0].member_id, 1, None, {("t", 0): (1, -1, "")})
    env.coordinator.leave_group("g", [results[0].member_id])
    await env.coordinator.commit_offsets("s", "", -1, None, {("t", 0): (1, -1, "")})
    await env.coordinator.commit_offsets("keep", "", -1, None, {("t", 0): (2, -1, "")})
    assert await env.coordinator.delete_groups(["g", "s"]) == {"g": 0, "s": 0}
    fresh = reload(env)
    assert fresh.get_group("g") is None and fresh.get_group("s") is None
    assert fresh.fetch_offsets("keep", None) == {("t", 0): (2, -1, "", 0)}


async def test_expired_offsets_stay_expired_after_a_reload(env):
    await env.coordinator.commit_offsets("s", "", -1, None, {("t", 0): (1, -1, "")}, retention_ms=1000)
    await env.coordinator.commit_offsets("s", "", -1, None, {("t", 1): (2, -1, "")})
    env.advance(1000)
    assert await env.coordinator.cleanup_expired_offsets() == 1
    fresh = reload(env)
    assert fresh.fetch_offsets("s", None) == {("t", 1): (2, -1, "", 0)}


def test_load_accepts_one_buffer_of_many_batches():
    log = OffsetsLog(None, 1)
    data = b"".join(bytes(log.offset_commit_batch("g", {("t", p): OffsetAndMetadata(p, -1, "", TS)}, TS))
                    for p in range(3))
    loaded = log.load_partition(0, [data])
    assert loaded.offsets == {"g": {("t", p): OffsetAndMetadata(p, -1, "", TS) for p in range(3)}}


def test_transactional_commits_count_only_once_committed():
    key = encode_offset_commit_key("g", "t", 0)
    value = lambda offset: encode_offset_commit_value(OffsetAndMetadata(offset, -1, "", TS))  # noqa: E731
    batches = [
        batch_oracle.build_batch([(key, value(1), [], TS)], base_offset=0),
        batch_oracle.build_batch([(key, value(50), [], TS)], base_offset=1, producer_id=7, producer_epoch=0,
                                 base_sequence=0, is_transactional=True),
        batch_oracle.build_control_batch(False, producer_id=7, producer_epoch=0, base_offset=2),  # ABORT
        batch_oracle.build_batch([(key, value(60), [], TS)], base_offset=3, producer_id=8, producer_epoch=0,
                                 base_sequence=0, is_transactional=True),
    ]
    log = OffsetsLog(None, 1)
    assert log.load_partition(0, batches).offsets["g"][("t", 0)].offset == 1  # 50 aborted, 60 still open
    committed = batches + [batch_oracle.build_control_batch(True, producer_id=8, producer_epoch=0, base_offset=4)]
    assert log.load_partition(0, committed).offsets["g"][("t", 0)].offset == 60
    # a plain commit written after the transactional one wins over it
    later = batches[:3] + [batches[3], batch_oracle.build_batch([(key, value(70), [], TS)], base_offset=4),
                           batch_oracle.build_control_batch(True, producer_id=8, producer_epoch=0, base_offset=5)]
    assert log.load_partition(0, later).offsets["g"][("t", 0)].offset == 70


async def test_unknown_key_versions_are_ignored_on_load():
    log = OffsetsLog(None, 1)
    batch = build_batch([(bytes.fromhex("0005" "0001" "67"), b"\x00\x00whatever"),
                         (encode_group_metadata_key("g"),
                          encode_group_metadata_value(GroupMetadataRecord("consumer", 1, None, None, TS)))], TS)
    loaded = log.load_partition(0, [batch])
    assert list(loaded.groups) == ["g"] and loaded.offsets == {}


async def test_loading_replaces_what_the_partition_held():
    env = Env(offsets_topic_num_partitions=1)
    await env.coordinator.commit_offsets("s", "", -1, None, {("t", 0): (1, -1, "")})
    held = env.join("g")
    await settle()
    env.coordinator.load_partition(0, [])  # e.g. a stale cache after leadership came back
    await settle()
    assert held.result().error == 16
    assert env.coordinator.get_group("s") is None


def test_config_from_broker_config():
    class BrokerConfigLike:
        group_min_session_timeout_ms = 100
        group_initial_rebalance_delay_ms = 0
        offsets_retention_minutes = 2
        offsets_topic_num_partitions = 3

    cfg = GroupConfig.from_broker_config(BrokerConfigLike())
    assert (cfg.group_min_session_timeout_ms, cfg.group_max_session_timeout_ms, cfg.group_initial_rebalance_delay_ms,
            cfg.offsets_retention_ms, cfg.offsets_topic_num_partitions) == (100, 1800000, 0, 120_000, 3)
