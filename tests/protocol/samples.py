"""Populated sample messages built from the declarations, for round-trip and fuzz tests.

Variants: FULL sets every field present in the version to a non-default value (tagged fields
included); NULLS sets every nullable field to None and leaves arrays empty; BIG uses long strings and
arrays so that lengths and counts need multi-byte varints.
"""
from __future__ import annotations

import uuid

from kbroker.protocol import APIS
from kbroker.protocol.schema import Field, StructSpec

FULL, NULLS, BIG = 0, 1, 2
VARIANTS = (FULL, NULLS, BIG)

_RANGES = {"int8": 127, "int16": 32000, "int32": 2_000_000_000, "int64": 9_000_000_000_000,
           "uint16": 65000, "uint32": 4_000_000_000}


def _int(f: Field, base: str, salt: int) -> int:
    h = sum(ord(c) * (i + 1) for i, c in enumerate(f.name)) + salt
    top = _RANGES[base]
    value = h % top + 1
    # negative values for signed types, to catch sign handling
    if not base.startswith("uint") and h % 2:
        value = -value
    if value == f.default:
        value += 1
    return value


def _scalar(f: Field, base: str, version: int, variant: int, salt: int):
    nullable = f.nullable(version)
    if base == "bool":
        return not f.default
    if base == "float64":
        return 1.5
    if base in _RANGES:
        return _int(f, base, salt)
    if base == "uuid":
        return uuid.UUID(int=(salt + 1) * 0x1234_5678_9ABC_DEF0_0FED_CBA9)
    if variant == NULLS and nullable:
        return None
    if base == "string":
        return (f"{f.name}-é-{salt}" * (20 if variant == BIG else 1))
    if base == "bytes":
        return bytes(i % 256 for i in range(salt, salt + (300 if variant == BIG else 5)))
    if base == "records":
        return b"\x00" * 8 + bytes(range(256)) * (2 if variant == BIG else 1)
    raise AssertionError(base)


def sample_struct(spec: StructSpec, version: int, variant: int, salt: int = 0):
    kwargs = {}
    for f in spec.fields:
        if f.present(version):
            kwargs[f.name] = sample_value(f, version, variant, salt)
    return spec.cls(**kwargs)


def sample_value(f: Field, version: int, variant: int, salt: int):
    if f.kind == "struct":
        return sample_struct(f.struct, version, variant, salt + 1)
    if f.kind == "array":
        if variant == NULLS:
            return None if f.nullable(version) else []
        count = 130 if variant == BIG and f.elem != "struct" else 2
        if f.elem == "struct":
            return [sample_struct(f.struct, version, variant, salt + 10 * i) for i in range(count)]
        base = f.type[1:-1]
        return [_scalar(f, base, version, variant, salt + i) for i in range(count)]
    return _scalar(f, f.type if f.kind == "fixed" else f.kind, version, variant, salt)


def all_cases():
    """(api, direction, version, variant) for every declared API and version."""
    for key in sorted(APIS):
        a = APIS[key]
        for v in range(a.min_version, a.max_version + 1):
            for direction in (0, 1):
                for variant in VARIANTS:
                    yield a, direction, v, variant


def sample(api, direction: int, version: int, variant: int):
    cls = api.request if direction == 0 else api.response
    return sample_struct(cls._spec, version, variant)
