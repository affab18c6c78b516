"""SASL and SCRAM credential administration: SaslAuthenticate, Describe/AlterUserScramCredentials.
(SaslHandshake (17) is declared with ApiVersions in metadata.py: clients send it before anything else.)"""
from __future__ import annotations

from kbroker.protocol.schema import api

# v1+: session_lifetime_ms (KIP-368 re-authentication). auth_bytes is never null.
SASL_AUTHENTICATE = api(36, "SaslAuthenticate", "0-2", flexible=2, request="""
    auth_bytes                 bytes                v0+
""", response="""
    error_code                 int16                v0+
    error_message              string               v0+    nullable
    auth_bytes                 bytes                v0+
    session_lifetime_ms        int64                v1+
""")

# Null users = every user that has SCRAM credentials. Mechanism 1 = SCRAM-SHA-256, 2 = SCRAM-SHA-512.
DESCRIBE_USER_SCRAM_CREDENTIALS = api(50, "DescribeUserScramCredentials", "0", flexible=0, request="""
    users                      [UserName]           v0+    nullable
      name                     string               v0+
""", response="""
    throttle_time_ms           int32                v0+
    error_code                 int16                v0+
    error_message              string               v0+    nullable
    results                    [Result]             v0+
      user                     string               v0+
      error_code               int16                v0+
      error_message            string               v0+    nullable
      credential_infos         [CredentialInfo]     v0+
        mechanism              int8                 v0+
        iterations             int32                v0+
""")

ALTER_USER_SCRAM_CREDENTIALS = api(51, "AlterUserScramCredentials", "0", flexible=0, request="""
    deletions                  [Deletion]           v0+
      name                     string               v0+
      mechanism                int8                 v0+
    upsertions                 [Upsertion]          v0+
      name                     string               v0+
      mechanism                int8                 v0+
      iterations               int32                v0+
      salt                     bytes                v0+
      salted_password          bytes                v0+
""", response="""
    throttle_time_ms           int32                v0+
    results                    [Result]             v0+
      user                     string               v0+
      error_code               int16                v0+
      error_message            string               v0+    nullable
""")

APIS = (SASL_AUTHENTICATE, DESCRIBE_USER_SCRAM_CREDENTIALS, ALTER_USER_SCRAM_CREDENTIALS)
