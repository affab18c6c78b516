"""Client quota administration: DescribeClientQuotas (48) and AlterClientQuotas (49), v0-1 as in
Kafka 2.8 (v1 is flexible). Entity types are ``user`` and ``client-id``; a null entity name is the
default entity (``<default>`` in ZooKeeper). Values are doubles on the wire."""
from __future__ import annotations

from kbroker.protocol.schema import api

# match_type: 0 exact name (``match``), 1 the default entity, 2 any entity of the type.
MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2

DESCRIBE_CLIENT_QUOTAS = api(48, "DescribeClientQuotas", "0-1", flexible=1, request="""
    components                 [Component]          v0+
      entity_type              string               v0+
      match_type               int8                 v0+
      match                    string               v0+    nullable
    strict                     bool                 v0+
""", response="""
    throttle_time_ms           int32                v0+
    error_code                 int16                v0+
    error_message              string               v0+    nullable
    entries                    [Entry]              v0+    nullable
      entity                   [Entity]             v0+
        entity_type            string               v0+
        entity_name            string               v0+    nullable
      values                   [Value]              v0+
        key                    string               v0+
        value                  float64              v0+
""")

ALTER_CLIENT_QUOTAS = api(49, "AlterClientQuotas", "0-1", flexible=1, request="""
    entries                    [Entry]              v0+
      entity                   [Entity]             v0+
        entity_type            string               v0+
        entity_name            string               v0+    nullable
      ops                      [Op]                 v0+
        key                    string               v0+
        value                  float64              v0+
        remove                 bool                 v0+
    validate_only              bool                 v0+
""", response="""
    throttle_time_ms           int32                v0+
    entries                    [Entry]              v0+
      error_code               int16                v0+
      error_message            string               v0+    nullable
      entity                   [Entity]             v0+
        entity_type            string               v0+
        entity_name            string               v0+    nullable
""")

APIS = (DESCRIBE_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS)
