"""SASL/PLAIN (RFC 4616) as Kafka's PlainSaslServer does it, with users from JAAS options.

One client message ``[authzid] NUL authcid NUL passwd`` (exactly two NULs; librdkafka sends an empty
authzid, kafka-python and aiokafka the user name again). Users and passwords come from the
``user_<name>="<password>"`` options of the listener's PlainLoginModule entry
(``listener.name.<l>.plain.sasl.jaas.config``). Passwords are compared in constant time.
"""
from __future__ import annotations

import hmac

from kbroker.security.sasl.base import SaslAuthenticationError, SaslError
from kbroker.security.sasl.jaas import JaasEntry

PLAIN = "PLAIN"
PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
INVALID = "Authentication failed: Invalid username or password"
AUTHZID_DIFFERS = "Authentication failed: Client requested an authorization id that is different from username"


def plain_users(entry: JaasEntry) -> dict[str, str]:
    """``user_alice="secret"`` options -> {"alice": "secret"}."""
    return {k[len("user_"):]: v for k, v in entry.options.items() if k.startswith("user_")}


class PlainServer:
    mechanism = PLAIN

    def __init__(self, users: dict[str, str]) -> None:
        self._users = users
        self.complete = False
        self.authorization_id = ""

    def evaluate(self, token: bytes) -> bytes | None:
        if self.complete:
            raise SaslError("PLAIN authentication already complete")
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslError("Invalid SASL/PLAIN response: not UTF-8") from None
        parts = text.split("\0")
        if len(parts) != 3:
            raise SaslError(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        authzid, user, password = parts
        if not user:
            raise SaslError("Authentication failed: username not specified")
        if not password:
            raise SaslError("Authentication failed: password not specified")
        expected = self._users.get(user)
        # compare against something even for an unknown user, so timing does not tell which users exist
        ok = hmac.compare_digest(password.encode("utf-8"), (expected if expected is not None else "\0" + password)
                                 .encode("utf-8"))
        if expected is None or not ok:
            raise SaslAuthenticationError(INVALID)
        if authzid and authzid != user:
            raise SaslAuthenticationError(AUTHZID_DIFFERS)
        self.authorization_id = user
        self.complete = True
        return b""
