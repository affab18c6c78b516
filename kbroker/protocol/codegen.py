"""The codec compiler: ``_Gen`` writes straight-line Python source for one message's decoder and encoder
at one version (consecutive fixed-width fields through one precompiled ``struct.Struct``), which ``schema.Api``
compiles with exec at import time."""
from __future__ import annotations

import codecs
import struct
import uuid
from collections.abc import Callable
from typing import Any, NoReturn

from kbroker.protocol import types as _t
from kbroker.protocol.schema_dsl import MISSING, PREFIXED, Field, StructSpec
from kbroker.protocol.types import FIXED_FORMATS, ProtocolError

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
        if f.default is MISSING:
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
            inner = self._read_value(f.element(), x, where + "[]")
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
            elif k < len(runs) and not self.flex and runs[k][0][0].kind in PREFIXED:
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
                body += ["    " + s for s in self._write_value(f.element(), y, where + "[]", A, P)]
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
