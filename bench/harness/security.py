"""The security sweep's setup: a test CA and broker certificate, a SCRAM user, and one kbroker listening on
PLAINTEXT, SSL and SASL_SSL at once, so the three are measured side by side in one run on one broker.

Client settings per protocol are what a confluent-kafka user writes (server-verified TLS; SCRAM-SHA-512 over
TLS). Tansu 0.6 has no TLS listener: its SSL and SASL_SSL cells stay empty.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import os
import subprocess
from pathlib import Path

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_SSL")
USER, PASSWORD = "bench", "bench-secret"
MECHANISM = "SCRAM-SHA-512"


def make_pki(workdir: Path) -> dict[str, Path]:
    """A CA and a broker certificate for 127.0.0.1 / localhost (openssl, a few hundred ms)."""
    d = workdir / "pki"
    d.mkdir(parents=True, exist_ok=True)
    ca_key, ca, key, csr, cert, ext = (d / n for n in ("ca.key", "ca.pem", "broker.key", "broker.csr",
                                                       "broker.pem", "san.cnf"))
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key), "-out", str(ca),
        "-days", "2", "-subj", "/CN=kbroker-bench-ca")
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr), "-subj", "/CN=localhost")
    run("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
        "-out", str(cert), "-days", "2", "-extfile", str(ext))
    keystore = d / "broker-keystore.pem"  # Kafka's PEM keystore file: the PKCS#8 key and the chain
    keystore.write_bytes(key.read_bytes() + cert.read_bytes())
    os.chmod(keystore, 0o600)
    return {"ca": ca, "keystore": keystore}


def scram_credential(password: str, iterations: int = 4096, mechanism: str = MECHANISM) -> str:
    """Kafka's stored SCRAM credential string (salt, stored_key, server_key, iterations)."""
    digest = "sha512" if mechanism.endswith("512") else "sha256"
    salt = os.urandom(24)
    salted = hashlib.pbkdf2_hmac(digest, password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    stored_key = hashlib.new(digest, client_key).digest()
    server_key = hmac.new(salted, b"Server Key", digest).digest()
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    return f"salt={b64(salt)},stored_key={b64(stored_key)},server_key={b64(server_key)},iterations={iterations}"


def seed_user(log_dir: Path) -> None:
    """Write the bench user's SCRAM credential into the embedded store before the broker starts, where
    ``kbroker configs --alter --add-config 'SCRAM-SHA-512=[password=...]'`` would put it."""
    from zk_compat import layout
    from zk_compat.embedded import EmbeddedServer

    log_dir.mkdir(parents=True, exist_ok=True)
    with EmbeddedServer.in_log_dir(log_dir) as server:
        store = server.connect()
        try:
            layout.ensure_persistent_paths(store)
            layout.change_entity_config(store, "users", USER, {MECHANISM: scram_credential(PASSWORD)})
        finally:
            store.close()


def broker_settings(ports: dict[str, int], pki: dict[str, Path]) -> dict[str, str]:
    """server.properties overrides for one broker with the three listeners."""
    return {
        "listeners": ",".join(f"{p}://127.0.0.1:{ports[p]}" for p in PROTOCOLS),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki["keystore"]),
        "sasl.enabled.mechanisms": MECHANISM,
    }


def client_settings(protocol: str, pki: dict[str, Path]) -> dict[str, str]:
    """What a librdkafka client adds to reach the listener of ``protocol``."""
    if protocol == "PLAINTEXT":
        return {}
    out = {"security.protocol": protocol.lower(), "ssl.ca.location": str(pki["ca"])}
    if protocol.startswith("SASL"):
        out.update({"sasl.mechanisms": MECHANISM, "sasl.username": USER, "sasl.password": PASSWORD})
    return out
