"""Between brokers: OffsetForLeaderEpoch, which a follower (and a KIP-320 consumer) asks before it
fetches after a leadership change, to find where its log diverges from the leader's."""
from __future__ import annotations

from kbroker.protocol.schema import api

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

# Controller -> broker: LeaderAndIsr, StopReplica and UpdateMetadata start with the same header
# (Kafka's AbstractControlRequest); the broker epoch came with KIP-380.
def _control_request(broker_epoch_since: int) -> str:
    return f"""
    controller_id              int32                v0+
    controller_epoch           int32                v0+
    broker_epoch               int64                v{broker_epoch_since}+    default=-1
"""


# What the controller tells a broker of one partition in both LeaderAndIsr and UpdateMetadata
# (the first fields of Kafka's LeaderAndIsrPartitionState and UpdateMetadataPartitionState).
_PARTITION_STATE = """
        partition_index        int32                v0+
        controller_epoch       int32                v0+
        leader                 int32                v0+
        leader_epoch           int32                v0+
        isr                    [int32]              v0+
        zk_version             int32                v0+
        replicas               [int32]              v0+
"""


def _ungrouped(field: str, struct: str, versions: str, extra: str) -> str:
    """The first versions list each partition with its topic name instead of grouping them by topic
    (handlers.control_versions regroups them)."""
    indented = "\n".join("  " + line[4:] if line.startswith("    ") else line
                          for line in _PARTITION_STATE.strip("\n").splitlines())
    return f"""
    {field:<26} [{struct}]  {versions}
      topic_name               string               {versions}
{indented}
      {extra}
"""


# Kafka 2.8 (apache/kafka clients/src/main/resources/common/message/LeaderAndIsrRequest.json, 0-5):
# v1 adds is_new, v2 the broker epoch and the grouping by topic, v3 adding/removing replicas, v4 is
# flexible, v5 (KIP-516) the request type and topic ids, and an answer grouped by topic id.
LEADER_AND_ISR = api(4, "LeaderAndIsr", "0-5", flexible=4, request=_control_request(2) + """
    type                       int8                 v5+
""" + _ungrouped(
    "ungrouped_partition_states", "LeaderAndIsrUngroupedState", "v0-1",
    "is_new                   bool                 v1") + """
    topic_states               [LeaderAndIsrTopicState]  v2+
      topic_name               string               v2+
      topic_id                 uuid                 v5+
      partition_states         [LeaderAndIsrPartitionState]  v2+
""" + _PARTITION_STATE + """
        adding_replicas        [int32]              v3+
        removing_replicas      [int32]              v3+
        is_new                 bool                 v1+
    live_leaders               [LeaderAndIsrLiveLeader]  v0+
      broker_id                int32                v0+
      host_name                string               v0+
      port                     int32                v0+
""", response="""
    error_code                 int16                v0+
    partition_errors           [LeaderAndIsrPartitionError]  v0-4
      topic_name               string               v0-4
      partition_index          int32                v0-4
      error_code               int16                v0-4
    topics                     [LeaderAndIsrTopicError]  v5+
      topic_id                 uuid                 v5+
      partition_errors         [LeaderAndIsrTopicPartitionError]  v5+
        partition_index        int32                v5+
        error_code             int16                v5+
""")

# Kafka 2.8 (StopReplicaRequest.json, 0-3): v1 adds the broker epoch and groups partitions by topic,
# v2 is flexible, v3 (KIP-570) carries each partition's leader epoch and its own delete flag.
STOP_REPLICA = api(5, "StopReplica", "0-3", flexible=2, request=_control_request(1) + """
    delete_partitions          bool                 v0-2
    ungrouped_partitions       [StopReplicaPartitionV0]  v0
      topic_name               string               v0
      partition_index          int32                v0
    topics                     [StopReplicaTopicV1] v1-2
      name                     string               v1-2
      partition_indexes        [int32]              v1-2
    topic_states               [StopReplicaTopicState]  v3+
      topic_name               string               v3+
      partition_states         [StopReplicaPartitionState]  v3+
        partition_index        int32                v3+
        leader_epoch           int32                v3+    default=-1
        delete_partition       bool                 v3+
""", response="""
    error_code                 int16                v0+
    partition_errors           [StopReplicaPartitionError]  v0+
      topic_name               string               v0+
      partition_index          int32                v0+
      error_code               int16                v0+
""")

# Kafka 2.8 (UpdateMetadataRequest.json, 0-7): v1 lists endpoints, v2 adds the rack, v3 the listener
# name, v4 offline replicas, v5 the broker epoch and the grouping by topic, v6 is flexible, v7 topic ids.
UPDATE_METADATA = api(6, "UpdateMetadata", "0-7", flexible=6, request=_control_request(5) + _ungrouped(
    "ungrouped_partition_states", "UpdateMetadataUngroupedState", "v0-4",
    "offline_replicas         [int32]              v4") + """
    topic_states               [UpdateMetadataTopicState]  v5+
      topic_name               string               v5+
      topic_id                 uuid                 v7+
      partition_states         [UpdateMetadataPartitionState]  v5+
""" + _PARTITION_STATE + """
        offline_replicas       [int32]              v4+
    live_brokers               [UpdateMetadataBroker]  v0+
      id                       int32                v0+
      v0_host                  string               v0
      v0_port                  int32                v0
      endpoints                [UpdateMetadataEndpoint]  v1+
        port                   int32                v1+
        host                   string               v1+
        listener               string               v3+
        security_protocol      int16                v1+
      rack                     string               v2+    nullable
""", response="""
    error_code                 int16                v0+
""")

# KIP-497 (Kafka 2.8, AlterIsrRequest.json, v0 flexible): a partition leader asks the controller to
# change its ISR, fenced by its leader epoch and the state znode's version (current_isr_version).
ALTER_ISR = api(56, "AlterIsr", "0", flexible=0, request="""
    broker_id                  int32                v0+
    broker_epoch               int64                v0+    default=-1
    topics                     [TopicData]          v0+
      name                     string               v0+
      partitions               [PartitionData]      v0+
        partition_index        int32                v0+
        leader_epoch           int32                v0+
        new_isr                [int32]              v0+
        current_isr_version    int32                v0+
""", response="""
    throttle_time_ms           int32                v0+
    error_code                 int16                v0+
    topics                     [TopicResult]        v0+
      name                     string               v0+
      partitions               [PartitionResult]    v0+
        partition_index        int32                v0+
        error_code             int16                v0+
        leader_id              int32                v0+
        leader_epoch           int32                v0+
        isr                    [int32]              v0+
        current_isr_version    int32                v0+
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

APIS = (LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA, OFFSET_FOR_LEADER_EPOCH, CONTROLLED_SHUTDOWN,
        ALTER_PARTITION_REASSIGNMENTS, LIST_PARTITION_REASSIGNMENTS, ALTER_ISR)
