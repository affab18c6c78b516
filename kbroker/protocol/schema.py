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

import ast
import codecs
import struct
import sys
import uuid
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

from kbroker.protocol import types as _t
from kbroker.protocol.types import FIXED_FORMATS, ZERO_UUID, ProtocolError

MAX_VERSION = 0x7FFF
_PRIMITIVES = set(FIXED_FORMATS) | {"string", "bytes", "records", "uuid"}
_MISSING = object()
_PREFIXED = ("string", "bytes", "records", "array")  # kinds that start with a length or count
# The generated codecs: decode(buffer, position, end) -> (message, position); encode(message, parts, holes).
Decoder = Callable[[_t.Buffer, int, int], tuple[Any, int]]
Encoder = Callable[[Any, _t.Parts, list[int]], None]


# ----------------------------------------------------------------------------------------------
# Declarations


class Field:
    """One declared field. `kind` is fixed | string | bytes | records | uuid | array | struct."""

    __slots__ = ("name", "kind", "type", "elem", "struct", "lo", "hi", "null_lo", "null_hi",
                 "tag", "default")
    name: str
    kind: str
    type: str
    elem: str | None           # an array's element kind
    struct: StructSpec | None  # a struct's (or an array of structs') fields
    lo: int                    # the versions the field is in
    hi: int
    null_lo: int | None        # the versions it may be null in
    null_hi: int               # (set only with null_lo)
    tag: int | None            # a tagged field's tag
    default: Any

    def present(self, v: int) -> bool:
        return self.lo <= v <= self.hi

    def nullable(self, v: int) -> bool:
        return self.null_lo is not None and self.null_lo <= v <= self.null_hi

    def nested(self) -> StructSpec:
        """The struct of a struct field or an array of structs (callers have checked the kind)."""
        assert self.struct is not None, f"{self!r} has no struct"
        return self.struct

    def __repr__(self) -> str:
        return f"Field({self.name} {self.type} v{self.lo}-{self.hi})"


class StructSpec:
    """The fields of one struct (a message body or a nested struct) and its generated class."""

    __slots__ = ("name", "qualname", "fields", "cls")

    def __init__(self, name: str, qualname: str) -> None:
        self.name = name
        self.qualname = qualname
        self.fields: list[Field] = []
        self.cls: type[Struct] | None = None

    def structs(self) -> Iterator[StructSpec]:
        """This struct and every struct nested in it, depth first."""
        yield self
        for f in self.fields:
            if f.struct is not None:
                yield from f.struct.structs()


def _versions(text: str, where: str) -> tuple[int, int]:
    if not text.startswith("v"):
        raise ValueError(f"{where}: bad version range {text!r}")
    body = text[1:]
    try:
        if body.endswith("+"):
            return int(body[:-1]), MAX_VERSION
        if "-" in body:
            lo, hi = body.split("-")
            return int(lo), int(hi)
        return int(body), int(body)
    except ValueError:
        raise ValueError(f"{where}: bad version range {text!r}") from None


def _literal(text: str, where: str) -> Any:
    named = {"true": True, "false": False, "null": None}
    if text in named:
        return named[text]
    try:
        return int(text, 0)
    except ValueError:
        pass
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        raise ValueError(f"{where}: bad default {text!r}") from None


