"""The fuzz targets: each feeds one input to a parser of untrusted bytes and holds it to its contract.

A target's contract: the code under test returns, or raises one of the target's ``allowed`` errors
(the protocol's own refusals). Anything else escaping ``run`` is a finding, and so is a crash or an
input that runs over a second (``bench.reliability.fuzz`` sets libFuzzer's ``-timeout=1``).

Importing this module needs no atheris: tests/fuzz replays the kept corpus through ``run`` alone.
``seeds()`` builds valid inputs with the repository's own builders (every API version, every
codec, both legacy magics), so mutations start from the shapes the parsers accept; this matters
most for ``kbroker._core.records``, which is compiled and gives the fuzzer no coverage feedback.
"""
from __future__ import annotations

import atexit
import os
import shutil
import struct
import tempfile
import uuid
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kbroker import errors
from kbroker._core import records as core_records
from kbroker.log import batches, legacy
from kbroker.log.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD
from kbroker.protocol import APIS, ProtocolError, decode_request, encode_request
from kbroker.protocol.schema import Field, Struct, StructSpec
from zk_compat.embedded import EmbeddedServer
from zk_compat.paths import join, split, validate_path
from zk_compat.store import CreateOp, DeleteOp, SetDataOp

CODECS = (NONE, GZIP, SNAPPY, LZ4, ZSTD)


@dataclass(frozen=True)
class Target:
    name: str
    doc: str
    run: Callable[[bytes], None]
    seeds: Callable[[], Iterator[bytes]]
    allowed: tuple[type[BaseException], ...]
    extra_code: Callable[[], list[Callable[..., Any]]] = field(default=lambda: [])  # functions made by exec


def check(target: Target, data: bytes) -> None:
    """Run one input under the contract: the allowed errors are swallowed, anything else escapes."""
    try:
        target.run(data)
    except target.allowed as exc:
        if type(exc) in _NEVER_ALLOWED:
            raise


# RecursionError and NotImplementedError are RuntimeErrors, which the journal reader may raise.
_NEVER_ALLOWED = (RecursionError, NotImplementedError)


# ------------------------------------------------------------------------------------------------
# 1. the request decoder: the function kbroker.network.connection calls on every frame

def run_request(data: bytes) -> None:
    header, body = decode_request(memoryview(bytearray(data)))
    # What the decoder accepts, the encoder must write back, and that must decode to the same
    # bytes again (compared as bytes: a float64 NaN is not equal to itself).
    key, version = header.api_key, header.api_version
    try:
        frame = encode_request(key, version, header.correlation_id, header.client_id, body)
        _, again = decode_request(memoryview(bytearray(frame))[4:], strict=True)
        same = encode_request(key, version, header.correlation_id, header.client_id, again) == frame
    except ProtocolError as exc:
        raise AssertionError(f"api {key} v{version}: a decoded request does not encode back: {exc}") from exc
    if not same:
        raise AssertionError(f"api {key} v{version}: a decoded request encodes back differently")


def _sample(spec: StructSpec, version: int, depth: int = 0) -> Struct:
    """A body with one element in every array and a value in every field present in ``version``,
    so that each nested struct's decoder has bytes to chew on."""
    kwargs = {f.name: _sample_value(f, version, depth) for f in spec.fields if f.present(version)}
    assert spec.cls is not None
    return spec.cls(**kwargs)


def _sample_value(f: Field, version: int, depth: int) -> Any:
    if f.kind == "struct":
        return _sample(f.nested(), version, depth + 1)
    if f.kind == "array":
        if depth > 3:
            return []
        if f.elem == "struct":
            return [_sample(f.nested(), version, depth + 1)]
        return [{"string": "x", "bytes": b"x", "uuid": uuid.UUID(int=7)}.get(f.elem or "", 1)]
    if f.kind == "string":
        return "fuzz"
    if f.kind == "bytes":
        return b"\x01\x02"
    if f.kind == "records":
        return bytes(batches.build_batch([(b"k", b"v", 1)]))
    if f.kind == "uuid":
        return uuid.UUID(int=0x1234)
    return f.default if not isinstance(f.default, bool) else True


def seed_requests() -> Iterator[bytes]:
    for key, api in sorted(APIS.items()):
        for v in range(api.min_version, api.max_version + 1):
            spec = api.request._spec
            assert spec is not None
            for body in (api.request(), _sample(spec, v)):
                try:
                    yield encode_request(key, v, 7, "fuzz", body)[4:]
                except ProtocolError:
                    continue  # a field value this version cannot carry; the default body still seeds it


def request_decoders() -> list[Callable[..., Any]]:
    """The decoders schema.py compiled with exec (instrument_imports cannot see them): each
    version's top-level decoder and the nested ones it calls through its namespace."""
    found: dict[int, Callable[..., Any]] = {}
    for api in APIS.values():
        for fn in api.decoders[0].values():
            for name, obj in fn.__globals__.items():
                if name.startswith("_d_") and callable(obj):
                    found[id(obj)] = obj
    return list(found.values())


