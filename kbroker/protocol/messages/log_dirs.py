"""Moving replicas between the log dirs of one broker (JBOD disk balancing)."""
from __future__ import annotations

from kbroker.protocol.schema import api

# Kafka 2.8 (apache/kafka clients/src/main/resources/common/message/AlterReplicaLogDirsRequest.json):
# v1 is v0 (throttling answered before the delay); v2 is v1 in the flexible encoding.
ALTER_REPLICA_LOG_DIRS = api(34, "AlterReplicaLogDirs", "0-2", flexible=2, request="""
    dirs                       [Dir]                v0+
      path                     string               v0+
      topics                   [Topic]              v0+
        name                   string               v0+
        partitions             [int32]              v0+
""", response="""
    throttle_time_ms           int32                v0+
    results                    [Result]             v0+
      topic_name               string               v0+
      partitions               [Partition]          v0+
        partition_index        int32                v0+
        error_code             int16                v0+
""")

APIS = (ALTER_REPLICA_LOG_DIRS,)