def _parse_line(tokens: list[str], qualname: str) -> Field:
    if len(tokens) < 3:
        raise ValueError(f"{qualname}: need 'name type versions', got {' '.join(tokens)!r}")
    f = Field()
    f.name, typ, ver, *opts = tokens
    where = f"{qualname}.{f.name}"
    if not f.name.isidentifier() or f.name != f.name.lower() or f.name.startswith("_"):
        raise ValueError(f"{where}: field names are snake_case")
    f.type = typ
    f.lo, f.hi = _versions(ver, where)
    f.null_lo = None  # null_hi is read only once null_lo is set
    f.tag = None
    f.struct = None
    f.elem = None
    explicit = _MISSING
    for opt in opts:
        if opt == "nullable":
            f.null_lo, f.null_hi = f.lo, f.hi
        elif opt.startswith("nullable:"):
            f.null_lo, f.null_hi = _versions(opt[9:], where)
        elif opt.startswith("tag="):
            f.tag = int(opt[4:])
        elif opt.startswith("default="):
            explicit = _literal(opt[8:], where)
        else:
            raise ValueError(f"{where}: unknown option {opt!r}")

    inner = typ[1:-1] if typ.startswith("[") and typ.endswith("]") else None
    base = inner if inner is not None else typ
    if base in _PRIMITIVES:
        kind = "fixed" if base in FIXED_FORMATS else base
    elif base[:1].isupper() and base.isidentifier():
        kind = "struct"
        f.struct = StructSpec(base, f"{qualname}.{base}")
    else:
        raise ValueError(f"{where}: unknown type {typ!r}")
    if inner is not None:
        f.kind, f.elem = "array", kind
        if kind == "records":
            raise ValueError(f"{where}: arrays of records are not a Kafka type")
    else:
        f.kind = kind
    if f.null_lo is not None and f.kind in ("fixed", "uuid", "struct"):
        raise ValueError(f"{where}: {typ} cannot be nullable")
    if f.tag is not None and f.kind == "records":
        raise ValueError(f"{where}: records cannot be tagged (file slices must stay in place)")

    if explicit is not _MISSING:
        f.default = explicit
    elif f.kind == "fixed":
        f.default = False if base == "bool" else 0.0 if base == "float64" else 0
    elif f.kind == "uuid":
        f.default = ZERO_UUID
    elif f.kind in ("string", "bytes", "records"):
        null_always = f.null_lo is not None and f.null_lo <= f.lo and f.null_hi >= f.hi
        f.default = None if null_always else ("" if f.kind == "string" else b"")
    elif f.kind == "array":
        f.default = []
    else:  # struct: a fresh default instance, or None for a tagged struct (= not sent)
        f.default = None if f.tag is not None else _MISSING
    return f


def parse_struct(text: str, name: str) -> StructSpec:
    """Parse an indented field list into a StructSpec tree."""
    top = StructSpec(name, name)
    # stack of (indentation of the children, spec); indentation None until the first child
    stack: list[list[Any]] = [[None, top]]  # [indentation, StructSpec]
    last: Field | None = None
    last_indent = -1
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        if indent > last_indent and last is not None:
            if last.struct is None:
                raise ValueError(f"{name}: {line.strip()!r} is indented under non-struct {last.name}")
            stack.append([indent, last.struct])
        while len(stack) > 1 and indent < stack[-1][0]:
            stack.pop()
        level = stack[-1]
        if level[0] is None:
            level[0] = indent
        elif indent != level[0]:
            raise ValueError(f"{name}: inconsistent indentation at {line.strip()!r}")
        spec: StructSpec = level[1]
        f = _parse_line(line.split(), spec.qualname)
        if any(g.name == f.name for g in spec.fields):
            raise ValueError(f"{spec.qualname}: duplicate field {f.name}")
        spec.fields.append(f)
        last, last_indent = f, indent
    names = set()
    for s in top.structs():
        if s is not top and not s.fields:
            raise ValueError(f"{s.qualname}: a struct needs fields")
        if s.name in names:
            raise ValueError(f"{name}: struct name {s.name} used twice")
        names.add(s.name)
    return top


# ----------------------------------------------------------------------------------------------
# Objects


class Struct:
    """Base of every generated message/struct class: slots, keyword construction, equality."""

    __slots__ = ()
    _fields: tuple[str, ...] = ()
    _spec: StructSpec | None = None

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n in self._fields)

    __hash__ = None  # type: ignore[assignment]  # mutable: unhashable (typeshed types object.__hash__ as a method)

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in self._fields)
        return f"{type(self).__qualname__}({inner})"

    def to_dict(self) -> dict[str, Any]:
        """Plain dicts and lists all the way down (records/memoryviews are left as they are)."""
        def conv(v: Any) -> Any:
            if isinstance(v, Struct):
                return v.to_dict()
            if isinstance(v, list):
                return [conv(x) for x in v]
            return v
        return {n: conv(getattr(self, n)) for n in self._fields}


def _build_class(spec: StructSpec, module: str) -> type[Struct]:
    """Create the slotted class for `spec` (and, first, for its nested structs)."""
    ns: dict[str, Any] = {"_MISSING": _MISSING}
    params: list[str] = []
    body: list[str] = []
    for f in spec.fields:
        if f.struct is not None:
            sub = _build_class(f.struct, module)
            ns[f"_S_{f.struct.name}"] = sub
        if f.kind == "array" or f.default is _MISSING:
            fresh = "[]" if f.kind == "array" else f"_S_{f.nested().name}()"
            if f.kind == "array" and f.default != []:
                fresh = repr(f.default)  # e.g. an explicit default=null
            params.append(f"{f.name}=_MISSING")
            body.append(f"    self.{f.name} = {fresh} if {f.name} is _MISSING else {f.name}")
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
# Code generation