# ------------------------------------------------------------------------------------------------
# 2. record-batch validation (kbroker._core.records, as the produce and replica paths call it)

def run_batch_validation(data: bytes) -> None:
    """As sent (the CRC check refuses nearly every mutant), then with each batch's CRC repaired so
    that mutations reach the header and record checks behind it."""
    buf = bytearray(data)
    _validate_all(buf, 0)
    if _fix_crcs(buf):
        _validate_all(buf, 1)


def _validate_all(buf: bytearray, repaired: int) -> None:
    try:
        _outcome(core_records.validate(buf, 1 << 20, True))  # a client's produce
    except core_records.RecordBatchError as exc:
        _refusal(exc, repaired)
    headers, _, status = core_records.scan_batches(buf, True)  # log recovery: reports, never raises
    _edge(120 + status)
    try:
        info = core_records.validate(buf, len(buf) + 1, False)  # a follower's append
    except core_records.RecordBatchError as exc:
        _refusal(exc, repaired)
        return
    if status != 0 or len(headers) != info.batch_count:
        raise AssertionError(f"validate accepts {info.batch_count} batches; scan_batches finds "
                             f"{len(headers)} with status {status}")
    copy = bytearray(buf)
    core_records.assign_offsets(copy, 1000, 3, 1_700_000_000_000)
    core_records.validate(copy, len(copy) + 1, False)  # still valid with offsets and LogAppendTime set
    header = core_records.parse_header(copy)
    if header.compression == NONE and header.size == len(copy):
        core_records.first_offset_at_or_after(copy, 0)


def _fix_crcs(buf: bytearray) -> bool:
    pos, changed = 0, False
    while pos + core_records.HEADER_SIZE <= len(buf):
        (length,) = struct.unpack_from(">i", buf, pos + 8)
        end = pos + 12 + length
        if length < core_records.HEADER_SIZE - 12 or end > len(buf):
            break
        crc = core_records.crc32c(memoryview(buf)[pos + batches.CRC_START:end])
        if struct.unpack_from(">I", buf, pos + batches.CRC_OFFSET)[0] != crc:
            struct.pack_into(">I", buf, pos + batches.CRC_OFFSET, crc)
            changed = True
        pos = end
    return changed


# The compiled validator gives atheris no coverage, so the target branches on what it answered:
# each kind of refusal (by its message) and each shape of accepted batch takes its own branch of
# `_edge`, and libFuzzer keeps the inputs that reach a new one. Without this every mutant looks
# alike and the corpus collapses to a single byte.

_REFUSALS = ("is truncated", "but only", "below the", "CRC-32C", "above the limit", "LogAppendTime",
             "has magic", "compression codec", "invalid record count", "but lastOffsetDelta",
             "impossible for", "control batch", "invalid baseSequence", "holds no record",
             "left in the records", "length unreadable", "is malformed", "fields take",
             "negative header count", "negative key length", "expected", "outside 0..", "bytes remain")
_EDGES = 128
_namespace: dict[str, Any] = {}
# (`pass` on a line of its own, so that the minimizer's line tracing tells the branches apart too)
exec("def _edge(i):\n" + "".join(f"    {'if' if k == 0 else 'elif'} i == {k}:\n        pass\n"  # noqa: S102
                                  for k in range(_EDGES)), _namespace)
_edge: Callable[[int], None] = _namespace["_edge"]


def _refusal(exc: core_records.RecordBatchError, repaired: int) -> None:
    text = str(exc)
    kind = next((i for i, words in enumerate(_REFUSALS) if words in text), len(_REFUSALS))
    _edge(kind + 24 * repaired + (48 if exc.batch_index > 0 else 0))


def _outcome(info: core_records.AppendInfo) -> None:
    _edge(100 + info.compression)
    _edge(105 + min(info.batch_count, 3))
    _edge(109 + info.is_transactional + 2 * info.is_control)
    _edge(113 + (info.producer_id >= 0) + 2 * (info.max_timestamp < 0))
    _edge(117 + min(info.record_count, 2))


def _builder_batches() -> Iterator[bytearray]:
    recs = [(b"key-%d" % i, b"value-%d" % i * (i + 1), 1_700_000_000_000 + i) for i in range(5)]
    for codec in CODECS:
        yield batches.build_batch(recs, codec=codec)
        yield batches.build_batch([(None, None, 5)], codec=codec, producer_id=42, producer_epoch=1,
                                  base_sequence=7)
        yield batches.build_batch([(b"", b"x" * 300, -1)], codec=codec, attributes=batches.TRANSACTIONAL,
                                  producer_id=9, producer_epoch=0, base_sequence=0)
    yield batches.control_batch(9, 0, True, 3, 1_700_000_000_000)


