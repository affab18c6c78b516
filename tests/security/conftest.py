"""Fixtures of the security tests: a test PKI (session-wide, in a tmp dir) and brokers with TLS
listeners. A broker's ``port`` (BrokerProcess.port) is its PLAINTEXT listener; ``ssl_port`` its SSL one."""
from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import BrokerProcess, free_port, run_broker

from .pki import Pki, make_pki


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def tls_settings(pki: Pki, **extra: str) -> dict[str, str]:
    """A broker's PEM keystore and truststore, Kafka's keys."""
    return {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.broker),
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca), **extra}


class TlsBroker(BrokerProcess):
    """A broker listening on PLAINTEXT (``port``) and SSL (``ssl_port``)."""

    def __init__(self, base: Path, pki: Pki, overrides: dict[str, str] | None = None) -> None:
        super().__init__(base, None)
        self.ssl_port = free_port()
        self.overrides = {
            "listeners": f"PLAINTEXT://{self.host}:{self.port},SSL://{self.host}:{self.ssl_port}",
            **tls_settings(pki), **(overrides or {})}

    @property
    def ssl_bootstrap(self) -> str:
        return f"{self.host}:{self.ssl_port}"


@pytest.fixture(scope="module")
def tls_broker(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsBroker]:
    """PLAINTEXT + SSL, no client authentication."""
    yield from run_broker(TlsBroker(tmp_path_factory.mktemp("tls-broker"), pki))  # type: ignore[misc]


def client_ssl_context(pki: Pki, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    if cert is not None:
        ctx.load_cert_chain(str(cert), str(key))
    return ctx
