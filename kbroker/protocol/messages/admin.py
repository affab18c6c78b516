"""Topic, record and config administration, and log-dir inspection."""
from __future__ import annotations

from kbroker.protocol.schema import api

# v4+: num_partitions / replication_factor -1 = broker default; v5+ answers with the configs.
CREATE_TOPICS = api(19, "CreateTopics", "0-7", flexible=5, request="""
    topics                     [Topic]              v0+
      name                     string               v0+
      num_partitions           int32                v0+
      replication_factor       int16                v0+
      assignments              [Assignment]         v0+
        partition_index        int32                v0+
        broker_ids             [int32]              v0+
      configs                  [Config]             v0+
        name                   string               v0+
        value                  string               v0+    nullable
    timeout_ms                 int32                v0+    default=60000
    validate_only              bool                 v1+
""", response="""
    throttle_time_ms           int32                v2+
    topics                     [TopicResult]        v0+
      name                     string               v0+
      topic_id                 uuid                 v7+
      error_code               int16                v0+
      error_message            string               v1+    nullable
      topic_config_error_code  int16                v5+    tag=0
      num_partitions           int32                v5+    default=-1
      replication_factor       int16                v5+    default=-1
      configs                  [ConfigResult]       v5+    nullable  default=null
        name                   string               v5+
        value                  string               v5+    nullable
        read_only              bool                 v5+
        config_source          int8                 v5+    default=-1
        is_sensitive           bool                 v5+
""")

# v6 names topics by name or id.
DELETE_TOPICS = api(20, "DeleteTopics", "0-6", flexible=4, request="""
    topics                     [TopicState]         v6+
      name                     string               v6+    nullable
      topic_id                 uuid                 v6+
    topic_names                [string]             v0-5
    timeout_ms                 int32                v0+
""", response="""
    throttle_time_ms           int32                v1+
    responses                  [TopicResult]        v0+
      name                     string               v0+    nullable:v6+
      topic_id                 uuid                 v6+
      error_code               int16                v0+
      error_message            string               v5+    nullable
""")

# Null assignments = let the controller place the new partitions.
CREATE_PARTITIONS = api(37, "CreatePartitions", "0-3", flexible=2, request="""
    topics                     [Topic]              v0+
      name                     string               v0+
      count                    int32                v0+
      assignments              [Assignment]         v0+    nullable  default=null
        broker_ids             [int32]              v0+
    timeout_ms                 int32                v0+
    validate_only              bool                 v0+
""", response="""
    throttle_time_ms           int32                v0+
    results                    [TopicResult]        v0+
      name                     string               v0+
      error_code               int16                v0+
      error_message            string               v0+    nullable
""")

DELETE_RECORDS = api(21, "DeleteRecords", "0-2", flexible=2, request="""
    topics                     [Topic]              v0+
      name                     string               v0+
      partitions               [Partition]          v0+
        partition_index        int32                v0+
        offset                 int64                v0+
    timeout_ms                 int32                v0+
""", response="""
    throttle_time_ms           int32                v0+
    topics                     [TopicResult]        v0+
      name                     string               v0+
      partitions               [PartitionResult]    v0+
        partition_index        int32                v0+
        low_watermark          int64                v0+
        error_code             int16                v0+
""")

# resource_type: 2 topic, 4 broker, 8 broker logger. Null configuration_keys = all of them.
DESCRIBE_CONFIGS = api(32, "DescribeConfigs", "0-4", flexible=4, request="""
    resources                  [Resource]           v0+
      resource_type            int8                 v0+
      resource_name            string               v0+
      configuration_keys       [string]             v0+    nullable  default=null
    include_synonyms           bool                 v1+
    include_documentation      bool                 v3+
""", response="""
    throttle_time_ms           int32                v0+
    results                    [Result]             v0+
      error_code               int16                v0+
      error_message            string               v0+    nullable
      resource_type            int8                 v0+
      resource_name            string               v0+
      configs                  [ResourceResult]     v0+
        name                   string               v0+
        value                  string               v0+    nullable
        read_only              bool                 v0+
        is_default             bool                 v0
        config_source          int8                 v1+    default=-1
        is_sensitive           bool                 v0+
        synonyms               [Synonym]            v1+
          name                 string               v1+
          value                string               v1+    nullable
          source               int8                 v1+
        config_type            int8                 v3+
        documentation          string               v3+    nullable
""")

# AlterConfigs and IncrementalAlterConfigs answer alike: one error per resource.
_ALTER_CONFIGS_RESPONSE = """
    throttle_time_ms           int32                v0+
    responses                  [ResourceResponse]   v0+
      error_code               int16                v0+
      error_message            string               v0+    nullable
      resource_type            int8                 v0+
      resource_name            string               v0+
"""

ALTER_CONFIGS = api(33, "AlterConfigs", "0-2", flexible=2, request="""
    resources                  [Resource]           v0+
      resource_type            int8                 v0+
      resource_name            string               v0+
      configs                  [Config]             v0+
        name                   string               v0+
        value                  string               v0+    nullable
    validate_only              bool                 v0+
""", response=_ALTER_CONFIGS_RESPONSE)

# config_operation: 0 set, 1 delete, 2 append, 3 subtract.
INCREMENTAL_ALTER_CONFIGS = api(44, "IncrementalAlterConfigs", "0-1", flexible=1, request="""
    resources                  [Resource]           v0+
      resource_type            int8                 v0+
      resource_name            string               v0+
      configs                  [Config]             v0+
        name                   string               v0+
        config_operation       int8                 v0+
        value                  string               v0+    nullable
    validate_only              bool                 v0+
""", response=_ALTER_CONFIGS_RESPONSE)

# Null topics = every partition in every log dir.
DESCRIBE_LOG_DIRS = api(35, "DescribeLogDirs", "0-2", flexible=2, request="""
    topics                     [Topic]              v0+    nullable  default=null
      topic                    string               v0+
      partitions               [int32]              v0+
""", response="""
    throttle_time_ms           int32                v0+
    results                    [Result]             v0+
      error_code               int16                v0+
      log_dir                  string               v0+
      topics                   [Topic]              v0+
        name                   string               v0+
        partitions             [Partition]          v0+
          partition_index      int32                v0+
          partition_size       int64                v0+
          offset_lag           int64                v0+
          is_future_key        bool                 v0+
""")

APIS = (CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS, DELETE_RECORDS, DESCRIBE_CONFIGS,
        ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS, DESCRIBE_LOG_DIRS)
