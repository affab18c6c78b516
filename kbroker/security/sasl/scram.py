"""SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka's ScramSaslServer does them, and the
client side the broker uses for its own inter-broker connections.

Messages (Kafka's grammar, ASCII)::

    client-first  n,[a=<authzid>],[m=<v>,]n=<saslname>,r=<nonce>[,<ext>=<v>]*
    server-first  r=<client nonce><server nonce>,s=<base64 salt>,i=<iterations>
    client-final  c=<base64 channel binding>,r=<nonce>[,<ext>=<v>]*,p=<base64 proof>
    server-final  v=<base64 server signature>

The AuthMessage is rebuilt as Kafka does: ``n=<saslname>,r=<nonce>`` plus the extensions, the
server-first message, ``c=<re-encoded binding>,r=<nonce>``. Stored iterations below 4096 fail. Only
the ``tokenauth`` extension means anything to Kafka (delegation tokens), and this broker has no
delegation tokens: a client asking for one fails. Failures raise SaslError (the broker hides the
cause) except a differing authorization id, whose text reaches the client.
"""
from __future__ import annotations

import base64
import binascii
import re
import secrets
from collections.abc import Callable

from kbroker.security.credentials import (
    MIN_ITERATIONS,
    SCRAM_MECHANISMS,
    ScramCredential,
    client_key,
    constant_time_equals,
    digest,
    hmac_digest,
    salted_password,
    server_key,
)
from kbroker.security.sasl.base import SaslAuthenticationError, SaslError
from kbroker.security.sasl.plain import AUTHZID_DIFFERS
from zk_compat.jvm import random_base36

_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
_VALUE = r"[\x01-\x2b\x2d-\x7f]+"
_PRINTABLE = r"[\x21-\x2b\x2d-\x7e]+"
_EXTENSIONS = r"(?:,[A-Za-z]{1,20}=" + _VALUE + r")*"
_BASE64 = r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?"
CLIENT_FIRST = re.compile(r"n,(?:a=(?P<authzid>" + _SASLNAME + r"))?,(?:m=[^\x00,]*,)?n=(?P<saslname>" + _SASLNAME
                          + r"),r=(?P<nonce>" + _PRINTABLE + r")(?P<extensions>" + _EXTENSIONS + r")")
CLIENT_FINAL = re.compile(r"c=(?P<channel>" + _BASE64 + r"),r=(?P<nonce>" + _PRINTABLE + r")(?P<extensions>"
                          + _EXTENSIONS + r"),p=(?P<proof>" + _BASE64 + r")")
SERVER_FIRST = re.compile(r"(?:m=[^\x00,]*,)?r=(?P<nonce>" + _PRINTABLE + r"),s=(?P<salt>" + _BASE64
                          + r"),i=(?P<iterations>[0-9]+)" + _EXTENSIONS)
SERVER_FINAL = re.compile(r"(?:e=(?P<error>" + _VALUE + r"))|(?:v=(?P<signature>" + _BASE64 + r"))" + _EXTENSIONS)

TOKEN_AUTH = "tokenauth"


