"""The message DSL's parsed form and its parser: ``parse_struct`` reads the field lines of one message
(see ``schema``'s docstring for the language) into a ``StructSpec`` of ``Field``s; ``Struct`` is the base of
the classes ``schema`` builds from them."""
from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from typing import Any

from kbroker.protocol import types as _t
from kbroker.protocol.types import FIXED_FORMATS, ZERO_UUID

MAX_VERSION = 0x7FFF
PRIMITIVES = set(FIXED_FORMATS) | {"string", "bytes", "records", "uuid"}
MISSING = object()
PREFIXED = ("string", "bytes", "records", "array")  # kinds that start with a length or count
# The generated codecs: decode(buffer, position, end) -> (message, position); encode(message, parts, holes).
Decoder = Callable[[_t.Buffer, int, int], tuple[Any, int]]
Encoder = Callable[[Any, _t.Parts, list[int]], None]


# ----------------------------------------------------------------------------------------------
# Declarations


class Field:
    """One declared field. `kind` is fixed | string | bytes | records | uuid | array | struct."""

    __slots__ = ("name", "kind", "type", "elem", "struct", "lo", "hi", "null_lo", "null_hi",
                 "tag", "default", "defaulted")
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
    defaulted: bool            # the schema gives its default (``default=``): a sender may leave it to it

    def present(self, v: int) -> bool:
        return self.lo <= v <= self.hi

    def nullable(self, v: int) -> bool:
        return self.null_lo is not None and self.null_lo <= v <= self.null_hi

    def nested(self) -> StructSpec:
        """The struct of a struct field or an array of structs (callers have checked the kind)."""
        assert self.struct is not None, f"{self!r} has no struct"
        return self.struct

    def element(self) -> Field:
        """A stand-in field for one element of this array (of strings, bytes or uuids)."""
        assert self.elem is not None, f"{self!r} is not an array"
        elem = Field()
        elem.kind, elem.type, elem.null_lo = self.elem, self.type[1:-1], None
        return elem

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


def parse_versions(text: str, where: str) -> tuple[int, int]:
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
    f.lo, f.hi = parse_versions(ver, where)
    f.null_lo = None  # null_hi is read only once null_lo is set
    f.tag = None
    f.struct = None
    f.elem = None
    explicit = MISSING
    for opt in opts:
        if opt == "nullable":
            f.null_lo, f.null_hi = f.lo, f.hi
        elif opt.startswith("nullable:"):
            f.null_lo, f.null_hi = parse_versions(opt[9:], where)
        elif opt.startswith("tag="):
            f.tag = int(opt[4:])
        elif opt.startswith("default="):
            explicit = _literal(opt[8:], where)
        else:
            raise ValueError(f"{where}: unknown option {opt!r}")

    inner = typ[1:-1] if typ.startswith("[") and typ.endswith("]") else None
    base = inner if inner is not None else typ
    if base in PRIMITIVES:
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

    f.defaulted = explicit is not MISSING
    if explicit is not MISSING:
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
        f.default = None if f.tag is not None else MISSING
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
