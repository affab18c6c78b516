"""Record batch v2 (magic 2): header parsing, validation and offset assignment in place.

Record data is never decoded into Python objects. Kafka's byte layout (all big-endian):
baseOffset i64 @0, batchLength i32 @8, partitionLeaderEpoch i32 @12, magic i8 @16, crc u32 @17
(CRC-32C of bytes 21..end), attributes i16 @21, lastOffsetDelta i32 @23, baseTimestamp i64 @27,
maxTimestamp i64 @35, producerId i64 @43, producerEpoch i16 @51, baseSequence i32 @53,
recordCount i32 @57, records @61.
"""
from typing import Final

Buffer = bytes | bytearray | memoryview
WritableBuffer = bytearray | memoryview

HEADER_SIZE: Final[int]  # 61
LOG_OVERHEAD: Final[int]  # 12: baseOffset + batchLength
NO_TIMESTAMP: Final[int]  # -1

class RecordBatchError(ValueError):
    """A batch Kafka would refuse. ``code`` is the Kafka error code, ``position`` the byte offset
    of the offending batch within the buffer, ``batch_index`` its ordinal."""
    code: int
    position: int
    batch_index: int

class CorruptRecordError(RecordBatchError): ...        # code 2  CORRUPT_MESSAGE (CRC, length, truncation)
class MessageTooLargeError(RecordBatchError): ...      # code 10 MESSAGE_TOO_LARGE
class InvalidTimestampError(RecordBatchError): ...     # code 32 INVALID_TIMESTAMP
class InvalidRecordError(RecordBatchError): ...        # code 87 INVALID_RECORD (magic, counts, control bit, ...)

class BatchHeader:
    """Read-only view of one batch header (values copied out; no reference to the buffer)."""
    position: int
    base_offset: int
    batch_length: int        # bytes after the length field
    size: int                # whole batch: batch_length + 12
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    compression: int         # attributes & 7
    timestamp_type: int      # (attributes >> 3) & 1: 0 CreateTime, 1 LogAppendTime
    is_transactional: bool
    is_control: bool
    last_offset_delta: int
    @property
    def last_offset(self) -> int: ...     # base_offset + last_offset_delta
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    @property
    def last_sequence(self) -> int: ...   # base_sequence + last_offset_delta, wrapping at INT32_MAX; -1 if none
    record_count: int

class AppendInfo:
    """What validate() learnt about a buffer of batches."""
    batch_count: int
    offset_count: int          # sum of (last_offset_delta + 1): offsets the append will take
    record_count: int          # sum of record_count
    size: int                  # bytes
    first_timestamp: int       # base_timestamp of the first batch
    max_timestamp: int
    offset_delta_of_max_timestamp: int  # relative to the first assigned offset
    producer_id: int           # of the first batch
    producer_epoch: int
    base_sequence: int
    last_sequence: int         # of the last batch
    is_transactional: bool
    is_control: bool
    compression: int

def crc32c(buf: Buffer, crc: int = 0) -> int:
    """CRC-32C (Castagnoli), hardware-accelerated when the CPU has SSE4.2."""

def parse_header(buf: Buffer, position: int = 0, legacy: bool = False) -> BatchHeader:
    """Parse the header at ``position`` (no CRC check). CorruptRecordError if fewer than 61 bytes
    remain or the length field is impossible; InvalidRecordError if magic != 2."""

def validate(buf: Buffer, max_batch_bytes: int = 1048588, from_client: bool = True) -> AppendInfo:
    """Validate every batch in ``buf`` as Kafka's produce path does, without copying.

    Checks: whole batches only (no trailing bytes), batchLength sane, magic 2, CRC-32C, codec 0-4,
    size <= max_batch_bytes, for uncompressed batches that the records exactly fill the batch and
    their count matches. With ``from_client``: recordCount == lastOffsetDelta + 1, record offset
    deltas are 0..n-1 (uncompressed), no control bit, no LogAppendTime, producerId >= 0 implies
    baseSequence >= 0. Raises the matching RecordBatchError subclass."""

def assign_offsets(buf: WritableBuffer, base_offset: int, partition_leader_epoch: int = -1,
                   log_append_time_ms: int = -1) -> int:
    """Rewrite baseOffset and partitionLeaderEpoch of each batch in place, consecutive from
    ``base_offset``; returns the next offset. With ``log_append_time_ms >= 0`` also set the
    LogAppendTime attribute bit and maxTimestamp, and recompute the CRC. Call after validate()."""

def scan_batches(buf: Buffer, verify_crc: bool = True) -> tuple[list[BatchHeader], int, int]:
    """Walk batches from the start of ``buf`` (e.g. a segment being recovered).
    Returns (headers, valid_bytes, status): status 0 = ended exactly at the end of ``buf``,
    1 = stopped at an incomplete batch (more bytes may complete it), 2 = stopped at a corrupt batch
    (bad length, magic or CRC). ``valid_bytes`` is the length of the whole-and-valid prefix."""

def first_record_at_or_after(batch: Buffer, target_timestamp: int,
                             records: Buffer | None = None) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record with timestamp >= target, or None; otherwise as
    first_offset_at_or_after."""

def first_offset_at_or_after(batch: Buffer, target_timestamp: int, records: Buffer | None = None) -> int:
    """Offset of the first record of this batch with timestamp >= target (LogAppendTime batches
    use maxTimestamp for every record), or -1 if none. For compressed batches pass the
    decompressed records section as ``records``."""

KEYLESS_ON_COMPACTED: Final[int]    # 1: INVALID_RECORD
TIMESTAMP_OUT_OF_RANGE: Final[int]  # 2: INVALID_TIMESTAMP
CLAIMS_LOG_APPEND_TIME: Final[int]  # 3: INVALID_TIMESTAMP

def record_problems(batch: Buffer, records: Buffer | None = None, compacted: bool = False,
                    check_timestamps: bool = False, min_timestamp: int = 0,
                    max_timestamp: int = ...) -> list[tuple[int, int, int, int, int, int]]:
    """Records of one client batch Kafka's append refuses one by one (LogValidator.validateRecord):
    ``(index, problem, offset_delta, timestamp, key_length, value_length)``, lengths -1 when null,
    the key rule first. A compressed batch needs its decompressed section as ``records``, whose
    structure is checked as validate() checks an uncompressed batch (RecordBatchError)."""