def escape_name(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def unescape_name(name: str) -> str:
    """``=2C`` -> ``,`` and ``=3D`` -> ``=``; any other ``=`` is an invalid user name."""
    out = name.replace("=2C", ",").replace("=3D", "=")
    if "=" in name.replace("=2C", "").replace("=3D", ""):
        raise SaslError("Invalid username")
    return out


def _extensions(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in text.split(",")[1:]:
        key, _, value = part.partition("=")
        out[key] = value
    return out


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise SaslError("Invalid base64 value") from None


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


def server_nonce() -> str:
    """Kafka's: a random 130-bit number in base 36."""
    return random_base36()


def _ascii(token: bytes, what: str) -> str:
    try:
        return token.decode("utf-8")
    except UnicodeDecodeError:
        raise SaslError(f"Invalid SCRAM {what} message: not UTF-8") from None


class ScramServer:
    """One SCRAM exchange. ``lookup(mechanism, user)`` is CredentialCache.lookup."""

    def __init__(self, mechanism: str, lookup: Callable[[str, str], ScramCredential | None],
                 nonce: Callable[[], str] = server_nonce) -> None:
        if mechanism not in SCRAM_MECHANISMS:
            raise ValueError(f"not a SCRAM mechanism: {mechanism}")
        self.mechanism = mechanism
        self._lookup = lookup
        self._nonce = nonce
        self.complete = False
        self.authorization_id = ""
        self._state = "client-first"
        self._credential: ScramCredential | None = None
        self._first_bare = ""
        self._server_first = ""
        self._full_nonce = ""

    def evaluate(self, token: bytes) -> bytes | None:
        try:
            if self._state == "client-first":
                return self._client_first(_ascii(token, "client-first"))
            if self._state == "client-final":
                return self._client_final(_ascii(token, "client-final"))
            raise SaslError(f"unexpected SCRAM message in state {self._state}")
        except SaslError:
            self._state = "failed"
            raise

    def _client_first(self, text: str) -> bytes:
        m = CLIENT_FIRST.fullmatch(text)
        if m is None:
            raise SaslError("Invalid SCRAM client first message format")
        saslname, nonce = m["saslname"], m["nonce"]
        extensions = _extensions(m["extensions"])
        user = unescape_name(saslname)
        if extensions.get(TOKEN_AUTH, "").lower() == "true":
            raise SaslError("Authentication failed: delegation tokens are not supported by this broker")
        cred = self._lookup(self.mechanism, user)
        if cred is None:
            raise SaslError("Authentication failed: Invalid user credentials")
        if cred.iterations < MIN_ITERATIONS:
            raise SaslError(f"Iterations {cred.iterations} is less than the minimum {MIN_ITERATIONS} for "
                            f"{self.mechanism}")
        authzid = m["authzid"]
        if authzid is not None and unescape_name(authzid) != user:
            raise SaslAuthenticationError(AUTHZID_DIFFERS)
        self.authorization_id = user
        self._credential = cred
        ext = ",".join(f"{k}={v}" for k, v in extensions.items())
        self._first_bare = f"n={saslname},r={nonce}" + (f",{ext}" if ext else "")
        self._full_nonce = nonce + self._nonce()
        self._server_first = f"r={self._full_nonce},s={_b64(cred.salt)},i={cred.iterations}"
        self._state = "client-final"
        return self._server_first.encode("ascii")

    def _client_final(self, text: str) -> bytes:
        m = CLIENT_FINAL.fullmatch(text)
        if m is None:
            raise SaslError("Invalid SCRAM client final message format")
        # Kafka 2.8 checks that the nonce *ends with* the server-first nonce (later versions want it
        # equal): librdkafka before 2.x (Debian's kcat: 2.0.2) sends its own nonce in front of it again.
        if not m["nonce"].endswith(self._full_nonce):
            raise SaslError("Invalid client nonce in the final client message.")
        cred = self._credential
        assert cred is not None  # set with the client-first state
        channel = _unb64(m["channel"])
        without_proof = f"c={_b64(channel)},r={m['nonce']}"
        auth_message = f"{self._first_bare},{self._server_first},{without_proof}".encode()
        proof = _unb64(m["proof"])
        signature = hmac_digest(self.mechanism, cred.stored_key, auth_message)
        if len(proof) != len(signature):
            raise SaslError("Invalid client credentials")
        computed = digest(self.mechanism, _xor(signature, proof))
        if not constant_time_equals(computed, cred.stored_key):
            raise SaslError("Invalid client credentials")
        self._state = "complete"
        self.complete = True
        return ("v=" + _b64(hmac_digest(self.mechanism, cred.server_key, auth_message))).encode("ascii")


class ScramClient:
    """The client side: ``first()``, ``final(server_first)``, ``verify(server_final)``."""

    def __init__(self, mechanism: str, username: str, password: str, nonce: str | None = None) -> None:
        if mechanism not in SCRAM_MECHANISMS:
            raise ValueError(f"not a SCRAM mechanism: {mechanism}")
        self.mechanism = mechanism
        self._username = username
        self._password = password
        self._nonce = nonce or secrets.token_urlsafe(24)
        self._first_bare = ""
        self._auth_message = b""
        self._server_key = b""

    def first(self) -> bytes:
        self._first_bare = f"n={escape_name(self._username)},r={self._nonce}"
        return ("n,," + self._first_bare).encode()

    def final(self, server_first: bytes) -> bytes:
        text = _ascii(server_first, "server-first")
        m = SERVER_FIRST.fullmatch(text)
        if m is None:
            raise SaslError("Invalid SCRAM server first message format")
        nonce = m["nonce"]
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise SaslError("Invalid server nonce: it does not extend the client nonce")
        iterations = int(m["iterations"])
        if iterations < MIN_ITERATIONS:
            raise SaslError(f"Requested iterations {iterations} is less than the minimum {MIN_ITERATIONS}")
        salted = salted_password(self.mechanism, self._password, _unb64(m["salt"]), iterations)
        without_proof = f"c={_b64(b'n,,')},r={nonce}"
        self._auth_message = f"{self._first_bare},{text},{without_proof}".encode()
        ckey = client_key(self.mechanism, salted)
        signature = hmac_digest(self.mechanism, digest(self.mechanism, ckey), self._auth_message)
        self._server_key = server_key(self.mechanism, salted)
        return f"{without_proof},p={_b64(_xor(ckey, signature))}".encode()

    def verify(self, server_final: bytes) -> None:
        m = SERVER_FINAL.fullmatch(_ascii(server_final, "server-final"))
        if m is None:
            raise SaslError("Invalid SCRAM server final message format")
        if m["error"] is not None:
            raise SaslAuthenticationError(f"SCRAM authentication failed: {m['error']}")
        expected = hmac_digest(self.mechanism, self._server_key, self._auth_message)
        if not constant_time_equals(_unb64(m["signature"]), expected):
            raise SaslError("Invalid server signature in the final server message")
