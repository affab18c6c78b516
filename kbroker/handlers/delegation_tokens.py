"""Delegation tokens (38-41, KIP-48) as a Kafka 2.8 broker without ``delegation.token.master.key`` answers
them (kbroker issues no tokens): a request on a PLAINTEXT listener, or from an anonymous client of a
one-way SSL listener, is DELEGATION_TOKEN_REQUEST_NOT_ALLOWED (KafkaApis.allowTokenRequests); any other
is DELEGATION_TOKEN_AUTH_DISABLED (DelegationTokenManager with token authentication off)."""
from __future__ import annotations

from kbroker import errors
from kbroker.handlers.context import BrokerContext
from kbroker.handlers.registry import handles
from kbroker.security.principal import ANONYMOUS

NOT_ALLOWED = errors.DelegationTokenRequestNotAllowedError.code
DISABLED = errors.DelegationTokenAuthDisabledError.code


def _refusal(conn) -> int:
    session = conn.session
    if session.security_protocol == "PLAINTEXT" or (session.security_protocol == "SSL"
                                                     and session.principal == ANONYMOUS):
        return NOT_ALLOWED
    return DISABLED


@handles(38)
def create_delegation_token(ctx: BrokerContext, header, request, conn):
    owner = conn.session.principal  # the response names the requester, as Kafka's prepareResponse does
    return {"error_code": _refusal(conn), "principal_type": owner.type, "principal_name": owner.name,
            "issue_timestamp_ms": -1, "expiry_timestamp_ms": -1, "max_timestamp_ms": -1, "token_id": "",
            "hmac": b"", "throttle_time_ms": 0}


@handles(39)
def renew_delegation_token(ctx: BrokerContext, header, request, conn):
    return {"error_code": _refusal(conn), "expiry_timestamp_ms": -1, "throttle_time_ms": 0}


@handles(40)
def expire_delegation_token(ctx: BrokerContext, header, request, conn):
    return {"error_code": _refusal(conn), "expiry_timestamp_ms": -1, "throttle_time_ms": 0}


@handles(41)
def describe_delegation_token(ctx: BrokerContext, header, request, conn):
    return {"error_code": _refusal(conn), "tokens": [], "throttle_time_ms": 0}
