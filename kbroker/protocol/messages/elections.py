"""Leader elections: ElectLeaders (43), v0-2 as in Kafka 2.8 (KIP-460: v1 adds the election type
and a top-level error code; v2 is flexible). Only the controller serves it."""
from __future__ import annotations

from kbroker.protocol.schema import api

# election_type: 0 moves leadership back to the preferred (first assigned) replica; 1 elects a
# live replica of a partition without a live leader, in sync or not.
PREFERRED, UNCLEAN = 0, 1

# Null topic_partitions = every partition (the answer then leaves out ELECTION_NOT_NEEDED ones).
ELECT_LEADERS = api(43, "ElectLeaders", "0-2", flexible=2, request="""
    election_type              int8                 v1+
    topic_partitions           [TopicPartitions]    v0+    nullable
      topic                    string               v0+
      partition_id             [int32]              v0+
    timeout_ms                 int32                v0+    default=60000
""", response="""
    throttle_time_ms           int32                v0+
    error_code                 int16                v1+
    replica_election_results   [ReplicaElectionResult]  v0+
      topic                    string               v0+
      partition_result         [PartitionResult]    v0+
        partition_id           int32                v0+
        error_code             int16                v0+
        error_message          string               v0+    nullable
""")

APIS = (ELECT_LEADERS,)
