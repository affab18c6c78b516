"""What a request handler may answer instead of a response body: the contract between the handlers
(which decide) and the network layer (which carries it out). Neither imports the other."""
from __future__ import annotations

from typing import Final


class _Outcome:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


Outcome = _Outcome  # the type, for a handler's return annotation

NO_RESPONSE: Final = _Outcome("NO_RESPONSE")  # send nothing (Produce acks=0)
CLOSE: Final = _Outcome("CLOSE")              # close the connection (an acks=0 failure, as Kafka)
