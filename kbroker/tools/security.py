"""What the admin tools need to reach a secured listener: Kafka's client properties (the
``--command-config`` file of kafka-acls.sh and friends), TLS and SASL (PLAIN, SCRAM-SHA-256/512).

    security.protocol=SASL_SSL                       PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL
    sasl.mechanism=SCRAM-SHA-512                     PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512
    sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\
        username="admin" password="admin-secret";
    ssl.truststore.location=/etc/kbroker/ca.pem      PEM (ssl.truststore.type=PEM); default: the system's CAs
    ssl.keystore.location=/etc/kbroker/client.pem    PEM key + certificate, for ssl.client.auth
    ssl.key.password=...                             when that key is encrypted
    ssl.endpoint.identification.algorithm=           empty: do not check the broker's host name (default https)

The password is used for the exchange and never printed.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import socket
import ssl
from collections.abc import Callable, Mapping
from typing import Any

from kbroker.config.broker import parse_properties

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')

# a request sender: (api key, body) -> decoded response
Send = Callable[[int, dict[str, Any]], Any]


class SecurityConfigError(Exception):
    """A client property that cannot be used; the message never holds a password."""


def load_command_config(path: str) -> dict[str, str]:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise SecurityConfigError(f"cannot read the command config {path}: {exc.strerror}") from None
    try:
        props = {k: v for k, (v, _) in parse_properties(text, path).items()}
    except Exception as exc:
        raise SecurityConfigError(str(exc)) from None
    check(props)
    return props


def protocol(props: Mapping[str, str] | None) -> str:
    return (props or {}).get("security.protocol", "PLAINTEXT").strip().upper()


def check(props: Mapping[str, str]) -> None:
    proto = protocol(props)
    if proto not in PROTOCOLS:
        raise SecurityConfigError(f"security.protocol must be one of {', '.join(PROTOCOLS)}, not {proto}")
    if proto.startswith("SASL"):
        mechanism = props.get("sasl.mechanism", "GSSAPI").strip().upper()
        if mechanism not in MECHANISMS:
            raise SecurityConfigError(f"sasl.mechanism {mechanism} is not one of {', '.join(MECHANISMS)}")
        credentials(props)


def credentials(props: Mapping[str, str]) -> tuple[str, str]:
    """(username, password) from sasl.jaas.config (or sasl.username / sasl.password)."""
    options = {k: v.replace('\\"', '"') for k, v in _JAAS_OPTION.findall(props.get("sasl.jaas.config", ""))}
    user = options.get("username", props.get("sasl.username"))
    password = options.get("password", props.get("sasl.password"))
    if not user or password is None:
        raise SecurityConfigError("SASL needs username and password in sasl.jaas.config")
    return user, password


def wrap_tls(sock: socket.socket, host: str, props: Mapping[str, str]) -> socket.socket:
    """The TLS client side of an SSL or SASL_SSL connection (blocking handshake)."""
    try:
        ctx = ssl.create_default_context(cafile=props.get("ssl.truststore.location") or None)
        if props.get("ssl.endpoint.identification.algorithm", "https").strip() == "":
            ctx.check_hostname = False
        keystore = props.get("ssl.keystore.location")
        if keystore:
            ctx.load_cert_chain(keystore, password=props.get("ssl.key.password") or None)
        return ctx.wrap_socket(sock, server_hostname=host)
    except (OSError, ssl.SSLError, ValueError) as exc:
        why = getattr(exc, "reason", None) or exc
        raise SecurityConfigError(f"TLS to {host} failed: {type(exc).__name__}: {why}") from None


def authenticate(send: Send, props: Mapping[str, str], handshake_key: int, authenticate_key: int) -> None:
    """SaslHandshake v1 then SaslAuthenticate rounds for PLAIN or SCRAM; raises SecurityConfigError."""
    mechanism = props.get("sasl.mechanism", "GSSAPI").strip().upper()
    user, password = credentials(props)
    response = send(handshake_key, {"mechanism": mechanism})
    if response.error_code:
        raise SecurityConfigError(f"the broker does not offer SASL mechanism {mechanism} "
                                  f"(it offers {', '.join(response.mechanisms)})")

    def exchange(token: bytes) -> bytes:
        reply = send(authenticate_key, {"auth_bytes": token})
        if reply.error_code:
            raise SecurityConfigError(f"SASL authentication failed: {reply.error_message or reply.error_code}")
        return bytes(reply.auth_bytes or b"")

    if mechanism == "PLAIN":
        exchange(b"\0" + user.encode() + b"\0" + password.encode())
        return
    digest = "sha256" if mechanism == "SCRAM-SHA-256" else "sha512"
    scram(exchange, user, password, digest)


def scram(exchange: Callable[[bytes], bytes], user: str, password: str, digest: str) -> None:
    """RFC 5802 client side, as Kafka's ScramSaslClient (no channel binding, ``c=biws``)."""
    nonce = base64.b64encode(secrets.token_bytes(24)).decode()
    name = user.replace("=", "=3D").replace(",", "=2C")
    first_bare = f"n={name},r={nonce}"
    server_first = exchange(f"n,,{first_bare}".encode()).decode()
    fields = dict(item.split("=", 1) for item in server_first.split(",") if "=" in item)
    if not fields.get("r", "").startswith(nonce) or "s" not in fields or "i" not in fields:
        raise SecurityConfigError("SASL authentication failed: unexpected SCRAM server-first message")
    salted = hashlib.pbkdf2_hmac(digest, password.encode(), base64.b64decode(fields["s"]), int(fields["i"]))
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    stored_key = hashlib.new(digest, client_key).digest()
    without_proof = f"c=biws,r={fields['r']}"
    auth_message = f"{first_bare},{server_first},{without_proof}".encode()
    signature = hmac.new(stored_key, auth_message, digest).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    server_final = exchange(f"{without_proof},p={base64.b64encode(proof).decode()}".encode()).decode()
    server_key = hmac.new(salted, b"Server Key", digest).digest()
    expected = base64.b64encode(hmac.new(server_key, auth_message, digest).digest()).decode()
    if server_final != f"v={expected}":
        raise SecurityConfigError("SASL authentication failed: the broker's SCRAM signature is wrong")
