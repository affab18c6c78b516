"""Between brokers: OffsetForLeaderEpoch, which a follower (and a KIP-320 consumer) asks before it
fetches after a leadership change, to find where its log diverges from the leader's."""
from __future__ import annotations

from ..schema import api

# v2 adds the fencing epoch, v3 the replica id (-2 = not given, -1 = a consumer), v4 is flexible.
OFFSET_FOR_LEADER_EPOCH = api(23, "OffsetForLeaderEpoch", "0-4", flexible=4, request="""
    replica_id                 int32                v3+    default=-2
    topics                     [OffsetForLeaderTopic]  v0+
      topic                    string               v0+
      partitions               [OffsetForLeaderPartition]  v0+
        partition              int32                v0+
        current_leader_epoch   int32                v2+    default=-1
        leader_epoch           int32                v0+
""", response="""
    throttle_time_ms           int32                v2+
    topics                     [OffsetForLeaderTopicResult]  v0+
      topic                    string               v0+
      partitions               [EpochEndOffset]     v0+
        error_code             int16                v0+
        partition              int32                v0+
        leader_epoch           int32                v1+    default=-1
        end_offset             int64                v0+    default=-1
""")

# A stopping broker asks the controller to move its leaderships away first (v2 adds the broker's
# registration epoch, v3 is flexible).
CONTROLLED_SHUTDOWN = api(7, "ControlledShutdown", "0-3", flexible=3, request="""
    broker_id                  int32                v0+
    broker_epoch               int64                v2+    default=-1
""", response="""
    error_code                 int16                v0+
    remaining_partitions       [RemainingPartition] v0+
      topic_name               string               v0+
      partition_index          int32                v0+
""")

# KIP-455: what kafka-reassign-partitions.sh --bootstrap-server sends. Null replicas cancel.
ALTER_PARTITION_REASSIGNMENTS = api(45, "AlterPartitionReassignments", "0", flexible=0, request="""
    timeout_ms                 int32                v0+    default=60000
    topics                     [ReassignableTopic]  v0+
      name                     string               v0+
      partitions               [ReassignablePartition]  v0+
        partition_index        int32                v0+
        replicas               [int32]              v0+    nullable
""", response="""
    throttle_time_ms           int32                v0+
    error_code                 int16                v0+
    error_message              string               v0+    nullable
    responses                  [ReassignableTopicResponse]  v0+
      name                     string               v0+
      partitions               [ReassignablePartitionResponse]  v0+
        partition_index        int32                v0+
        error_code             int16                v0+
        error_message          string               v0+    nullable
""")

LIST_PARTITION_REASSIGNMENTS = api(46, "ListPartitionReassignments", "0", flexible=0, request="""
    timeout_ms                 int32                v0+    default=60000
    topics                     [ListPartitionReassignmentsTopics]  v0+  nullable
      name                     string               v0+
      partition_indexes        [int32]              v0+
""", response="""
    throttle_time_ms           int32                v0+
    error_code                 int16                v0+
    error_message              string               v0+    nullable
    topics                     [OngoingTopicReassignment]  v0+
      name                     string               v0+
      partitions               [OngoingPartitionReassignment]  v0+
        partition_index        int32                v0+
        replicas               [int32]              v0+
        adding_replicas        [int32]              v0+
        removing_replicas      [int32]              v0+
""")

APIS = (OFFSET_FOR_LEADER_EPOCH, CONTROLLED_SHUTDOWN, ALTER_PARTITION_REASSIGNMENTS, LIST_PARTITION_REASSIGNMENTS)
