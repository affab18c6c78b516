"""Unsigned varints and tag-section helpers."""
from __future__ import annotations

import pytest

from kbroker.protocol import ProtocolError
from kbroker.protocol.types import read_uvarint, skip_tagged_fields, uvarint_bytes


@pytest.mark.parametrize("n,encoded", [
    (0, "00"), (1, "01"), (127, "7f"), (128, "8001"), (300, "ac02"), (16383, "ff7f"),
    (16384, "808001"), (2**21 - 1, "ffff7f"), (2**21, "80808001"), (2**32 - 1, "ffffffff0f"),
])
def test_uvarint_bytes(n, encoded):
    assert uvarint_bytes(n).hex() == encoded
    assert read_uvarint(bytes.fromhex(encoded) + b"\xee", 0) == (n, len(encoded) // 2)


def test_uvarint_round_trip_around_every_boundary():
    for shift in range(0, 33, 7):
        for n in (2**shift - 1, 2**shift, 2**shift + 1):
            if n < 2**32:
                b = uvarint_bytes(n)
                assert read_uvarint(memoryview(b), 0) == (n, len(b))


def test_uvarint_longer_than_five_bytes_is_refused():
    with pytest.raises(ProtocolError, match="longer than 5 bytes"):
        read_uvarint(bytes.fromhex("ffffffff1f"), 0)
    with pytest.raises(ProtocolError):
        read_uvarint(bytes.fromhex("8080808080800100"), 0)
    with pytest.raises(IndexError):  # truncated: the codec wraps this into ProtocolError
        read_uvarint(b"\x80", 0)


def test_skip_tagged_fields():
    data = bytes.fromhex("01" "02" "aabb" "05" "00" "ff")  # tag 1 (2 bytes), tag 5 (empty), then ff
    assert skip_tagged_fields(data, 0, len(data), 2) == 6
    with pytest.raises(ProtocolError):
        skip_tagged_fields(data, 0, 3, 2)  # second field past the end
    with pytest.raises(ProtocolError):
        skip_tagged_fields(data, 0, len(data), 100)  # more fields than bytes
