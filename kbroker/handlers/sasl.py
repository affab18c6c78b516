"""SaslHandshake (17) and SaslAuthenticate (36) outside authentication.

On a SASL listener the authenticator (kbroker.security.sasl) takes these requests until the connection
is authenticated, and again for a KIP-368 re-authentication. What reaches a handler is a handshake on
a PLAINTEXT/SSL listener or a SASL request on an authenticated connection that is not a
re-authentication: Kafka answers ILLEGAL_SASL_STATE (34) to both.
"""
from __future__ import annotations

from kbroker import errors
from kbroker.handlers.context import BrokerContext
from kbroker.handlers.registry import Answer, ClientConnection, handles
from kbroker.protocol import message_types as msg
from kbroker.protocol.header import RequestHeader

ILLEGAL_SASL_STATE = errors.IllegalSaslStateError.code


@handles(msg.SASL_HANDSHAKE)
def sasl_handshake(ctx: BrokerContext, header: RequestHeader, request: msg.SaslHandshakeRequest,
                   conn: ClientConnection) -> Answer[msg.SaslHandshakeResponse]:
    return {"error_code": ILLEGAL_SASL_STATE, "mechanisms": []}


@handles(msg.SASL_AUTHENTICATE)
def sasl_authenticate(ctx: BrokerContext, header: RequestHeader, request: msg.SaslAuthenticateRequest,
                      conn: ClientConnection) -> Answer[msg.SaslAuthenticateResponse]:
    return {"error_code": ILLEGAL_SASL_STATE,
            "error_message": "SaslAuthenticate request received after successful authentication",
            "auth_bytes": b"", "session_lifetime_ms": 0}
