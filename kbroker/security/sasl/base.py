"""What every SASL mechanism server shares: its failures and its shape."""
from __future__ import annotations

from typing import Protocol


class SaslError(Exception):
    """A failure whose cause the broker hides (Kafka's plain SaslException): the client is told
    "Authentication failed during authentication due to invalid credentials with SASL mechanism X"."""


class SaslAuthenticationError(SaslError):
    """A failure whose message reaches the client (Kafka's SaslAuthenticationException)."""


class MechanismServer(Protocol):
    mechanism: str
    complete: bool
    authorization_id: str     # the user name, once complete

    def evaluate(self, token: bytes) -> bytes | None:
        """The next server token (None: nothing to send); raises SaslError / SaslAuthenticationError."""
        ...
