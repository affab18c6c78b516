"""The data path: Produce, Fetch, ListOffsets.

Records fields decode to memoryviews of the receive buffer; on encode they may also be file
slices (anything with a `length` and no buffer protocol), which become chunks of their own.
"""
from __future__ import annotations

from kbroker.protocol.schema import api

# v3+ carries exactly one magic-2 batch per partition; v0-2 legacy message sets.
PRODUCE = api(0, "Produce", "0-9", flexible=9, request="""
    transactional_id           string               v3+    nullable
    acks                       int16                v0+
    timeout_ms                 int32                v0+
    topic_data                 [TopicData]          v0+
      name                     string               v0+
      partition_data           [PartitionData]      v0+
        index                  int32                v0+
        records                records              v0+    nullable
""", response="""
    responses                  [TopicResponse]      v0+
      name                     string               v0+
      partition_responses      [PartitionResponse]  v0+
        index                  int32                v0+
        error_code             int16                v0+
        base_offset            int64                v0+
        log_append_time_ms     int64                v2+    default=-1
        log_start_offset       int64                v5+    default=-1
        record_errors          [RecordError]        v8+
          batch_index          int32                v8+
          batch_index_error_message  string         v8+    nullable
        error_message          string               v8+    nullable
    throttle_time_ms           int32                v1+
""")

# Capped at v12: v13+ replaces topic names by topic ids.
FETCH = api(1, "Fetch", "0-12", flexible=12, request="""
    cluster_id                 string               v12+   nullable  tag=0
    replica_id                 int32                v0-14  default=-1
    max_wait_ms                int32                v0+
    min_bytes                  int32                v0+
    max_bytes                  int32                v3+    default=0x7fffffff
    isolation_level            int8                 v4+
    session_id                 int32                v7+
    session_epoch              int32                v7+    default=-1
    topics                     [FetchTopic]         v0+
      topic                    string               v0-12
      partitions               [FetchPartition]     v0+
        partition              int32                v0+
        current_leader_epoch   int32                v9+    default=-1
        fetch_offset           int64                v0+
        last_fetched_epoch     int32                v12+   default=-1
        log_start_offset       int64                v5+    default=-1
        partition_max_bytes    int32                v0+
    forgotten_topics_data      [ForgottenTopic]     v7+
      topic                    string               v7-12
      partitions               [int32]              v7+
    rack_id                    string               v11+
""", response="""
    throttle_time_ms           int32                v1+
    error_code                 int16                v7+
    session_id                 int32                v7+
    responses                  [TopicResponse]      v0+
      topic                    string               v0-12
      partitions               [PartitionData]      v0+
        partition_index        int32                v0+
        error_code             int16                v0+
        high_watermark         int64                v0+
        last_stable_offset     int64                v4+    default=-1
        log_start_offset       int64                v5+    default=-1
        diverging_epoch        EpochEndOffset       v12+   tag=0
          epoch                int32                v12+   default=-1
          end_offset           int64                v12+   default=-1
        current_leader         LeaderIdAndEpoch     v12+   tag=1
          leader_id            int32                v12+   default=-1
          leader_epoch         int32                v12+   default=-1
        snapshot_id            SnapshotId           v12+   tag=2
          end_offset           int64                v0+    default=-1
          epoch                int32                v0+    default=-1
        aborted_transactions   [AbortedTransaction] v4+    nullable
          producer_id          int64                v4+
          first_offset         int64                v4+
        preferred_read_replica int32                v11+   default=-1
        records                records              v0+    nullable
""")

# v0 answers with a list of offsets (OldStyleOffsets); v1+ with one offset and its timestamp. Kafka 2.8 serves
# v0-6: v7 (MAX_TIMESTAMP, KIP-734) is 3.0's, and advertising it makes clients take the broker for a 3.0.
LIST_OFFSETS = api(2, "ListOffsets", "0-6", flexible=6, request="""
    replica_id                 int32                v0+
    isolation_level            int8                 v2+
    topics                     [Topic]              v0+
      name                     string               v0+
      partitions               [Partition]          v0+
        partition_index        int32                v0+
        current_leader_epoch   int32                v4+    default=-1
        timestamp              int64                v0+
        max_num_offsets        int32                v0     default=1
""", response="""
    throttle_time_ms           int32                v2+
    topics                     [TopicResponse]      v0+
      name                     string               v0+
      partitions               [PartitionResponse]  v0+
        partition_index        int32                v0+
        error_code             int16                v0+
        old_style_offsets      [int64]              v0
        timestamp              int64                v1+    default=-1
        offset                 int64                v1+    default=-1
        leader_epoch           int32                v4+    default=-1
""")

APIS = (PRODUCE, FETCH, LIST_OFFSETS)
