"""Delegation tokens (38-41, KIP-48) as a Kafka 2.8 broker without ``delegation.token.master.key`` answers
them (kbroker issues no tokens): a request on a PLAINTEXT listener, or from an anonymous client of a
one-way SSL listener, is DELEGATION_TOKEN_REQUEST_NOT_ALLOWED (KafkaApis.allowTokenRequests); any other
is DELEGATION_TOKEN_AUTH_DISABLED (DelegationTokenManager with token authentication off)."""
from __future__ import annotations

from kbroker import errors
from kbroker.handlers.context import BrokerContext
from kbroker.handlers.registry import Answer, ClientConnection, handles
from kbroker.protocol import message_types as msg
from kbroker.protocol.header import RequestHeader
from kbroker.security.principal import ANONYMOUS

NOT_ALLOWED = errors.DelegationTokenRequestNotAllowedError.code
DISABLED = errors.DelegationTokenAuthDisabledError.code


def _refusal(conn: ClientConnection) -> int:
    session = conn.session
    if session.security_protocol == "PLAINTEXT" or (session.security_protocol == "SSL"
                                                     and session.principal == ANONYMOUS):
        return NOT_ALLOWED
    return DISABLED


@handles(msg.CREATE_DELEGATION_TOKEN)
def create_delegation_token(ctx: BrokerContext, header: RequestHeader, request: msg.CreateDelegationTokenRequest,
                            conn: ClientConnection) -> Answer[msg.CreateDelegationTokenResponse]:
    owner = conn.session.principal  # the response names the requester, as Kafka's prepareResponse does
    return {"error_code": _refusal(conn), "principal_type": owner.type, "principal_name": owner.name,
            "issue_timestamp_ms": -1, "expiry_timestamp_ms": -1, "max_timestamp_ms": -1, "token_id": "",
            "hmac": b"", "throttle_time_ms": 0}


@handles(msg.RENEW_DELEGATION_TOKEN)
def renew_delegation_token(ctx: BrokerContext, header: RequestHeader, request: msg.RenewDelegationTokenRequest,
                           conn: ClientConnection) -> Answer[msg.RenewDelegationTokenResponse]:
    return {"error_code": _refusal(conn), "expiry_timestamp_ms": -1, "throttle_time_ms": 0}


@handles(msg.EXPIRE_DELEGATION_TOKEN)
def expire_delegation_token(ctx: BrokerContext, header: RequestHeader, request: msg.ExpireDelegationTokenRequest,
                            conn: ClientConnection) -> Answer[msg.ExpireDelegationTokenResponse]:
    return {"error_code": _refusal(conn), "expiry_timestamp_ms": -1, "throttle_time_ms": 0}


@handles(msg.DESCRIBE_DELEGATION_TOKEN)
def describe_delegation_token(ctx: BrokerContext, header: RequestHeader, request: msg.DescribeDelegationTokenRequest,
                              conn: ClientConnection) -> Answer[msg.DescribeDelegationTokenResponse]:
    return {"error_code": _refusal(conn), "tokens": [], "throttle_time_ms": 0}
