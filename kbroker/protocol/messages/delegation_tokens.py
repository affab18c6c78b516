"""Delegation tokens (KIP-48): create, renew, expire, describe. Kafka 2.8 (apache/kafka
clients/src/main/resources/common/message/*DelegationToken*.json) serves v0-2, flexible from v2."""
from __future__ import annotations

from kbroker.protocol.schema import api

CREATE_DELEGATION_TOKEN = api(38, "CreateDelegationToken", "0-2", flexible=2, request="""
    renewers                   [CreatableRenewers]  v0+
      principal_type           string               v0+
      principal_name           string               v0+
    max_lifetime_ms            int64                v0+
""", response="""
    error_code                 int16                v0+
    principal_type             string               v0+
    principal_name             string               v0+
    issue_timestamp_ms         int64                v0+
    expiry_timestamp_ms        int64                v0+
    max_timestamp_ms           int64                v0+
    token_id                   string               v0+
    hmac                       bytes                v0+
    throttle_time_ms           int32                v0+
""")

RENEW_DELEGATION_TOKEN = api(39, "RenewDelegationToken", "0-2", flexible=2, request="""
    hmac                       bytes                v0+
    renew_period_ms            int64                v0+
""", response="""
    error_code                 int16                v0+
    expiry_timestamp_ms        int64                v0+
    throttle_time_ms           int32                v0+
""")

EXPIRE_DELEGATION_TOKEN = api(40, "ExpireDelegationToken", "0-2", flexible=2, request="""
    hmac                       bytes                v0+
    expiry_time_period_ms      int64                v0+
""", response="""
    error_code                 int16                v0+
    expiry_timestamp_ms        int64                v0+
    throttle_time_ms           int32                v0+
""")

# Null owners = every token the caller may describe.
DESCRIBE_DELEGATION_TOKEN = api(41, "DescribeDelegationToken", "0-2", flexible=2, request="""
    owners                     [Owner]              v0+    nullable
      principal_type           string               v0+
      principal_name           string               v0+
""", response="""
    error_code                 int16                v0+
    tokens                     [DescribedToken]     v0+
      principal_type           string               v0+
      principal_name           string               v0+
      issue_timestamp          int64                v0+
      expiry_timestamp         int64                v0+
      max_timestamp            int64                v0+
      token_id                 string               v0+
      hmac                     bytes                v0+
      renewers                 [Renewer]            v0+
        principal_type         string               v0+
        principal_name         string               v0+
    throttle_time_ms           int32                v0+
""")

APIS = (CREATE_DELEGATION_TOKEN, RENEW_DELEGATION_TOKEN, EXPIRE_DELEGATION_TOKEN, DESCRIBE_DELEGATION_TOKEN)