def seed_batches() -> Iterator[bytes]:
    built = list(_builder_batches())
    yield from map(bytes, built)
    yield bytes(built[0] + built[3])  # two batches in one buffer


# ------------------------------------------------------------------------------------------------
# 3. legacy message sets (magic 0 and 1) to magic-2 batches and back

LEGACY_ALLOWED = (errors.KafkaError, core_records.RecordBatchError)


def _fix_legacy_crcs(buf: bytearray) -> None:
    """Recompute the CRC of each top-level entry, so mutations get past the CRC check."""
    pos = 0
    while pos + 17 <= len(buf):
        (size,) = struct.unpack_from(">i", buf, pos + 8)
        if size < 5 or pos + 12 + size > len(buf):
            return
        struct.pack_into(">I", buf, pos + 12, zlib.crc32(buf[pos + 16:pos + 12 + size]))
        pos += 12 + size


def run_legacy(data: bytes) -> None:
    """The first byte picks the direction (bit 0: up, as Produce v0-2; else down, as Fetch v0-3),
    whether to repair CRCs (bit 1) and, down, the magic (bit 2); the rest is the message set or the
    stored batches."""
    if not data:
        return
    mode, payload = data[0], bytearray(data[1:])
    if mode & 1:
        if mode & 2:
            _fix_legacy_crcs(payload)
        legacy.read_records(payload, allow_partial=True)
        if legacy.is_legacy(payload):
            batch = legacy.up_convert(payload)
            # what up-conversion produces must pass the produce path's validation
            core_records.validate(batch, len(batch) + 1, True)
    else:
        magic = (mode >> 2) & 1
        out = legacy.down_convert(payload, magic, 0, 1 << 20, True)
        # and what down-conversion produces must read back as a message set
        for entry in legacy.parse_entries(out):
            if entry.magic != magic or entry.codec != NONE:
                raise AssertionError(f"down_convert wrote {entry}")


def seed_legacy() -> Iterator[bytes]:
    recs = [legacy.LegacyRecord(i, 1_700_000_000_000 + i, b"k%d" % i if i % 2 else None, b"v" * i)
            for i in range(4)]
    for magic in (0, 1):
        plain = b"".join(legacy.encode_message(r.offset, r.key, r.value, magic=magic, timestamp=r.timestamp)
                         for r in recs)
        yield bytes([1]) + plain
        yield bytes([3]) + plain
        for codec in (GZIP, SNAPPY, LZ4):
            wrapped = legacy.encode_wrapper(codec, recs, magic=magic)
            yield bytes([1]) + wrapped
            yield bytes([3]) + wrapped + plain
    for stored in _builder_batches():
        yield bytes([0]) + bytes(stored)
        yield bytes([4]) + bytes(stored)


# ------------------------------------------------------------------------------------------------
# 4. compressed batches: decompression and the record walk of every codec

def _fix_batch(buf: bytearray) -> None:
    """Make the length field and CRC match the bytes, so mutations reach the decompressor."""
    if len(buf) >= core_records.HEADER_SIZE:
        struct.pack_into(">i", buf, 8, len(buf) - 12)
        batches.set_crc(buf)


def run_compressed(data: bytes) -> None:
    buf = bytearray(data)
    _fix_batch(buf)
    try:
        core_records.validate(buf, 1 << 20, False)
    except core_records.RecordBatchError:
        return
    for batch in batches.iter_batches(buf):
        section = batches.records_section(batch.data, batch.header)
        for _record in batch.records():  # every record parsed (the cleaner's and down-conversion's walk)
            pass
        core_records.first_record_at_or_after(batch.data, 0, section)
        if batch.header.is_control:
            batches.read_marker(batch.data)


def seed_compressed() -> Iterator[bytes]:
    return map(bytes, _builder_batches())


# ------------------------------------------------------------------------------------------------
# 5. the embedded metadata store's journal, replayed when the store opens

_JOURNAL_HEADER = b"KBZKJRNL" + struct.pack(">I", 1)
_SNAPSHOT_HEADER = b"KBZKSNAP"
_store_dir: Path | None = None


def _journal_dir() -> Path:
    global _store_dir
    if _store_dir is None:
        # bench.reliability.fuzz names a directory it removes itself (libFuzzer exits without atexit handlers)
        base = os.environ.get("KBROKER_FUZZ_TMP") or ("/dev/shm" if Path("/dev/shm").is_dir() else None)
        _store_dir = Path(tempfile.mkdtemp(prefix="kbroker-fuzz-journal-", dir=base))
        atexit.register(shutil.rmtree, _store_dir, True)
    return _store_dir


