"""JSON bytes as Kafka's ``kafka.utils.Json`` (Jackson's ``ObjectMapper``) writes them, and a
strict reader.

Writer: compact (no spaces, no newline), UTF-8, keys in the order the dict holds them (callers
order them with ``_jvm_order``). Jackson's escaping differs from ``json.dumps`` in two places,
both checked against Jackson 2.14, 2.17 and 2.20: control characters without a short form are
written ``\\u00XX`` with *upper-case* hex, and characters outside the BMP are written as an
escaped surrogate pair (``\\uD83D\\uDE00``) rather than as raw four-byte UTF-8. Everything else
from U+0020 up (DEL, U+2028, any BMP letter) is written raw.
"""
from __future__ import annotations

import json
from typing import Any

_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n",
                  "\f": "\\f", "\r": "\\r"}


def _escape_char(ch: str) -> str:
    short = _SHORT_ESCAPES.get(ch)
    if short is not None:
        return short
    cp = ord(ch)
    if cp < 0x20:
        return f"\\u{cp:04X}"
    if cp > 0xFFFF:
        cp -= 0x10000
        return f"\\u{0xD800 + (cp >> 10):04X}\\u{0xDC00 + (cp & 0x3FF):04X}"
    if 0xD800 <= cp <= 0xDFFF:
        raise ValueError(f"lone surrogate U+{cp:04X} cannot be written as UTF-8 JSON")
    return ch


def _string(s: str) -> str:
    if s.isascii() and s.isprintable() and '"' not in s and "\\" not in s:
        return '"' + s + '"'
    return '"' + "".join(_escape_char(ch) for ch in s) + '"'


def _write(value: Any, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, str):
        out.append(_string(value))
    elif isinstance(value, dict):
        out.append("{")
        first = True
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"JSON object keys must be str, got {k!r}")
            if not first:
                out.append(",")
            first = False
            out.append(_string(k))
            out.append(":")
            _write(v, out)
        out.append("}")
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for i, v in enumerate(value):
            if i:
                out.append(",")
            _write(v, out)
        out.append("]")
    else:
        raise TypeError(f"cannot write {type(value).__name__} as znode JSON")


def dumps(value: Any) -> bytes:
    """Jackson-compatible compact JSON bytes of ``value`` (dict order is kept)."""
    out: list[str] = []
    _write(value, out)
    return "".join(out).encode("utf-8")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def loads(data: bytes, path: str) -> Any:
    """Parse znode bytes as JSON; any failure is a ValueError naming the znode."""
    try:
        text = bytes(data).decode("utf-8")
        return json.loads(text, parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"{path}: not valid JSON ({exc}): {_preview(data)}") from None


def _preview(data: bytes, limit: int = 120) -> str:
    text = bytes(data[:limit]).decode("utf-8", "replace")
    return repr(text) + ("..." if len(data) > limit else "")
