"""The message DSL and its compiler.

Each API is declared once, as text that reads like the field trees of the protocol reference:

    api(3, "Metadata", "0-12", flexible=9, request='''
        topics                     [Topic]   v0+    nullable:v1+
          topic_id                 uuid      v10+
          name                     string    v0+    nullable:v10+
        allow_auto_topic_creation  bool      v4+    default=true
    ''', response='''...''')

A line is `name type versions [options]`; deeper indentation declares the fields of the struct the
line above introduced. Types: int8 int16 int32 int64 uint16 uint32 float64 bool uuid string bytes
records, `Name` (a struct), `[type]` or `[Name]` (arrays). Versions: `v3+`, `v3-7`, `v3`.
Options: `nullable` (in every version of the field) or `nullable:v1+`, `tag=N` (a tagged field,
in every version of the field), `default=X` (an int, true, false, null or a quoted string).

From this, `api()` builds one slotted class per struct and, for every version in the declared range,
generates straight-line Python source for a decoder and an encoder and compiles it with exec —
at import time, so no per-field dispatch is left at run time. Consecutive fixed-width fields are
read and written with a single precompiled `struct.Struct`.

Object conventions (see also `__init__.py`):
* fields missing from a version keep their defaults: 0 / False / "" / b"" / [] / the all-zero
  UUID, None for string, bytes and records fields that are nullable in every version they exist,
  None for tagged struct fields (= not sent), or the declared `default=`;
* `records` decode to a memoryview slice of the receive buffer (no copy); `bytes` decode to bytes;
* tagged fields are written only when they differ from their default; unknown tags are skipped.
"""
from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from kbroker.protocol import types as _t
from kbroker.protocol.codegen import _Gen
from kbroker.protocol.schema_dsl import (
    MAX_VERSION as MAX_VERSION,
    MISSING,
    Field as Field,
    Struct as Struct,
    StructSpec as StructSpec,
    parse_struct as parse_struct,
    parse_versions,
)

# The generated codecs: decode(buffer, position, end) -> (message, position); encode(message, parts, holes).
Decoder = Callable[[_t.Buffer, int, int], tuple[Any, int]]
Encoder = Callable[[Any, _t.Parts, list[int]], None]


def _build_class(spec: StructSpec, module: str) -> type[Struct]:
    """Create the slotted class for `spec` (and, first, for its nested structs)."""
    ns: dict[str, Any] = {"MISSING": MISSING}
    params: list[str] = []
    body: list[str] = []
    for f in spec.fields:
        if f.struct is not None:
            sub = _build_class(f.struct, module)
            ns[f"_S_{f.struct.name}"] = sub
        if f.kind == "array" or f.default is MISSING:
            fresh = "[]" if f.kind == "array" else f"_S_{f.nested().name}()"
            if f.kind == "array" and f.default != []:
                fresh = repr(f.default)  # e.g. an explicit default=null
            params.append(f"{f.name}=MISSING")
            body.append(f"    self.{f.name} = {fresh} if {f.name} is MISSING else {f.name}")
        else:
            ns[f"_D_{f.name}"] = f.default
            params.append(f"{f.name}=_D_{f.name}")
            body.append(f"    self.{f.name} = {f.name}")
    src = f"def __init__(self, {', '.join(params)}):\n" + ("\n".join(body) or "    pass") + "\n"
    exec(compile(src, f"<{spec.qualname}.__init__>", "exec"), ns)
    names = tuple(f.name for f in spec.fields)
    cls = type(spec.name, (Struct,), {
        "__slots__": names,
        "__init__": ns["__init__"],
        "__module__": module,
        "__qualname__": spec.qualname,
        "_fields": names,
        "_spec": spec,
    })
    for f in spec.fields:
        if f.struct is not None:
            setattr(cls, f.struct.name, f.struct.cls)
    spec.cls = cls
    return cls


# ----------------------------------------------------------------------------------------------
# APIs


class Api:
    """One API: key, name, implemented version range, flexible cut-over, classes and codecs.

    `decoders[direction][version]` is `f(buf, pos, end) -> (obj, pos)`, `encoders[...]` is
    `f(obj, parts, holes)`; direction 0 = request, 1 = response.
    """

    def __init__(self, key: int, name: str, versions: str, flexible: int | None,
                 request: str, response: str, module: str) -> None:
        lo, hi = parse_versions("v" + versions, name)
        self.key = key
        self.name = name
        self.min_version = lo
        self.max_version = hi
        self.flexible = flexible  # first flexible version, None if never
        specs = (parse_struct(request, name + "Request"), parse_struct(response, name + "Response"))
        self.request, self.response = (_build_class(s, module) for s in specs)
        self.decoders: tuple[dict[int, Decoder], dict[int, Decoder]] = ({}, {})
        self.encoders: tuple[dict[int, Encoder], dict[int, Encoder]] = ({}, {})
        for direction, spec in enumerate(specs):
            _check(spec, self)
            cache: dict[str, tuple[Decoder, Encoder]] = {}  # identical wire shapes share one compiled codec
            for v in range(lo, hi + 1):
                gen = _Gen(spec, v, self.is_flexible(v))
                src = gen.build()
                if src not in cache:
                    exec(compile(src, f"<{spec.name} v{v}>", "exec"), gen.ns)
                    cache[src] = (gen.ns[f"_d_{spec.name}"], gen.ns[f"_e_{spec.name}"])
                self.decoders[direction][v], self.encoders[direction][v] = cache[src]

    def is_flexible(self, version: int) -> bool:
        return self.flexible is not None and version >= self.flexible

    def __repr__(self) -> str:
        return f"Api({self.key}, {self.name}, v{self.min_version}-{self.max_version})"


def _check(spec: StructSpec, api: Api) -> None:
    for s in spec.structs():
        for f in s.fields:
            if f.tag is not None and not api.is_flexible(f.lo):
                raise ValueError(f"{s.qualname}.{f.name}: tagged fields need flexible versions")
        tags = [f.tag for f in s.fields if f.tag is not None]
        if len(tags) != len(set(tags)):
            raise ValueError(f"{s.qualname}: duplicate tag")


def api(key: int, name: str, versions: str, *, flexible: int | None, request: str,
        response: str) -> Api:
    """Declare an API (see the module docstring); compiles every version's codecs now."""
    module = sys._getframe(1).f_globals.get("__name__", __name__)
    return Api(key, name, versions, flexible, request, response, module)
