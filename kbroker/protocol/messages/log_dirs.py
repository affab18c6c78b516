"""Moving replicas between the log dirs of one broker (JBOD disk balancing)."""
from __future__ import annotations

from ..schema import api

# Kafka 2.8: v1 is v0 (throttling answered before the delay); flexible only from v2, which 2.8 lacks.
ALTER_REPLICA_LOG_DIRS = api(34, "AlterReplicaLogDirs", "0-1", flexible=None, request="""
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
