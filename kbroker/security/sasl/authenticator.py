"""The server side of SASL on one connection: Kafka's SaslServerAuthenticator state machine.

    HANDSHAKE_OR_VERSIONS --ApiVersions (once)--> HANDSHAKE --SaslHandshake--> AUTHENTICATE --> COMPLETE
                          \\------------------SaslHandshake-----------------/             \\-> FAILED

Before COMPLETE every frame comes here first (``intercept``); frames are capped at
``sasl.server.max.receive.size``. A request other than ApiVersions / SaslHandshake before the
handshake closes the connection without an answer. SaslHandshake v1 means the tokens then travel in
SaslAuthenticate requests (KIP-152); v0 means raw size-prefixed tokens both ways (kafka-python's and
aiokafka's legacy framing). An unknown mechanism (33), a failed authentication (58) or a wrong request
while authenticating (34) get Kafka's error response after ``connection.failed.authentication.delay.ms``
and then the connection closes.

KIP-368: with ``connections.max.reauth.ms`` > 0 the completing SaslAuthenticate (v1+) carries the
session lifetime and every SASL connection gets a session expiry; a SaslHandshake on an authenticated
connection starts a re-authentication (same mechanism, same principal), and any other request after
the expiry closes the connection.
"""
from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from kbroker.protocol import (
    SUPPORTED_VERSIONS,
    ProtocolError,
    RequestHeader,
    Struct,
    decode_request,
    message_types as msg,
    response_class,
)
from kbroker.security.credentials import SCRAM_MECHANISMS, CredentialCache
from kbroker.security.principal import KafkaPrincipal, Session
from kbroker.security.sasl.base import MechanismServer, SaslAuthenticationError, SaslError
from kbroker.security.sasl.plain import PLAIN, PlainServer
from kbroker.security.sasl.scram import ScramServer

log = logging.getLogger(__name__)

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
UNSUPPORTED_SASL_MECHANISM, ILLEGAL_SASL_STATE, SASL_AUTHENTICATION_FAILED = 33, 34, 58
REAUTH_MIN_INTERVAL_S = 1.0   # Kafka starts a re-authentication at most once a second per connection

HANDSHAKE_OR_VERSIONS = "HANDSHAKE_OR_VERSIONS_REQUEST"
HANDSHAKE = "HANDSHAKE_REQUEST"
AUTHENTICATE = "AUTHENTICATE"
COMPLETE = "COMPLETE"
FAILED = "FAILED"


class SaslConnection(Protocol):
    """What the authenticator uses of kbroker.network's Connection."""
    peer: Any
    session: Session
    max_frame: int

    def handle_request(self, frame: bytearray | memoryview) -> None: ...

    def reply(self, api_key: int, version: int, correlation_id: int, body: Any) -> None: ...

    def send_token(self, token: bytes) -> None: ...

    def close(self, why: str = "") -> None: ...

    def close_after(self, seconds: float, why: str, api_key: int | None = None, version: int = 0,
                    correlation_id: int = 0, body: Any = None) -> None: ...


@dataclass
class ListenerSasl:
    """One SASL listener's settings (built once by ``authenticator_factory``)."""
    listener: str
    mechanisms: list[str]                      # in the order Kafka lists them (Java HashSet order)
    plain_users: dict[str, str] = field(default_factory=dict, repr=False)
    credentials: CredentialCache | None = None
    failed_delay_s: float = 0.1
    max_receive_size: int = 524288
    reauth_ms: dict[str, int] = field(default_factory=dict)   # by mechanism; 0: no re-authentication
    clock: Callable[[], float] = time.monotonic

    def new_server(self, mechanism: str) -> MechanismServer:
        if mechanism == PLAIN:
            return PlainServer(self.plain_users)
        if mechanism in SCRAM_MECHANISMS:
            creds = self.credentials
            return ScramServer(mechanism, creds.lookup if creds is not None else (lambda m, u: None))
        raise ValueError(f"mechanism {mechanism} is not served")


def peer_text(peer: Any) -> str:
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return str(peer)


def _peek(frame: bytearray | memoryview) -> tuple[int, int, int] | None:
    """(api_key, version, correlation_id) of a request frame, None when too short for a header."""
    if len(frame) < 8:
        return None
    return (int.from_bytes(frame[0:2], "big", signed=True), int.from_bytes(frame[2:4], "big", signed=True),
            int.from_bytes(frame[4:8], "big", signed=True))


def error_response(api_key: int, version: int, code: int) -> Any:
    """A response of that API with ``code`` as its top-level error, or None if it has none or the
    version is not one we speak (Kafka builds the request type's own error response; here only those
    with a top-level code)."""
    lo, hi = SUPPORTED_VERSIONS.get(api_key, (0, -1))
    if not lo <= version <= hi:
        return None
    try:
        body = response_class(api_key)()
    except (KeyError, TypeError):
        return None
    if not hasattr(body, "error_code"):
        return None
    body.error_code = code
    return body


