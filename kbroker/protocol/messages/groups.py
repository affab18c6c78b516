"""Consumer groups: coordinator lookup, membership, offsets, and the group admin APIs."""
from __future__ import annotations

from kbroker.protocol.schema import api

# Kafka 2.8 serves v0-3: v4 (batched CoordinatorKeys, KIP-699) is 3.0's.
FIND_COORDINATOR = api(10, "FindCoordinator", "0-3", flexible=3, request="""
    key                        string               v0+
    key_type                   int8                 v1+
""", response="""
    throttle_time_ms           int32                v1+
    error_code                 int16                v0+
    error_message              string               v1+    nullable
    node_id                    int32                v0+
    host                       string               v0+
    port                       int32                v0+
""")

JOIN_GROUP = api(11, "JoinGroup", "0-7", flexible=6, request="""
    group_id                   string               v0+
    session_timeout_ms         int32                v0+
    rebalance_timeout_ms       int32                v1+    default=-1
    member_id                  string               v0+
    group_instance_id          string               v5+    nullable
    protocol_type              string               v0+
    protocols                  [Protocol]           v0+
      name                     string               v0+
      metadata                 bytes                v0+
""", response="""
    throttle_time_ms           int32                v2+
    error_code                 int16                v0+
    generation_id              int32                v0+    default=-1
    protocol_type              string               v7+    nullable
    protocol_name              string               v0+    nullable:v7+
    leader                     string               v0+
    member_id                  string               v0+
    members                    [Member]             v0+
      member_id                string               v0+
      group_instance_id        string               v5+    nullable
      metadata                 bytes                v0+
""")

SYNC_GROUP = api(14, "SyncGroup", "0-5", flexible=4, request="""
    group_id                   string               v0+
    generation_id              int32                v0+
    member_id                  string               v0+
    group_instance_id          string               v3+    nullable
    protocol_type              string               v5+    nullable
    protocol_name              string               v5+    nullable
    assignments                [Assignment]         v0+
      member_id                string               v0+
      assignment               bytes                v0+
""", response="""
    throttle_time_ms           int32                v1+
    error_code                 int16                v0+
    protocol_type              string               v5+    nullable
    protocol_name              string               v5+    nullable
    assignment                 bytes                v0+
""")

HEARTBEAT = api(12, "Heartbeat", "0-4", flexible=4, request="""
    group_id                   string               v0+
    generation_id              int32                v0+
    member_id                  string               v0+
    group_instance_id          string               v3+    nullable
""", response="""
    throttle_time_ms           int32                v1+
    error_code                 int16                v0+
""")

# v3+ leaves several members at once, each with its own error.
LEAVE_GROUP = api(13, "LeaveGroup", "0-4", flexible=4, request="""
    group_id                   string               v0+
    member_id                  string               v0-2
    members                    [MemberIdentity]     v3+
      member_id                string               v3+
      group_instance_id        string               v3+    nullable
""", response="""
    throttle_time_ms           int32                v1+
    error_code                 int16                v0+
    members                    [MemberResponse]     v3+
      member_id                string               v3+
      group_instance_id        string               v3+    nullable
      error_code               int16                v3+
""")

# Kafka 3.x renamed generation_id to GenerationIdOrMemberEpoch (KIP-848); the wire is the same.
OFFSET_COMMIT = api(8, "OffsetCommit", "0-8", flexible=8, request="""
    group_id                   string               v0+
    generation_id              int32                v1+    default=-1
    member_id                  string               v1+
    group_instance_id          string               v7+    nullable
    retention_time_ms          int64                v2-4   default=-1
    topics                     [Topic]              v0+
      name                     string               v0+
      partitions               [Partition]          v0+
        partition_index        int32                v0+
        committed_offset       int64                v0+
        committed_leader_epoch int32                v6+    default=-1
        commit_timestamp       int64                v1     default=-1
        committed_metadata     string               v0+    nullable
""", response="""
    throttle_time_ms           int32                v3+
    topics                     [Topic]              v0+
      name                     string               v0+
      partitions               [Partition]          v0+
        partition_index        int32                v0+
        error_code             int16                v0+
""")

# Null topics (v2+) = every partition with an offset. Kafka 2.8 serves v0-7: v8 (several groups, KIP-709) is 3.0's.
OFFSET_FETCH = api(9, "OffsetFetch", "0-7", flexible=6, request="""
    group_id                   string               v0+
    topics                     [Topic]              v0+    nullable:v2+
      name                     string               v0+
      partition_indexes        [int32]              v0+
    require_stable             bool                 v7+
""", response="""
    throttle_time_ms           int32                v3+
    topics                     [Topic]              v0+
      name                     string               v0+
      partitions               [Partition]          v0+
        partition_index        int32                v0+
        committed_offset       int64                v0+
        committed_leader_epoch int32                v5+    default=-1
        metadata               string               v0+    nullable
        error_code             int16                v0+
    error_code                 int16                v2+
""")

DESCRIBE_GROUPS = api(15, "DescribeGroups", "0-5", flexible=5, request="""
    groups                     [string]             v0+
    include_authorized_operations  bool             v3+
""", response="""
    throttle_time_ms           int32                v1+
    groups                     [DescribedGroup]     v0+
      error_code               int16                v0+
      group_id                 string               v0+
      group_state              string               v0+
      protocol_type            string               v0+
      protocol_data            string               v0+
      members                  [Member]             v0+
        member_id              string               v0+
        group_instance_id      string               v4+    nullable
        client_id              string               v0+
        client_host            string               v0+
        member_metadata        bytes                v0+
        member_assignment      bytes                v0+
      authorized_operations    int32                v3+    default=-2147483648
""")

LIST_GROUPS = api(16, "ListGroups", "0-4", flexible=3, request="""
    states_filter              [string]             v4+
""", response="""
    throttle_time_ms           int32                v1+
    error_code                 int16                v0+
    groups                     [ListedGroup]        v0+
      group_id                 string               v0+
      protocol_type            string               v0+
      group_state              string               v4+
""")

DELETE_GROUPS = api(42, "DeleteGroups", "0-2", flexible=2, request="""
    groups_names               [string]             v0+
""", response="""
    throttle_time_ms           int32                v0+
    results                    [Result]             v0+
      group_id                 string               v0+
      error_code               int16                v0+
""")

# KIP-496. The response puts error_code before throttle_time_ms; a group-level error comes with no topics.
OFFSET_DELETE = api(47, "OffsetDelete", "0", flexible=None, request="""
    group_id                   string               v0+
    topics                     [Topic]              v0+
      name                     string               v0+
      partitions               [Partition]          v0+
        partition_index        int32                v0+
""", response="""
    error_code                 int16                v0+
    throttle_time_ms           int32                v0+
    topics                     [Topic]              v0+
      name                     string               v0+
      partitions               [Partition]          v0+
        partition_index        int32                v0+
        error_code             int16                v0+
""")

APIS = (FIND_COORDINATOR, JOIN_GROUP, SYNC_GROUP, HEARTBEAT, LEAVE_GROUP, OFFSET_COMMIT,
        OFFSET_FETCH, DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS, OFFSET_DELETE)