class _Gen:
    """Generates the decode/encode source of one message at one version."""

    def __init__(self, top: StructSpec, version: int, flexible: bool) -> None:
        self.top = top
        self.v = version
        self.flex = flexible
        self.ns: dict[str, Any] = {  # what the generated source refers to
            "_uvar": _t.read_uvarint,
            "_uvb": _t.uvarint_bytes,
            "_UV1": _t.UVARINT_1,
            "_skip_all": _t.skip_tag_section,
            "_wtags": _t.write_tagged_fields,
            "_rec": _t.encode_records,
            "_utf8": codecs.utf_8_decode,
            "_bytes": bytes,
            "_new": object.__new__,
            "_UUID": uuid.UUID,
            "_uuidb": _uuid_bytes,
            "_unpack": struct.unpack_from,
            "_pack": struct.pack,
            "_neg": _neg,
            "_past": _past,
            "_many": _many,
            "_null": _null,
            "_badtag": _badtag,
            "_p_h": _t.INT16.pack,
            "_p_i": _t.INT32.pack,
        }
        self.tmp = 0
        self.out: list[str] = []

    # helpers ---------------------------------------------------------------------------------

    def _name(self, prefix: str) -> str:
        self.tmp += 1
        return f"{prefix}{self.tmp}"

    def _struct(self, fmt: str, op: str) -> str:
        key = f"_{op}_" + fmt.replace("?", "o")
        if key not in self.ns:
            s = struct.Struct(">" + fmt)
            self.ns[key] = s.unpack_from if op == "u" else s.pack
        return key

    def _const(self, prefix: str, value: object) -> str:
        for k, v in self.ns.items():
            if k.startswith(prefix) and v is value:
                return k
        name = self._name(prefix)
        self.ns[name] = value
        return name

    def _default_expr(self, f: Field) -> str:
        if f.kind == "array":
            return "[]" if f.default == [] else repr(f.default)
        if f.default is _MISSING:
            return f"_C_{f.nested().name}()"
        return self._const("_DF", f.default)

    def _layout(self, spec: StructSpec,
                generate: Callable[[StructSpec], None]) -> tuple[list[tuple[list[Field], str | None]], list[Field]]:
        """Generate (with `generate`) the structs nested in `spec`, then return the fields of `spec`
        in this version: those written in place, in order, as runs, and the tagged ones, by tag.
        A run is (consecutive fixed-width fields, their struct format) or ([one other field], None)."""
        fields = [f for f in spec.fields if f.present(self.v)]
        for f in fields:
            if f.struct is not None:
                generate(f.struct)
        runs: list[list[Field]] = []
        for f in fields:
            if f.tag is not None and self.flex:
                continue
            if f.kind == "fixed" and runs and runs[-1][0].kind == "fixed":
                runs[-1].append(f)
            else:
                runs.append([f])
        tagged = sorted((f for f in fields if f.tag is not None and self.flex), key=_tag)
        return [(run, "".join(FIXED_FORMATS[g.type] for g in run) if run[0].kind == "fixed" else None)
                for run in runs], tagged

    # decoding --------------------------------------------------------------------------------

    def _read_len(self, var: str, fmt: str) -> list[str]:
        """A length/count into `var`; -1 means null in both encodings."""
        if self.flex:  # inline the one- and two-byte varints (records up to 16 KiB)
            return [f"{var} = buf[p]",
                    f"if {var} < 128: p += 1",
                    f"elif buf[p + 1] < 128: {var} = ({var} & 127) | (buf[p + 1] << 7); p += 2",
                    f"else: {var}, p = _uvar(buf, p)",
                    f"{var} -= 1"]
        return [f"{var}, = {self._struct(fmt, 'u')}(buf, p)", f"p += {struct.calcsize(fmt)}"]

    def _read_blob(self, kind: str, tgt: str, where: str, nullable: bool, fmt: str,
                   pre: str | None = None) -> list[str]:
        n, e = pre or self._name("n"), self._name("e")
        lines = [] if pre else self._read_len(n, fmt)
        if kind == "string":
            value = f"_utf8(buf[p:{e}])[0]"
        elif kind == "bytes":
            value = f"_bytes(buf[p:{e}])"
        else:  # records: a view into the receive buffer, no copy
            value = f"buf[p:{e}]"
        body = [f"{e} = p + {n}",
                f"if {e} > L: _past({where!r}, {n}, L - p)",
                f"{tgt} = {value}",
                f"p = {e}"]
        return lines + self._unless_negative(n, tgt, where, nullable, body)

    @staticmethod
    def _unless_negative(n: str, tgt: str, where: str, nullable: bool, body: list[str]) -> list[str]:
        """`body`, run when length or count `n` is not negative; -1 sets `tgt` to None where the
        field is nullable, any other negative value is refused."""
        if nullable:
            return [f"if {n} < 0:",
                    f"    if {n} != -1: _neg({where!r}, {n})",
                    f"    {tgt} = None",
                    "else:"] + ["    " + x for x in body]
        return [f"if {n} < 0: _neg({where!r}, {n})"] + body

    def _read_value(self, f: Field, tgt: str, where: str, pre: str | None = None) -> list[str]:
        """Lines that read field `f` into `tgt`; `pre` names a variable that already holds its
        length or count (read together with the fixed-width fields before it)."""
        nullable = f.nullable(self.v)
        if f.kind == "fixed":
            u = self._struct(FIXED_FORMATS[f.type], "u")
            return [f"{tgt}, = {u}(buf, p)", f"p += {struct.calcsize(FIXED_FORMATS[f.type])}"]
        if f.kind in ("string", "bytes", "records"):
            return self._read_blob(f.kind, tgt, where, nullable, "h" if f.kind == "string" else "i",
                                   pre)
        if f.kind == "uuid":
            e = self._name("e")
            return [f"{e} = p + 16",
                    f"if {e} > L: _past({where!r}, 16, L - p)",
                    f"{tgt} = _UUID(bytes=_bytes(buf[p:{e}]))",
                    f"p = {e}"]
        if f.kind == "struct":
            return [f"{tgt}, p = _d_{f.nested().name}(buf, p, L)"]
        # array
        n = pre or self._name("n")
        lines = [] if pre else self._read_len(n, "i")
        if f.elem == "struct":
            x, lst = self._name("x"), self._name("l")
            body = [f"{lst} = []",
                    f"for _ in range({n}):",
                    f"    {x}, p = _d_{f.nested().name}(buf, p, L)",
                    f"    {lst}.append({x})",
                    f"{tgt} = {lst}"]
        elif f.elem == "fixed":
            c = FIXED_FORMATS[f.type[1:-1]]
            body = [f"{tgt} = list(_unpack('>%d{c}' % {n}, buf, p))",
                    f"p += {n} * {struct.calcsize(c)}"]
        else:
            x = self._name("x")
            inner = self._read_value(_element(f), x, where + "[]")
            lst = self._name("l")
            body = [f"{lst} = []", f"for _ in range({n}):"] + ["    " + s for s in inner]
            body += [f"    {lst}.append({x})", f"{tgt} = {lst}"]
        body.insert(0, f"if {n} > L - p: _many({where!r}, {n}, L - p)")
        return lines + self._unless_negative(n, tgt, where, nullable, body)

    def _decoder(self, spec: StructSpec) -> None:
        runs, tagged = self._layout(spec, self._decoder)
        lines: list[str] = []
        spec_done = False  # tag section already read
        k = 0
        while k < len(runs):
            run, fmt = runs[k]
            k += 1
            if fmt is None:
                f = run[0]
                lines += self._read_value(f, f"o.{f.name}", f"{spec.qualname}.{f.name}")
                continue
            # one unpack for the whole run of fixed-width fields
            targets = "".join(f"o.{g.name}, " for g in run)
            if k == len(runs) and self.flex and not tagged:
                # the struct ends here: read the tag count byte in the same unpack
                n = self._name("n")
                lines.append(f"{targets}{n}, = {self._struct(fmt + 'B', 'u')}(buf, p)")
                lines.append(f"p += {struct.calcsize('>' + fmt) + 1}")
                lines.append(f"if {n}: p = _skip_all(buf, p - 1, L)")
                spec_done = True
            elif k < len(runs) and not self.flex and runs[k][0][0].kind in _PREFIXED:
                # classic form: read the next field's length prefix in the same unpack
                g = runs[k][0][0]
                k += 1
                n = self._name("n")
                fmt += "h" if g.kind == "string" else "i"
                lines.append(f"{targets}{n}, = {self._struct(fmt, 'u')}(buf, p)")
                lines.append(f"p += {struct.calcsize('>' + fmt)}")
                lines += self._read_value(g, f"o.{g.name}", f"{spec.qualname}.{g.name}", n)
            else:
                lines.append(f"{targets}= {self._struct(fmt, 'u')}(buf, p)")
                lines.append(f"p += {struct.calcsize('>' + fmt)}")
        if self.flex and not spec_done:
            n = self._name("n")
            if not tagged:  # the common case: an empty tag section is a single 0 byte
                lines += ["if buf[p]: p = _skip_all(buf, p, L)", "else: p += 1"]
            else:
                lines += [f"{n} = buf[p]",
                          f"if {n} < 128: p += 1",
                          f"else: {n}, p = _uvar(buf, p)"]
                for f in tagged:
                    lines.append(f"o.{f.name} = {self._default_expr(f)}")
                t, z, e = self._name("t"), self._name("z"), self._name("e")
                loop = [f"if {n} > L - p: _many('tagged fields of {spec.qualname}', {n}, L - p)",
                        f"for _ in range({n}):",
                        f"    {t}, p = _uvar(buf, p)",
                        f"    {z}, p = _uvar(buf, p)",
                        f"    {e} = p + {z}",
                        f"    if {e} > L: _past('tagged field of {spec.qualname}', {z}, L - p)"]
                for k, f in enumerate(tagged):
                    where = f"{spec.qualname}.{f.name}"
                    loop.append(f"    {'if' if k == 0 else 'elif'} {t} == {f.tag}:")
                    loop += ["        " + s for s in self._read_value(f, f"o.{f.name}", where)]
                    loop.append(f"        if p > {e}: _badtag({where!r})")
                loop.append(f"    p = {e}")
                lines.append(f"if {n}:")
                lines += ["    " + s for s in loop]
        absent = [f"o.{f.name} = {self._default_expr(f)}" for f in spec.fields if not f.present(self.v)]
        lines = [f"o = _new(_C_{spec.name})"] + absent + lines + ["return o, p"]
        self.out.append(f"def _d_{spec.name}(buf, p, L):")
        self.out += ["    " + s for s in lines]
        self.out.append("")

    # encoding --------------------------------------------------------------------------------

    def _write_len(self, x: str, fmt: str, A: str) -> str:
        """Write the length (or count) of `x`: +1 in compact form, where 0 is null."""
        if self.flex:
            return f"{A}(_UV1[len({x}) + 1] if len({x}) < 127 else _uvb(len({x}) + 1))"
        return f"{A}(_p_{fmt}(len({x})))"

    def _null_bytes(self, fmt: str) -> str:
        if self.flex:
            return "b'\\x00'"
        return "b'\\xff\\xff'" if fmt == "h" else "b'\\xff\\xff\\xff\\xff'"

    def _write_value(self, f: Field, x: str, where: str, A: str, P: str) -> list[str]:
        """Lines that write value `x` of field `f` through append function `A` (list `P`)."""
        nullable = f.nullable(self.v)
        if f.kind == "fixed":
            return [f"{A}({self._struct(FIXED_FORMATS[f.type], 'p')}({x}))"]
        if f.kind == "uuid":
            return [f"{A}(_uuidb({x}))"]
        if f.kind == "struct":
            return [f"_e_{f.nested().name}({x}, {P}, H)"]
        fmt = "h" if f.kind == "string" else "i"
        if f.kind == "string":
            body = [f"{x} = {x}.encode()", self._write_len(x, fmt, A), f"{A}({x})"]
        elif f.kind == "bytes":
            body = [f"if {x}.__class__ is not bytes: {x} = _bytes({x})",
                    self._write_len(x, fmt, A), f"{A}({x})"]
        elif f.kind == "records":
            body = [f"if {x}.__class__ is bytes:",
                    "    " + self._write_len(x, fmt, A),
                    f"    {A}({x})",
                    f"else: _rec({x}, {P}, H, {self.flex})"]
        else:  # array
            body = [self._write_len(x, "i", A)]
            if f.elem == "struct":
                y = self._name("y")
                body += [f"for {y} in {x}: _e_{f.nested().name}({y}, {P}, H)"]
            elif f.elem == "fixed":
                c = FIXED_FORMATS[f.type[1:-1]]
                body += [f"{A}(_pack('>%d{c}' % len({x}), *{x}))"]
            else:
                y = self._name("y")
                body += [f"for {y} in {x}:"]
                body += ["    " + s for s in self._write_value(_element(f), y, where + "[]", A, P)]
        if nullable:
            return [f"if {x} is None: {A}({self._null_bytes(fmt)})", "else:"] + ["    " + s for s in body]
        return [f"if {x} is None: _null({where!r})"] + body

    def _encoder(self, spec: StructSpec) -> None:
        runs, tagged = self._layout(spec, self._encoder)
        lines = [f"if o.__class__ is dict: o = _C_{spec.name}(**o)", "A = P.append"]
        tags_done = False  # empty tag section already written
        for k, (run, fmt) in enumerate(runs, 1):
            if fmt is None:
                f = run[0]
                x = self._name("x")
                lines.append(f"{x} = o.{f.name}")
                lines += self._write_value(f, x, f"{spec.qualname}.{f.name}", "A", "P")
                continue
            args = ", ".join(f"o.{g.name}" for g in run)  # one pack for the whole run
            if k == len(runs) and self.flex and not tagged:
                # the struct ends here: write the empty tag section in the same pack
                lines.append(f"A({self._struct(fmt + 'B', 'p')}({args}, 0))")
                tags_done = True
            else:
                lines.append(f"A({self._struct(fmt, 'p')}({args}))")
        if self.flex and not tags_done:
            if not tagged:
                lines.append("A(b'\\x00')")
            else:
                lines.append("T = []")
                for f in tagged:
                    x = self._name("x")
                    where = f"{spec.qualname}.{f.name}"
                    lines.append(f"{x} = o.{f.name}")
                    if f.kind == "struct":
                        cls = f.nested().cls
                        assert cls is not None, "classes are built before their codecs"
                        dflt = self._const("_DS", cls())
                        lines.append(f"if {x} is not None and {x} != {dflt}:")
                    else:
                        lines.append(f"if {x} != {self._const('_DF', f.default)}:")
                    q = self._name("q")
                    lines.append(f"    {q} = []")
                    lines += ["    " + s for s in self._write_value(f, x, where, f"{q}.append", q)]
                    lines.append(f"    T.append(({f.tag}, b''.join({q})))")
                lines.append("if T: _wtags(T, A)")
                lines.append("else: A(b'\\x00')")
        self.out.append(f"def _e_{spec.name}(o, P, H):")
        self.out += ["    " + s for s in lines]
        self.out.append("")

    def build(self) -> str:
        self._decoder(self.top)
        self._encoder(self.top)
        for s in self.top.structs():
            self.ns[f"_C_{s.name}"] = s.cls
        return "\n".join(self.out)


