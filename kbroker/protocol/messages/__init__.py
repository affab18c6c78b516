"""The API declarations, one module per family. `APIS` maps api key -> Api."""
from __future__ import annotations

from kbroker.protocol.messages import (
    acls,
    admin,
    delegation_tokens,
    elections,
    features,
    groups,
    log_dirs,
    metadata,
    produce_fetch,
    quotas,
    replication,
    security,
    txn,
)
from kbroker.protocol.schema import Api

APIS: dict[int, Api] = {}
for _family in (metadata, produce_fetch, groups, admin, txn, replication, acls, quotas, security, elections, log_dirs,
                delegation_tokens, features):
    for _api in _family.APIS:
        if _api.key in APIS:
            raise RuntimeError(f"api key {_api.key} declared twice")
        APIS[_api.key] = _api
del _family, _api
