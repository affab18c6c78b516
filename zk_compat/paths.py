"""ZooKeeper paths and node data, checked and taken apart the same way by every store.

* ``validate_path``: ZooKeeper's ``PathUtils.validatePath``; ``check_value``: bytes or None, at
  most ``MAX_DATA_BYTES`` (a real server drops the connection on a larger packet, so both
  stores refuse it before sending or applying anything).
* ``split``, ``parent``, ``join``, ``missing_parents``: path arithmetic on validated paths.
* ``split_zookeeper_connect``, ``with_chroot``: Kafka's ``zookeeper.connect`` string
  (``host:port,host:port/chroot``) and the server-side path of a path under a chroot.
"""
from __future__ import annotations

from collections.abc import Callable

MAX_DATA_BYTES = 0xFFFFF  # ZooKeeper's default jute.maxbuffer (1 MiB - 1)

_ILLEGAL_CHARS = frozenset(chr(c) for c in [0, *range(0x01, 0x20), *range(0x7F, 0xA0)])


def validate_path(path: str, *, sequence: bool = False) -> None:
    """Raise ValueError unless ``path`` is absolute, has no empty, '.' or '..' segment, no
    trailing '/' (a sequential create may end with one: the sequence number is the name) and
    no character ZooKeeper refuses."""
    if not isinstance(path, str) or not path.startswith("/"):
        raise ValueError(f"path must be a string starting with '/': {path!r}")
    if path == "/":
        return
    check = path[:-1] if sequence and path.endswith("/") else path
    if check.endswith("/"):
        raise ValueError(f"path must not end with '/': {path!r}")
    for segment in check[1:].split("/"):
        if segment == "":
            raise ValueError(f"empty segment in path {path!r}")
        if segment in (".", ".."):
            raise ValueError(f"relative segment {segment!r} in path {path!r}")
    for ch in check:
        if ch in _ILLEGAL_CHARS or 0xD800 <= ord(ch) <= 0xF8FF or 0xFFF0 <= ord(ch) <= 0xFFFF:
            raise ValueError(f"invalid character U+{ord(ch):04X} in path {path!r}")


def check_value(value: bytes | None) -> bytes | None:
    """Node data as ``bytes`` (from any bytes-like object), or None for null data; TypeError
    for anything else, ValueError past ``MAX_DATA_BYTES``."""
    if value is None:
        return None
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise TypeError(f"znode data must be bytes or None, got {type(value).__name__}")
    value = bytes(value)
    if len(value) > MAX_DATA_BYTES:
        raise ValueError(f"znode data of {len(value)} bytes exceeds ZooKeeper's limit of {MAX_DATA_BYTES}")
    return value


def split(path: str) -> tuple[str, str]:
    """``/a/b`` -> (``/a``, ``b``); ``/a`` -> (``/``, ``a``). The prefix of a sequential create
    ending in '/' has an empty name: ``/d/`` -> (``/d``, ``""``)."""
    parent_path, _, name = path.rpartition("/")
    return (parent_path or "/"), name


def parent(path: str) -> str:
    return split(path)[0]


def join(parent_path: str, name: str) -> str:
    """The path of child ``name`` of ``parent_path`` (``/`` included)."""
    return f"{parent_path.rstrip('/')}/{name}"


def missing_parents(path: str, exists: Callable[[str], bool]) -> list[str]:
    """The parents of ``path`` that do not exist, asking ``exists`` from the nearest one up to
    the first that does (the root always does); the order to create them in, root-most first."""
    missing: list[str] = []
    current = parent(path)
    while current != "/" and not exists(current):
        missing.append(current)
        current = parent(current)
    return missing[::-1]


def split_zookeeper_connect(zookeeper_connect: str) -> tuple[str, str]:
    """``"h1:2181,h2:2181/kafka"`` -> (``"h1:2181,h2:2181"``, ``"/kafka"``); no chroot -> ``""``."""
    hosts, slash, chroot = zookeeper_connect.strip().partition("/")
    if not hosts:
        raise ValueError(f"zookeeper.connect {zookeeper_connect!r} names no host")
    if not slash or chroot.strip("/") == "":
        return hosts, ""
    chroot = "/" + chroot.rstrip("/")
    validate_path(chroot)
    return hosts, chroot


def with_chroot(chroot: str, path: str) -> str:
    """The server's path for ``path`` as a session under ``chroot`` ("" for none) sees it."""
    if not chroot:
        return path
    return chroot if path == "/" else chroot + path