def _tag(f: Field) -> int:
    assert f.tag is not None, f"{f!r} is not tagged"
    return f.tag


def _element(f: Field) -> Field:
    """A stand-in field for one element of array `f` (of strings, bytes or uuids)."""
    assert f.elem is not None, f"{f!r} is not an array"
    elem = Field()
    elem.kind, elem.type, elem.null_lo = f.elem, f.type[1:-1], None
    return elem


def _uuid_bytes(u: Any) -> bytes:
    b: bytes = u.bytes if hasattr(u, "bytes") else bytes(u)
    if len(b) != 16:
        raise ProtocolError(f"a uuid is 16 bytes, got {len(b)}")
    return b


def _neg(where: str, n: int) -> NoReturn:
    raise ProtocolError(f"{where}: invalid length {n} (null not allowed here)")


def _past(where: str, n: int, left: int) -> NoReturn:
    raise ProtocolError(f"{where}: length {n} runs past the end of the frame ({left} bytes left)")


def _many(where: str, n: int, left: int) -> NoReturn:
    raise ProtocolError(f"{where}: count {n} exceeds the {left} bytes left")


def _null(where: str) -> NoReturn:
    raise ProtocolError(f"{where}: None is not allowed in this version")


def _badtag(where: str) -> NoReturn:
    raise ProtocolError(f"{where}: tagged value overruns its declared size")


# ----------------------------------------------------------------------------------------------
# APIs


class Api:
    """One API: key, name, implemented version range, flexible cut-over, classes and codecs.

    `decoders[direction][version]` is `f(buf, pos, end) -> (obj, pos)`, `encoders[...]` is
    `f(obj, parts, holes)`; direction 0 = request, 1 = response.
    """

    def __init__(self, key: int, name: str, versions: str, flexible: int | None,
                 request: str, response: str, module: str) -> None:
        lo, hi = _versions("v" + versions, name)
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
