"""What the SASL tests share: a broker with a PLAINTEXT listener (for setup) and a SASL_PLAINTEXT one,
PLAIN users in its JAAS config, SCRAM users made with AlterUserScramCredentials, and a raw-socket
client that speaks request frames and legacy tokens."""
from __future__ import annotations

import socket
import struct
import time
from pathlib import Path

from kbroker.protocol import decode_response, encode_request
from tests.integration.conftest import BrokerProcess, free_port, run_broker  # noqa: F401 (run_broker: for the tests)

PLAIN_USERS = {"admin": "admin-secret", "alice": "alice-secret"}
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="admin" password="admin-secret" '
        + " ".join(f'user_{u}="{p}"' for u, p in PLAIN_USERS.items()) + ";")
SCRAM_USERS = {"SCRAM-SHA-512": ("bob", "bob-secret"), "SCRAM-SHA-256": ("carol", "carol-secret")}
ALL_MECHANISMS = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"


def sasl_broker(base: Path, overrides: dict[str, str] | None = None) -> BrokerProcess:
    """A broker (not started) with PLAINTEXT on ``bp.port`` and SASL_PLAINTEXT on ``bp.sasl_port``."""
    base.mkdir(parents=True, exist_ok=True)
    bp = BrokerProcess(base)
    bp.sasl_port = free_port()  # type: ignore[attr-defined]
    bp.overrides.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{bp.port},SASL_PLAINTEXT://127.0.0.1:{bp.sasl_port}",  # type: ignore[attr-defined]
        "sasl.enabled.mechanisms": ALL_MECHANISMS,
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        **(overrides or {}),
    })
    return bp


def sasl_bootstrap(bp: BrokerProcess) -> str:
    return f"127.0.0.1:{bp.sasl_port}"  # type: ignore[attr-defined]


def create_scram_users(bp: BrokerProcess, users: dict[str, tuple[str, str]] = SCRAM_USERS,
                       iterations: int = 8192) -> None:
    """AlterUserScramCredentials through confluent-kafka's admin client on the PLAINTEXT listener."""
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )
    admin = AdminClient({"bootstrap.servers": bp.bootstrap})
    upserts = [UserScramCredentialUpsertion(user, ScramCredentialInfo(getattr(ScramMechanism, m.replace("-", "_")),
                                                                      iterations), password.encode())
               for m, (user, password) in users.items()]
    for future in admin.alter_user_scram_credentials(upserts).values():
        future.result(timeout=15)


def librdkafka_conf(bp: BrokerProcess, mechanism: str, user: str, password: str, **more: object) -> dict:
    return {"bootstrap.servers": sasl_bootstrap(bp), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": mechanism, "sasl.username": user, "sasl.password": password, **more}


def credentials_for(mechanism: str) -> tuple[str, str]:
    return ("alice", PLAIN_USERS["alice"]) if mechanism == "PLAIN" else SCRAM_USERS[mechanism]


class Raw:
    """A blocking socket speaking Kafka frames: requests with headers, or legacy raw SASL tokens."""

    def __init__(self, port: int, timeout: float = 5.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.corr = 0

    def send(self, api_key: int, version: int, body: dict) -> int:
        self.corr += 1
        self.sock.sendall(encode_request(api_key, version, self.corr, "raw-test", body))
        return self.corr

    def request(self, api_key: int, version: int, body: dict):
        corr = self.send(api_key, version, body)
        got, resp = decode_response(api_key, version, self.read_frame())
        assert got == corr
        return resp

    def send_token(self, token: bytes) -> None:
        self.sock.sendall(struct.pack(">i", len(token)) + token)

    def read_frame(self) -> bytes:
        size = struct.unpack(">i", self._exactly(4))[0]
        return self._exactly(size)

    def _exactly(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError(f"closed after {len(out)} of {n} bytes")
            out += chunk
        return out

    def closed_within(self, seconds: float) -> float | None:
        """Seconds until the peer closed (EOF or reset), None if still open after ``seconds``."""
        start = time.monotonic()
        self.sock.settimeout(seconds)
        try:
            data = self.sock.recv(65536)
        except TimeoutError:
            return None
        except ConnectionResetError:
            return time.monotonic() - start
        assert data == b"", f"expected the connection to close, got {data[:40]!r}"
        return time.monotonic() - start

    def close(self) -> None:
        self.sock.close()

    def plain(self, user: str, password: str, version: int = 2):
        hs = self.request(17, 1, {"mechanism": "PLAIN"})
        assert hs.error_code == 0
        return self.request(36, version, {"auth_bytes": f"\0{user}\0{password}".encode()})