class SaslServerAuthenticator:
    def __init__(self, settings: ListenerSasl, conn: SaslConnection) -> None:
        self.settings = settings
        self.state = HANDSHAKE_OR_VERSIONS
        self.legacy = False                       # SaslHandshake v0: raw tokens
        self.mechanism: str | None = None
        self.server: MechanismServer | None = None
        self.expiry: float | None = None          # monotonic seconds (KIP-368), None: never expires
        self.reauthenticating = False
        self._reauth_started = -math.inf
        self._session_principal = conn.session.principal   # the principal a re-authentication must keep
        self._max_frame = conn.max_frame
        conn.max_frame = min(conn.max_frame, settings.max_receive_size)

    # -- every frame ------------------------------------------------------------------------

    def intercept(self, conn: SaslConnection, frame: bytearray | memoryview) -> bool:
        state = self.state
        if state == COMPLETE:
            return self._after_complete(conn, frame)
        if state == FAILED:
            return True
        if state == AUTHENTICATE and self.legacy:
            self._legacy_token(conn, bytes(frame))
            return True
        header = _peek(frame)
        if header is None:
            conn.close(f"a {len(frame)}-byte frame before authentication is not a request")
            return True
        api_key, version, correlation_id = header
        if state == AUTHENTICATE:
            if api_key == SASL_AUTHENTICATE:
                self._authenticate(conn, frame)
            else:
                self._fail(conn, f"unexpected request (api key {api_key}) while authenticating",
                           api_key, version, correlation_id, error_response(api_key, version, ILLEGAL_SASL_STATE))
            return True
        if api_key == API_VERSIONS and state == HANDSHAKE_OR_VERSIONS and not self.reauthenticating:
            lo, hi = SUPPORTED_VERSIONS[API_VERSIONS]
            if lo <= version <= hi:
                self.state = HANDSHAKE  # one ApiVersions only; an unsupported version may be retried
            conn.handle_request(frame)
            return True
        if api_key == SASL_HANDSHAKE:
            self._handshake(conn, frame)
            return True
        log.info("closing the connection from %s on listener %s: api key %d before SASL authentication",
                 peer_text(conn.peer), self.settings.listener, api_key)
        self.state = FAILED
        conn.close(f"api key {api_key} received before SASL authentication")
        return True

    # -- steps ------------------------------------------------------------------------------

    def _decode(self, conn: SaslConnection, frame: bytearray | memoryview,
                api_name: str) -> tuple[RequestHeader, Struct] | None:
        """The request of one SASL step; None once an undecodable one failed the connection."""
        try:
            return decode_request(memoryview(frame))
        except ProtocolError as exc:
            self.state = FAILED
            conn.close(f"undecodable {api_name}: {exc.reason}")
            return None

    def _handshake(self, conn: SaslConnection, frame: bytearray | memoryview) -> None:
        decoded = self._decode(conn, frame, "SaslHandshake")
        if decoded is None:
            return
        header, body = decoded
        mechanisms = self.settings.mechanisms
        mechanism = cast(msg.SaslHandshakeRequest, body).mechanism  # the frame's api key is SaslHandshake's
        version, corr = header.api_version, header.correlation_id
        if mechanism not in mechanisms:
            self._fail(conn, f"unsupported SASL mechanism {mechanism!r} (enabled: {', '.join(mechanisms)})",
                       SASL_HANDSHAKE, version, corr,
                       {"error_code": UNSUPPORTED_SASL_MECHANISM, "mechanisms": mechanisms})
            return
        conn.reply(SASL_HANDSHAKE, version, corr, {"error_code": 0, "mechanisms": mechanisms})
        if self.reauthenticating and mechanism != self.mechanism:
            self._fail(conn, f"SASL mechanism '{mechanism}' requested by client is not supported for "
                             f"re-authentication of mechanism '{self.mechanism}'")
            return
        self.legacy = version == 0
        self.mechanism = mechanism
        self.server = self.settings.new_server(mechanism)
        self.state = AUTHENTICATE

    def _authenticate(self, conn: SaslConnection, frame: bytearray | memoryview) -> None:
        decoded = self._decode(conn, frame, "SaslAuthenticate")
        if decoded is None:
            return
        header, body = decoded
        version, corr = header.api_version, header.correlation_id
        server = self.server
        assert server is not None  # set with the AUTHENTICATE state
        try:
            out = server.evaluate(bytes(cast(msg.SaslAuthenticateRequest, body).auth_bytes))  # its api key's class
            if server.complete:
                self._check_principal(server)
        except SaslAuthenticationError as exc:
            self._auth_failed(conn, str(exc), str(exc), version, corr)
            return
        except SaslError as exc:
            self._auth_failed(conn, str(exc), self._hidden_reason(), version, corr)
            return
        lifetime = self._lifetime_ms() if server.complete else 0
        conn.reply(SASL_AUTHENTICATE, version, corr, {
            "error_code": 0, "error_message": None, "auth_bytes": out or b"",
            "session_lifetime_ms": lifetime if version >= 1 else 0})
        if server.complete:
            self._complete(conn, server, lifetime)

    def _legacy_token(self, conn: SaslConnection, token: bytes) -> None:
        server = self.server
        assert server is not None
        try:
            out = server.evaluate(token)
            if server.complete:
                self._check_principal(server)
        except SaslAuthenticationError as exc:   # Kafka: delayed close, nothing sent in this framing
            self._fail(conn, f"authentication with {self.mechanism} failed: {exc}")
            return
        except SaslError as exc:                 # Kafka: an I/O error, closed at once
            log.info("Failed authentication with %s on listener %s (%s: %s)", peer_text(conn.peer),
                     self.settings.listener, self.mechanism, exc)
            self.state = FAILED
            conn.close(f"SASL {self.mechanism} authentication failed")
            return
        if out is not None:
            conn.send_token(out)
        if server.complete:
            self._complete(conn, server, self._lifetime_ms())

    # -- outcomes ---------------------------------------------------------------------------

    def _hidden_reason(self) -> str:
        during = "re-authentication" if self.reauthenticating else "authentication"
        return (f"Authentication failed during {during} due to invalid credentials with SASL mechanism "
                f"{self.mechanism}")

    def _check_principal(self, server: MechanismServer) -> None:
        if not self.reauthenticating:
            return
        before = self._session_principal
        after = KafkaPrincipal("User", server.authorization_id)
        if after != before:
            raise SaslAuthenticationError(
                f"Cannot change principals during re-authentication from {before.type}.{before.name}: "
                f"{after.type}.{after.name}")

    def _lifetime_ms(self) -> int:
        assert self.mechanism is not None
        return self.settings.reauth_ms.get(self.mechanism, 0)

    def _auth_failed(self, conn: SaslConnection, cause: str, message: str, version: int, corr: int) -> None:
        self._fail(conn, f"{self.mechanism}: {cause}", SASL_AUTHENTICATE, version, corr,
                   {"error_code": SASL_AUTHENTICATION_FAILED, "error_message": message, "auth_bytes": b"",
                    "session_lifetime_ms": 0})

    def _fail(self, conn: SaslConnection, why: str, api_key: int | None = None, version: int = 0,
              corr: int = 0, body: Any = None) -> None:
        """Kafka's failed authentication: log naming the peer, answer (if there is an answer) after
        connection.failed.authentication.delay.ms, close."""
        log.info("Failed authentication with %s on listener %s (%s)", peer_text(conn.peer), self.settings.listener,
                 why)
        self.state = FAILED
        if api_key is not None and body is None:
            api_key = None   # no error response of that type: the delayed close says it
        conn.close_after(self.settings.failed_delay_s, f"SASL authentication failed: {why}", api_key, version,
                         corr, body)

    def _complete(self, conn: SaslConnection, server: MechanismServer, lifetime_ms: int) -> None:
        principal = KafkaPrincipal("User", server.authorization_id)
        conn.session.principal = principal
        conn.session.mechanism = self.mechanism
        conn.max_frame = self._max_frame
        self.state = COMPLETE
        self.server = None
        now = self.settings.clock()
        self.expiry = now + lifetime_ms / 1000 if lifetime_ms > 0 else None
        log.debug("%s %s as %s with %s on listener %s", peer_text(conn.peer),
                  "re-authenticated" if self.reauthenticating else "authenticated", principal, self.mechanism,
                  self.settings.listener)
        self.reauthenticating = False

    # -- after authentication ---------------------------------------------------------------

    def _after_complete(self, conn: SaslConnection, frame: bytearray | memoryview) -> bool:
        if self.expiry is None:
            return False
        header = _peek(frame)
        now = self.settings.clock()
        if header is not None and header[0] == SASL_HANDSHAKE and now - self._reauth_started >= REAUTH_MIN_INTERVAL_S:
            self._reauth_started = now
            self.reauthenticating = True
            self._session_principal = conn.session.principal
            self.state = HANDSHAKE
            conn.max_frame = min(conn.max_frame, self.settings.max_receive_size)
            self._handshake(conn, frame)
            return True
        if now > self.expiry:
            log.info("closing the connection from %s on listener %s: its SASL session expired "
                     "(connections.max.reauth.ms) and it did not re-authenticate", peer_text(conn.peer),
                     self.settings.listener)
            self.state = FAILED
            conn.close("SASL session expired")
            return True
        return False
