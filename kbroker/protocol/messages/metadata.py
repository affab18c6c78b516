"""Connection setup and cluster discovery: ApiVersions, SaslHandshake, Metadata, DescribeCluster."""
from __future__ import annotations

from kbroker.protocol.schema import api

# The response header of ApiVersions is always v0 (header.py). The v3 tagged fields (features,
# ZK migration) are only written when set: librdkafka 2.0.2 fails on default-valued ones.
API_VERSIONS = api(18, "ApiVersions", "0-3", flexible=3, request="""
    client_software_name       string               v3+
    client_software_version    string               v3+
""", response="""
    error_code                 int16                v0+
    api_keys                   [ApiVersion]         v0+
      api_key                  int16                v0+
      min_version              int16                v0+
      max_version              int16                v0+
    throttle_time_ms           int32                v1+
    supported_features         [SupportedFeature]   v3+    tag=0
      name                     string               v3+
      min_version              int16                v3+
      max_version              int16                v3+
    finalized_features_epoch   int64                v3+    tag=1  default=-1
    finalized_features         [FinalizedFeature]   v3+    tag=2
      name                     string               v3+
      max_version_level        int16                v3+
      min_version_level        int16                v3+
    zk_migration_ready         bool                 v3+    tag=3
""")

# Never flexible. v1 means the SASL tokens then travel in SaslAuthenticate requests.
SASL_HANDSHAKE = api(17, "SaslHandshake", "0-1", flexible=None, request="""
    mechanism                  string               v0+
""", response="""
    error_code                 int16                v0+
    mechanisms                 [string]             v0+
""")

# Which topics: v0 an empty array means all; v1+ null means all and empty means none. Kafka 2.8 serves v0-11:
# v12 (topics named by id, KIP-516) is 3.1's.
METADATA = api(3, "Metadata", "0-11", flexible=9, request="""
    topics                     [Topic]              v0+    nullable:v1+
      topic_id                 uuid                 v10+
      name                     string               v0+    nullable:v10+
    allow_auto_topic_creation  bool                 v4+    default=true
    include_cluster_authorized_operations  bool     v8-10
    include_topic_authorized_operations    bool     v8+
""", response="""
    throttle_time_ms           int32                v3+
    brokers                    [Broker]             v0+
      node_id                  int32                v0+
      host                     string               v0+
      port                     int32                v0+
      rack                     string               v1+    nullable
    cluster_id                 string               v2+    nullable
    controller_id              int32                v1+    default=-1
    topics                     [Topic]              v0+
      error_code               int16                v0+
      name                     string               v0+
      topic_id                 uuid                 v10+
      is_internal              bool                 v1+
      partitions               [Partition]          v0+
        error_code             int16                v0+
        partition_index        int32                v0+
        leader_id              int32                v0+
        leader_epoch           int32                v7+    default=-1
        replica_nodes          [int32]              v0+
        isr_nodes              [int32]              v0+
        offline_replicas       [int32]              v5+
      topic_authorized_operations    int32          v8+    default=-2147483648
    cluster_authorized_operations    int32          v8-10  default=-2147483648
""")

DESCRIBE_CLUSTER = api(60, "DescribeCluster", "0", flexible=0, request="""
    include_cluster_authorized_operations  bool     v0+
""", response="""
    throttle_time_ms           int32                v0+
    error_code                 int16                v0+
    error_message              string               v0+    nullable
    cluster_id                 string               v0+
    controller_id              int32                v0+    default=-1
    brokers                    [Broker]             v0+
      broker_id                int32                v0+
      host                     string               v0+
      port                     int32                v0+
      rack                     string               v0+    nullable
    cluster_authorized_operations    int32          v0+    default=-2147483648
""")

APIS = (API_VERSIONS, SASL_HANDSHAKE, METADATA, DESCRIBE_CLUSTER)
