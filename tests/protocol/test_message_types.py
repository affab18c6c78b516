"""message_types.pyi checked against what the codecs really do: every request of every version (populated, and with
every nullable field null) is encoded and decoded, and each decoded field's value must be of the type the stub
declares for it; every response struct's TypedDict names exactly the fields its class has, and a decoded response
fits it too. The stub is read as text (ast), not through the generator, so a generator that declares a wrong type
(records as bytes, a nullable string as str) fails here."""
from __future__ import annotations

import ast
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from kbroker.protocol import APIS, decode_request, decode_response, encode_request, encode_response, typegen
from kbroker.protocol.schema import Struct

from .samples import FULL, NULLS, sample

Check = Callable[[Any], bool]
_SIMPLE: dict[str, type | tuple[type, ...]] = {
    "int": int, "bool": bool, "float": float, "str": str, "bytes": bytes, "bytearray": bytearray,
    "memoryview": memoryview, "uuid.UUID": uuid.UUID}


def _stub() -> tuple[dict[str, dict[str, ast.expr]], dict[str, dict[str, ast.expr]]]:
    """(request classes by dotted name, TypedDicts by name), each as field -> annotation."""
    tree = ast.parse(typegen.STUB.read_text())
    classes: dict[str, dict[str, ast.expr]] = {}
    typed_dicts: dict[str, dict[str, ast.expr]] = {}

    def visit(node: ast.ClassDef, prefix: str) -> None:
        name = prefix + node.name
        fields = {s.target.id: s.annotation for s in node.body
                  if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
        if any(isinstance(b, ast.Name) and b.id == "TypedDict" for b in node.bases):
            typed_dicts[name] = fields
        else:
            classes[name] = fields
        for inner in node.body:
            if isinstance(inner, ast.ClassDef):
                visit(inner, name + ".")

    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            visit(node, "")
    return classes, typed_dicts


CLASSES, TYPED_DICTS = _stub()


def _check(annotation: ast.expr) -> Check:
    """A predicate for values of the annotated type (a file slice, which decoding never gives, matches nothing)."""
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        left, right = _check(annotation.left), _check(annotation.right)
        return lambda v: left(v) or right(v)
    if isinstance(annotation, ast.Constant) and annotation.value is None:
        return lambda v: v is None
    if isinstance(annotation, ast.Subscript) and ast.unparse(annotation.value) == "NotRequired":
        return _check(annotation.slice)  # a key a handler may leave out: its value, when there, is the inner type
    if isinstance(annotation, ast.Subscript) and ast.unparse(annotation.value) == "list":
        item = _check(annotation.slice)
        return lambda v: isinstance(v, list) and all(item(x) for x in v)
    text = ast.unparse(annotation)
    if text == "FileSlice":
        return lambda v: False
    if text in _SIMPLE:
        wanted = _SIMPLE[text]
        if text == "int":  # a bool is an int to isinstance, never to the decoder of an int field
            return lambda v: isinstance(v, int) and not isinstance(v, bool)
        return lambda v: isinstance(v, wanted)
    if text in CLASSES:
        fields = {name: _check(a) for name, a in CLASSES[text].items()}
        return lambda v: isinstance(v, Struct) and all(check(getattr(v, name)) for name, check in fields.items())
    if text in TYPED_DICTS:  # a decoded response is an object with the TypedDict's keys as attributes
        fields = {name: _check(a) for name, a in TYPED_DICTS[text].items()}
        return lambda v: isinstance(v, Struct) and all(check(getattr(v, name)) for name, check in fields.items())
    raise AssertionError(f"the stub uses a type this test does not know: {text}")


def _mismatches(value: Struct, declared: str, where: str) -> list[str]:
    fields = CLASSES.get(declared) or TYPED_DICTS[declared]
    assert set(fields) == set(value._fields), f"{declared} declares {sorted(fields)}, the class has {value._fields}"
    return [f"{where}.{name} = {getattr(value, name)!r} is not {ast.unparse(a)}"
            for name, a in fields.items() if not _check(a)(getattr(value, name))]


@pytest.mark.parametrize("key", sorted(APIS))
def test_every_decoded_request_has_the_declared_types(key: int) -> None:
    api = APIS[key]
    wrong: list[str] = []
    for version in range(api.min_version, api.max_version + 1):
        for variant in (FULL, NULLS):
            frame = encode_request(key, version, 7, "typed", sample(api, 0, version, variant))
            _, body = decode_request(memoryview(frame)[4:])
            wrong += _mismatches(body, api.request.__name__, f"{api.name} v{version} variant {variant}")
    assert not wrong, "\n".join(wrong[:20])


@pytest.mark.parametrize("key", sorted(APIS))
def test_every_response_struct_has_a_typed_dict_of_its_fields(key: int) -> None:
    api = APIS[key]
    top = api.response._spec
    assert top is not None
    for spec in top.structs():
        name = top.name if spec is top else f"{top.name}_{spec.name}"
        assert set(TYPED_DICTS[name]) == {f.name for f in spec.fields}, name
    wrong: list[str] = []
    for version in range(api.min_version, api.max_version + 1):
        for variant in (FULL, NULLS):
            chunks = encode_response(key, version, 7, sample(api, 1, version, variant))
            _, body = decode_response(key, version, b"".join(chunks)[4:])
            wrong += _mismatches(body, api.response.__name__, f"{api.name} v{version} variant {variant}")
    assert not wrong, "\n".join(wrong[:20])
