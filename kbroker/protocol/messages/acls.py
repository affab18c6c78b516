"""ACL administration: DescribeAcls (29), CreateAcls (30), DeleteAcls (31), v0-2 as in Kafka 2.8
(v1 adds the pattern type, v2 is flexible; v3's USER resource type is 3.0+). The enumerations
below are the wire codes (``org.apache.kafka.common.resource.ResourceType``, ``acl.AclOperation``,
``acl.AclPermissionType``, ``resource.PatternType``); their ``name`` is Kafka's Java enum name."""
from __future__ import annotations

import enum

from kbroker.protocol.schema import api


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


class PermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


CLUSTER_NAME = "kafka-cluster"   # the one name of the CLUSTER resource
WILDCARD = "*"                   # a LITERAL resource name matching every name of its type

# Operations each resource type supports (Kafka's AclEntry.supportedOperations; ALL on any of them)
SUPPORTED_OPERATIONS: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset({AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
                                   AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
                                   AclOperation.ALTER_CONFIGS}),
    ResourceType.GROUP: frozenset({AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE}),
    ResourceType.CLUSTER: frozenset({AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
                                     AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                                     AclOperation.DESCRIBE}),
    ResourceType.TRANSACTIONAL_ID: frozenset({AclOperation.DESCRIBE, AclOperation.WRITE}),
    ResourceType.DELEGATION_TOKEN: frozenset({AclOperation.DESCRIBE}),
}

_FILTER = """
    resource_type_filter       int8                 v0+
    resource_name_filter       string               v0+    nullable
    pattern_type_filter        int8                 v1+    default=3
    principal_filter           string               v0+    nullable
    host_filter                string               v0+    nullable
    operation                  int8                 v0+
    permission_type            int8                 v0+
"""

DESCRIBE_ACLS = api(29, "DescribeAcls", "0-2", flexible=2, request=_FILTER, response="""
    throttle_time_ms           int32                v0+
    error_code                 int16                v0+
    error_message              string               v0+    nullable
    resources                  [Resource]           v0+
      resource_type            int8                 v0+
      resource_name            string               v0+
      pattern_type             int8                 v1+    default=3
      acls                     [Acl]                v0+
        principal              string               v0+
        host                   string               v0+
        operation              int8                 v0+
        permission_type        int8                 v0+
""")

CREATE_ACLS = api(30, "CreateAcls", "0-2", flexible=2, request="""
    creations                  [Creation]           v0+
      resource_type            int8                 v0+
      resource_name            string               v0+
      resource_pattern_type    int8                 v1+    default=3
      principal                string               v0+
      host                     string               v0+
      operation                int8                 v0+
      permission_type          int8                 v0+
""", response="""
    throttle_time_ms           int32                v0+
    results                    [Result]             v0+
      error_code               int16                v0+
      error_message            string               v0+    nullable
""")

DELETE_ACLS = api(31, "DeleteAcls", "0-2", flexible=2, request="""
    filters                    [Filter]             v0+
      resource_type_filter     int8                 v0+
      resource_name_filter     string               v0+    nullable
      pattern_type_filter      int8                 v1+    default=3
      principal_filter         string               v0+    nullable
      host_filter              string               v0+    nullable
      operation                int8                 v0+
      permission_type          int8                 v0+
""", response="""
    throttle_time_ms           int32                v0+
    filter_results             [FilterResult]       v0+
      error_code               int16                v0+
      error_message            string               v0+    nullable
      matching_acls            [MatchingAcl]        v0+
        error_code             int16                v0+
        error_message          string               v0+    nullable
        resource_type          int8                 v0+
        resource_name          string               v0+
        pattern_type           int8                 v1+    default=3
        principal              string               v0+
        host                   string               v0+
        operation              int8                 v0+
        permission_type        int8                 v0+
""")

APIS = (DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS)
