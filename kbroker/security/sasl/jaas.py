"""Kafka's ``sasl.jaas.config`` values: one JAAS login module entry,

    org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="s" user_alice="a";

a class name, a control flag (required, requisite, sufficient, optional), ``name=value`` options
(values quoted with ``"`` and backslash escapes, or bare words), and a closing ``;``. Kafka's
JaasConfig reads it with a Java StreamTokenizer; this reads the same shapes. Error messages name the
position and never quote a value (they are passwords).
"""
from __future__ import annotations

from dataclasses import dataclass, field

FLAGS = ("required", "requisite", "sufficient", "optional")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "\\": "\\", '"': '"', "'": "'"}


class JaasError(ValueError):
    pass


@dataclass
class JaasEntry:
    login_module: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:  # options hold passwords: show only their names
        return f"JaasEntry({self.login_module!r}, {self.flag!r}, options={sorted(self.options)})"


def _tokens(text: str) -> list[tuple[str, str]]:
    """(kind, text) with kind one of word, quoted, '=', ';'."""
    out: list[tuple[str, str]] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch in "=;":
            out.append((ch, ch))
            i += 1
        elif ch == '"':
            i += 1
            buf = []
            while True:
                if i >= n:
                    raise JaasError(f"sasl.jaas.config: a quoted value opened before position {i} is never closed")
                ch = text[i]
                if ch == '"':
                    i += 1
                    break
                if ch == "\\" and i + 1 < n:
                    buf.append(_ESCAPES.get(text[i + 1], text[i + 1]))
                    i += 2
                    continue
                buf.append(ch)
                i += 1
            out.append(("quoted", "".join(buf)))
        else:
            start = i
            while i < n and not text[i].isspace() and text[i] not in '=;"':
                i += 1
            out.append(("word", text[start:i]))
    return out


def parse_jaas_config(text: str) -> JaasEntry:
    """One login module entry; raises JaasError for anything else (as Kafka refuses to start)."""
    toks = _tokens(text)
    if not toks:
        raise JaasError("sasl.jaas.config is empty")
    if len(toks) < 2 or toks[0][0] != "word" or toks[1][0] != "word":
        raise JaasError("sasl.jaas.config must start with a login module class name and a control flag")
    module, flag = toks[0][1], toks[1][1]
    if flag.lower() not in FLAGS:
        raise JaasError(f"sasl.jaas.config: invalid control flag {flag!r} (one of {', '.join(FLAGS)})")
    options: dict[str, str] = {}
    i = 2
    while i < len(toks) and toks[i][0] != ";":
        if (i + 2 >= len(toks) or toks[i][0] != "word" or toks[i + 1][0] != "="
                or toks[i + 2][0] not in ("word", "quoted")):
            raise JaasError(f"sasl.jaas.config: expected name=value options after {module} (option {len(options) + 1})")
        options[toks[i][1]] = toks[i + 2][1]
        i += 3
    if i >= len(toks):
        raise JaasError("sasl.jaas.config must end with ';'")
    if i != len(toks) - 1:
        raise JaasError("sasl.jaas.config holds more than one login module (Kafka accepts exactly one)")
    return JaasEntry(module, flag.lower(), options)