def _fix_journal_crcs(buf: bytearray) -> None:
    pos = 0
    while pos + 8 <= len(buf):
        (length,) = struct.unpack_from(">I", buf, pos)
        if pos + 8 + length > len(buf):
            return
        struct.pack_into(">I", buf, pos + 4, zlib.crc32(buf[pos + 8:pos + 8 + length]))
        pos += 8 + length


def _fix_snapshot_crc(raw: bytearray) -> bytearray:
    if len(raw) >= 12:
        struct.pack_into(">I", raw, len(raw) - 4, zlib.crc32(raw[8:-4]))
    return raw


def run_journal(data: bytes) -> None:
    """The first byte: bit 0 repairs the CRCs, bit 1 writes the input as the whole file (header
    included), bit 2 makes it the snapshot file instead (its magic and version kept, the rest
    the input's); the rest is the journal (or snapshot) after its header. The store opens on it,
    which loads the snapshot and replays the journal, its tree is checked, and it is closed."""
    if not data:
        return
    mode, payload = data[0], bytearray(data[1:])
    directory = _journal_dir()
    (directory / "snapshot").unlink(missing_ok=True)
    (directory / "journal").unlink(missing_ok=True)
    if mode & 4:
        raw = payload if mode & 2 else bytearray(_SNAPSHOT_HEADER) + payload
        (directory / "snapshot").write_bytes(_fix_snapshot_crc(raw) if mode & 1 else raw)
    else:
        if mode & 1:
            _fix_journal_crcs(payload)
        (directory / "journal").write_bytes(bytes(payload) if mode & 2 else _JOURNAL_HEADER + payload)
    # No session is connected: each would start a thread, and starting threads on a loaded
    # machine, not the reader, was what ran over a second.
    server = EmbeddedServer(directory, fsync=False, clock_ms=lambda: 1_700_000_000_000)
    try:
        _check_tree(server)
    finally:
        server.close()


def _check_tree(server: EmbeddedServer) -> None:
    """What a loaded store must hold whatever the files said: valid paths only, each node listed
    by its parent and each listed child present (white-box: the tree is private)."""
    nodes = server._nodes  # noqa: SLF001
    for path, node in nodes.items():
        if path != "/":
            validate_path(path)  # ValueError: not an exception the contract allows
            parent_path, name = split(path)
            if parent_path not in nodes or name not in nodes[parent_path].children:
                raise AssertionError(f"{path} is not listed by its parent")
        for child in node.children:
            if join(path, child) not in nodes:
                raise AssertionError(f"{path} lists a missing child {child!r}")


def seed_journal() -> Iterator[bytes]:
    """Journals the store itself wrote: creates (persistent and ephemeral), sets, deletes, multi."""
    with tempfile.TemporaryDirectory() as tmp:
        server = EmbeddedServer(tmp, fsync=False, clock_ms=lambda: 1_700_000_000_000)
        try:
            store = server.connect()
            store.create("/brokers", b"")
            store.create("/brokers/ids", None)
            store.create("/brokers/ids/1", b'{"host":"h"}', ephemeral=True)
            store.create("/seq/n-", b"x", sequence=True, makepath=True)
            store.set("/brokers", b"v2")
            store.multi([CreateOp("/a", b"1"), SetDataOp("/a", b"2"), CreateOp("/a/b", None),
                         DeleteOp("/a/b")])
            store.delete("/seq", recursive=True)
            journal = (Path(tmp) / "journal").read_bytes()
            server.snapshot()
            snapshot = (Path(tmp) / "snapshot").read_bytes()
        finally:
            server.close()
    body = journal[len(_JOURNAL_HEADER):]
    yield bytes([1]) + body
    yield bytes([0]) + body
    yield bytes([2]) + journal
    yield bytes([5]) + snapshot[len(_SNAPSHOT_HEADER):]
    yield bytes([6]) + snapshot


# ------------------------------------------------------------------------------------------------

TARGETS: dict[str, Target] = {t.name: t for t in (
    Target("request", "decode_request on a whole request frame (header + body), every API key and version",
           run_request, seed_requests, (ProtocolError,), request_decoders),
    Target("batch_validation", "kbroker._core.records: validate, scan_batches, parse_header, assign_offsets",
           run_batch_validation, seed_batches, (core_records.RecordBatchError,), lambda: [_edge]),
    Target("legacy", "kbroker.log.legacy: message sets v0/v1 up to a v2 batch, v2 batches down to v0/v1",
           run_legacy, seed_legacy, LEGACY_ALLOWED),
    Target("compressed", "batches of every codec: decompression, the record walk, control markers",
           run_compressed, seed_compressed, (errors.KafkaError, core_records.RecordBatchError)),
    Target("journal", "zk_compat.embedded: open a store on a journal or snapshot (both read at start), check its tree",
           run_journal, seed_journal, (RuntimeError,)),
)}
