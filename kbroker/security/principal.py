"""Who is on a connection: Kafka's principal (``User:alice``) and the session a handler checks."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KafkaPrincipal:
    type: str
    name: str

    def __str__(self) -> str:
        return f"{self.type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """``User:alice`` -> KafkaPrincipal("User", "alice"); raises ValueError without a type."""
        kind, sep, name = text.partition(":")
        if not sep or not kind:
            raise ValueError(f"expected a principal as Type:name (such as User:alice), got {text!r}")
        return cls(kind, name)


ANONYMOUS = KafkaPrincipal("User", "ANONYMOUS")


@dataclass
class Session:
    """A connection's identity, as Kafka's RequestContext carries it. ``client_address`` is the peer's
    IP as text (what ACL host entries match); ``listener`` the listener name the client connected on
    (what Metadata answers endpoints for); ``security_protocol`` that listener's protocol."""
    principal: KafkaPrincipal = ANONYMOUS
    client_address: str = ""
    listener: str = "PLAINTEXT"
    security_protocol: str = "PLAINTEXT"
    mechanism: str | None = None    # the SASL mechanism that authenticated it
