"""Idempotent and transactional producers: producer ids and the transaction APIs."""
from __future__ import annotations

from kbroker.protocol.schema import api

# Null transactional_id = an idempotent producer. v3+ may resume an existing (id, epoch) (KIP-360).
INIT_PRODUCER_ID = api(22, "InitProducerId", "0-4", flexible=2, request="""
    transactional_id           string               v0+    nullable
    transaction_timeout_ms     int32                v0+
    producer_id                int64                v3+    default=-1
    producer_epoch             int16                v3+    default=-1
""", response="""
    throttle_time_ms           int32                v0+
    error_code                 int16                v0+
    producer_id                int64                v0+    default=-1
    producer_epoch             int16                v0+
""")

# Field names are those of Kafka 2.8; 3.x renamed them V3AndBelow* when it added the batched v4.
ADD_PARTITIONS_TO_TXN = api(24, "AddPartitionsToTxn", "0-3", flexible=3, request="""
    transactional_id           string               v0+
    producer_id                int64                v0+
    producer_epoch             int16                v0+
    topics                     [Topic]              v0+
      name                     string               v0+
      partitions               [int32]              v0+
""", response="""
    throttle_time_ms           int32                v0+
    results                    [TopicResult]        v0+
      name                     string               v0+
      results                  [PartitionResult]    v0+
        partition_index        int32                v0+
        error_code             int16                v0+
""")

ADD_OFFSETS_TO_TXN = api(25, "AddOffsetsToTxn", "0-3", flexible=3, request="""
    transactional_id           string               v0+
    producer_id                int64                v0+
    producer_epoch             int16                v0+
    group_id                   string               v0+
""", response="""
    throttle_time_ms           int32                v0+
    error_code                 int16                v0+
""")

END_TXN = api(26, "EndTxn", "0-3", flexible=3, request="""
    transactional_id           string               v0+
    producer_id                int64                v0+
    producer_epoch             int16                v0+
    committed                  bool                 v0+
""", response="""
    throttle_time_ms           int32                v0+
    error_code                 int16                v0+
""")

# Sent by the transaction coordinator to partition leaders; transaction_result true = COMMIT.
WRITE_TXN_MARKERS = api(27, "WriteTxnMarkers", "0-1", flexible=1, request="""
    markers                    [Marker]             v0+
      producer_id              int64                v0+
      producer_epoch           int16                v0+
      transaction_result       bool                 v0+
      topics                   [Topic]              v0+
        name                   string               v0+
        partition_indexes      [int32]              v0+
      coordinator_epoch        int32                v0+
""", response="""
    markers                    [MarkerResult]       v0+
      producer_id              int64                v0+
      topics                   [TopicResult]        v0+
        name                   string               v0+
        partitions             [PartitionResult]    v0+
          partition_index      int32                v0+
          error_code           int16                v0+
""")

TXN_OFFSET_COMMIT = api(28, "TxnOffsetCommit", "0-3", flexible=3, request="""
    transactional_id           string               v0+
    group_id                   string               v0+
    producer_id                int64                v0+
    producer_epoch             int16                v0+
    generation_id              int32                v3+    default=-1
    member_id                  string               v3+
    group_instance_id          string               v3+    nullable
    topics                     [Topic]              v0+
      name                     string               v0+
      partitions               [Partition]          v0+
        partition_index        int32                v0+
        committed_offset       int64                v0+
        committed_leader_epoch int32                v2+    default=-1
        committed_metadata     string               v0+    nullable
""", response="""
    throttle_time_ms           int32                v0+
    topics                     [Topic]              v0+
      name                     string               v0+
      partitions               [Partition]          v0+
        partition_index        int32                v0+
        error_code             int16                v0+
""")

# KIP-664 (Kafka 2.8, apache/kafka clients/src/main/resources/common/message/DescribeProducers*.json):
# the producers a partition replica's producer state holds, for finding hanging transactions.
DESCRIBE_PRODUCERS = api(61, "DescribeProducers", "0", flexible=0, request="""
    topics                     [TopicRequest]       v0+
      name                     string               v0+
      partition_indexes        [int32]              v0+
""", response="""
    throttle_time_ms           int32                v0+
    topics                     [TopicResponse]      v0+
      name                     string               v0+
      partitions               [PartitionResponse]  v0+
        partition_index        int32                v0+
        error_code             int16                v0+
        error_message          string               v0+    nullable  default=null
        active_producers       [ProducerState]      v0+
          producer_id          int64                v0+
          producer_epoch       int32                v0+
          last_sequence        int32                v0+    default=-1
          last_timestamp       int64                v0+    default=-1
          coordinator_epoch    int32                v0+
          current_txn_start_offset  int64           v0+    default=-1
""")

APIS = (INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN, WRITE_TXN_MARKERS,
        TXN_OFFSET_COMMIT, DESCRIBE_PRODUCERS)
