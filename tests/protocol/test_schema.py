"""The DSL itself: what it accepts, what it refuses, and the corners no real message uses."""
from __future__ import annotations

import uuid

import pytest

from kbroker.protocol import ProtocolError
from kbroker.protocol.schema import Struct, api


def _api(request: str, response: str = "x int8 v0+", versions: str = "0-2", flexible=1):
    return api(9000, "Toy", versions, flexible=flexible, request=request, response=response)


def _round_trip(a, version: int, body):
    parts: list = []
    a.encoders[0][version](body, parts, [])
    data = b"".join(parts)
    decoded, end = a.decoders[0][version](memoryview(data), 0, len(data))
    assert end == len(data)
    return decoded, data


def test_exotic_types_round_trip():
    a = _api('''
        ratio          float64    v0+
        port           uint16     v0+
        ids            [uuid]     v0+
        blobs          [bytes]    v1+
        labels         [string]   v0+   nullable:v2+
        inner          Inner      v0+
          deep         [int64]    v0+
        notes          [string]   v1+   tag=4
        extra          bytes      v2+   nullable  tag=1
    ''', versions="0-2", flexible=1)
    Toy = a.request
    assert Toy().inner == Toy.Inner() and Toy().inner is not Toy().inner  # fresh default struct
    body = Toy(ratio=0.25, port=65535, ids=[uuid.UUID(int=1), uuid.UUID(int=2**128 - 1)],
               blobs=[b"", b"\x00\xff"], labels=["a", "é"], inner=Toy.Inner(deep=[-1, 2**62]),
               notes=["n"], extra=b"x")
    for version in (0, 1, 2):
        decoded, data = _round_trip(a, version, body)
        assert decoded.ratio == 0.25 and decoded.port == 65535 and decoded.ids == body.ids
        assert decoded.inner.deep == [-1, 2**62]
        assert decoded.blobs == (body.blobs if version >= 1 else [])
        assert decoded.notes == (["n"] if version >= 1 else [])
        assert decoded.extra == (b"x" if version >= 2 else None)
    body.labels = None
    assert _round_trip(a, 2, body)[0].labels is None
    with pytest.raises(ProtocolError, match="None is not allowed"):
        _round_trip(a, 1, body)


@pytest.mark.parametrize("text,message", [
    ("a int99 v0+", "unknown type"),
    ("a int8 0+", "bad version range"),
    ("a int8 v0+ nullable", "cannot be nullable"),
    ("a int8 v0+ frob", "unknown option"),
    ("a int8 v0+\nb int8 v0+\na int16 v0+", "duplicate field"),
    ("a int8 v0+\n  b int8 v0+", "indented under non-struct"),
    ("a [S] v0+", "a struct needs fields"),
    ("a [S] v0+\n  b int8 v0+\nc [S] v0+\n  d int8 v0+", "used twice"),
    ("a [S] v0+\n    b int8 v0+\n  c int8 v0+", "inconsistent indentation"),
    ("CamelCase int8 v0+", "snake_case"),
    ("a int8 v0+ tag=0", "tagged fields need flexible versions"),
    ("a records v1+ tag=0", "records cannot be tagged"),
    ("a int8 v0+ default=nope", "bad default"),
])
def test_declaration_errors(text, message):
    with pytest.raises(ValueError, match=message):
        _api(text, versions="0-2", flexible=1)


def test_generated_classes():
    a = _api("name string v0+\ncount int32 v1+ default=7\nitems [Item] v0+\n  k int8 v0+")
    Toy = a.request
    assert issubclass(Toy, Struct) and Toy.__slots__ == ("name", "count", "items")
    t = Toy(name="n")
    assert (t.name, t.count, t.items) == ("n", 7, []) and Toy().items is not Toy().items
    assert Toy(name="n", items=[Toy.Item(k=1)]).to_dict() == {"name": "n", "count": 7, "items": [{"k": 1}]}
    with pytest.raises(TypeError):
        Toy(nope=1)
