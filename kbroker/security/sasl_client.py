"""The client side of SASL for the broker's own connections to other brokers (replica fetchers, the
controller channel) on a SASL inter-broker listener: SaslHandshake v1, then SaslAuthenticate requests
(KIP-152 framing) carrying PLAIN or SCRAM-SHA-256/512 tokens.

``request(api_key, version, body)`` is the caller's way to send one request on the connection and
await its decoded response body; this module knows nothing of sockets.
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from kbroker.security.credentials import SCRAM_MECHANISMS
from kbroker.security.sasl.base import SaslAuthenticationError, SaslError
from kbroker.security.sasl.scram import ScramClient

Request = Callable[[int, int, Any], Awaitable[Any]]
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36


class SaslClientError(SaslAuthenticationError):
    """Authentication of this broker's connection failed; ``error_code`` is Kafka's (33, 34, 58, ...)."""

    def __init__(self, message: str, error_code: int = 58) -> None:
        super().__init__(message)
        self.error_code = error_code


async def authenticate(request: Request, mechanism: str, username: str, password: str,
                       authenticate_version: int = 1) -> int:
    """Authenticate a fresh connection; returns the session lifetime the broker granted in ms (0: none,
    KIP-368). Raises SaslClientError. ``authenticate_version`` 0-2 (2 is the flexible version)."""
    handshake = await request(SASL_HANDSHAKE, 1, {"mechanism": mechanism})
    if handshake.error_code != 0:
        raise SaslClientError(f"SaslHandshake for {mechanism} failed with error {handshake.error_code} "
                              f"(broker mechanisms: {', '.join(handshake.mechanisms)})", handshake.error_code)

    async def step(token: bytes) -> tuple[bytes, int]:
        resp = await request(SASL_AUTHENTICATE, authenticate_version, {"auth_bytes": token})
        if resp.error_code != 0:
            raise SaslClientError(resp.error_message or f"SaslAuthenticate failed with error {resp.error_code}",
                                  resp.error_code)
        return bytes(resp.auth_bytes), getattr(resp, "session_lifetime_ms", 0) or 0

    if mechanism == "PLAIN":
        _, lifetime = await step(f"\0{username}\0{password}".encode())
        return lifetime
    if mechanism in SCRAM_MECHANISMS:
        client = ScramClient(mechanism, username, password)
        server_first, _ = await step(client.first())
        try:
            final = client.final(server_first)
        except SaslError as exc:
            raise SaslClientError(f"{mechanism}: {exc}") from None
        server_final, lifetime = await step(final)
        try:
            client.verify(server_final)
        except SaslError as exc:
            raise SaslClientError(f"{mechanism}: {exc}") from None
        return lifetime
    raise SaslClientError(f"SASL mechanism {mechanism} is not supported for inter-broker connections "
                          "(PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)", 33)
