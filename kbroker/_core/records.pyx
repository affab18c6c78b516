# cython: language_level=3, embedsignature=True
"""Record batch v2 (magic 2): header parsing, validation and in-place offset assignment.

Everything works on raw pointers obtained through the buffer protocol (``Py_buffer``, no copies)
and checks bounds by hand; no Python object is created per record. The hot loops run without the
GIL once a buffer is big enough for the release to pay off. Layout constants and the big-endian
helpers are in records.pxd.
"""
from cpython.buffer cimport PyBUF_SIMPLE, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport INT32_MAX, INT64_MAX, int32_t, int64_t, uint32_t, uint64_t

cdef extern from "crc32c_impl.h":
    void kb_crc32c_init() nogil
    uint32_t kb_crc32c(uint32_t crc, const unsigned char* p, size_t n) nogil
    void kb_crc32c_set_force_software(int on) nogil
    int kb_crc32c_using_hw() nogil

kb_crc32c_init()

from zlib import crc32 as _zlib_crc32  # magic 0/1 entries carry CRC-32 (IEEE), not CRC-32C

HEADER_SIZE = BATCH_HEADER_SIZE
LOG_OVERHEAD = BATCH_LOG_OVERHEAD
NO_TIMESTAMP = -1

# Below this many bytes, releasing and re-taking the GIL costs more than it frees up.
cdef Py_ssize_t NOGIL_BYTES = 65536


# ------------------------------------------------------------------------------------------------
# Errors

class RecordBatchError(ValueError):
    """A batch Kafka would refuse. ``code`` is the Kafka error code, ``position`` the byte offset
    of the offending batch within the buffer (-1 if unknown), ``batch_index`` its ordinal (-1 if
    unknown, e.g. from parse_header)."""
    code = -1

    def __init__(self, message, position=-1, batch_index=-1):
        super().__init__(message)
        self.position = position
        self.batch_index = batch_index

    def __reduce__(self):
        return (type(self), (str(self), self.position, self.batch_index))


class CorruptRecordError(RecordBatchError):
    """CORRUPT_MESSAGE: CRC mismatch, impossible length, truncation."""
    code = 2


class MessageTooLargeError(RecordBatchError):
    """MESSAGE_TOO_LARGE: a batch above the topic's max.message.bytes."""
    code = 10


class InvalidTimestampError(RecordBatchError):
    """INVALID_TIMESTAMP: e.g. a client batch claiming LogAppendTime."""
    code = 32


class InvalidRecordError(RecordBatchError):
    """INVALID_RECORD: magic, codec, counts, control bit, record structure."""
    code = 87


# A problem found by the nogil cores, turned into an exception by _raise_problem. a..d are
# reason-specific numbers for the message.
cdef enum Reason:
    R_OK = 0
    # CorruptRecordError
    R_SHORT               # b = available (< 12)
    R_TRUNCATED           # a = declared size, b = available
    R_TOO_SMALL           # a = declared size, b = available
    R_CRC                 # a = stored, b = computed, c = covered bytes
    # MessageTooLargeError
    R_TOO_LARGE           # a = size, b = limit
    # InvalidTimestampError
    R_LOG_APPEND_TIME
    # InvalidRecordError
    R_MAGIC               # a = magic
    R_CODEC               # a = codec, b = attributes
    R_BAD_COUNT           # a = record count
    R_COUNT_MISMATCH      # a = record count, b = lastOffsetDelta
    R_OFFSET_RANGE        # a = lastOffsetDelta, b = record count
    R_CONTROL
    R_NO_SEQUENCE         # a = producer id, b = base sequence
    R_EMPTY
    # InvalidRecordError, record level: a = record index, b = record's byte offset in the batch
    R_REC_OVERRUN         # c = declared length, d = bytes left in the section
    R_REC_LENGTH_VARINT   # d = bytes left in the section
    R_REC_MALFORMED       # c = declared length
    R_REC_SIZE            # c = declared length, d = bytes its fields take
    R_REC_HEADER_COUNT    # c = header count
    R_REC_HEADER_KEY      # c = header key length
    R_REC_OFFSET          # c = offset delta, d = expected
    R_REC_OFFSET_RANGE    # c = offset delta, d = lastOffsetDelta
    R_REC_TRAILING        # a = record count, c = leftover bytes


cdef struct Problem:
    int reason
    Py_ssize_t position
    Py_ssize_t batch_index
    int64_t a
    int64_t b
    int64_t c
    int64_t d


cdef inline int _fail(Problem* pr, int reason, int64_t a, int64_t b, int64_t c, int64_t d) noexcept nogil:
    pr.reason = reason
    pr.a = a
    pr.b = b
    pr.c = c
    pr.d = d
    return -1


# The message of each Reason: a str.format template over ``where`` (the batch), ``rec`` (where,
# plus the record a and its byte offset b), a..d (the Problem's numbers) and ``batch_length``
# (a - 12: the batchLength field of a declared size a). The exception class follows from the
# Reason's group (see the enum).
_PROBLEM_TEXT = {
    R_SHORT: "{where} is truncated: only {b} bytes available, the offset and length fields alone "
             "need {log_overhead}",
    R_TRUNCATED: "{where} declares {a} bytes (batchLength {batch_length}) but only {b} bytes are available",
    R_TOO_SMALL: "{where} declares {a} bytes (batchLength {batch_length}), below the "
                 "{header_size}-byte v2 batch header ({b} bytes available)",
    R_CRC: "{where} fails its CRC-32C check: stored 0x{a:08x}, computed 0x{b:08x} over {c} bytes",
    R_TOO_LARGE: "{where} is {a} bytes, above the limit of {b} bytes",
    R_LOG_APPEND_TIME: "{where} claims LogAppendTime; producers must send CreateTime",
    R_MAGIC: "{where} has magic {a}; only magic 2 record batches are accepted",
    R_CODEC: "{where} uses unknown compression codec {a} (attributes 0x{b:04x})",
    R_BAD_COUNT: "{where} has invalid record count {a}",
    R_COUNT_MISMATCH: "{where} has record count {a} but lastOffsetDelta {b} (a client batch has "
                      "lastOffsetDelta + 1 records)",
    R_OFFSET_RANGE: "{where} has lastOffsetDelta {a}, impossible for {b} records",
    R_CONTROL: "{where} is a control batch; clients may not write control records",
    R_NO_SEQUENCE: "{where} has producerId {a} but invalid baseSequence {b}",
    R_EMPTY: "produce data holds no record batch",
    R_REC_OVERRUN: "{rec} declares {c} bytes but only {d} are left in the records section",
    R_REC_LENGTH_VARINT: "{rec}: record length unreadable, {d} bytes left in the records section",
    R_REC_MALFORMED: "{rec} is malformed: a field runs past its declared {c} bytes or a varint is too long",
    R_REC_SIZE: "{rec} declares {c} bytes but its fields take {d}",
    R_REC_HEADER_COUNT: "{rec} has negative header count {c}",
    R_REC_HEADER_KEY: "{rec} has a header with negative key length {c}",
    R_REC_OFFSET: "{rec} has offsetDelta {c}, expected {d}",
    R_REC_OFFSET_RANGE: "{rec} has offsetDelta {c}, outside 0..lastOffsetDelta ({d})",
    R_REC_TRAILING: "{where}: {c} bytes remain after the {a} declared records",
}


cdef int _raise_problem(const Problem* pr) except -1:
    cdef int r = pr.reason
    cdef object a = pr.a, b = pr.b
    pos, idx = pr.position, pr.batch_index
    where = f"batch {idx} at position {pos}" if idx >= 0 else f"batch at position {pos}"
    if R_SHORT <= r <= R_CRC:
        error = CorruptRecordError
    elif r == R_TOO_LARGE:
        error = MessageTooLargeError
    elif r == R_LOG_APPEND_TIME:
        error = InvalidTimestampError
    else:
        error = InvalidRecordError
    text = _PROBLEM_TEXT.get(r, "{where}: unknown problem {reason}")
    raise error(text.format(where=where, rec=f"{where}, record {a} (byte {b} of the batch)",
                            a=a, b=b, c=pr.c, d=pr.d, reason=r,
                            batch_length=a - BATCH_LOG_OVERHEAD, log_overhead=BATCH_LOG_OVERHEAD,
                            header_size=BATCH_HEADER_SIZE), pos, idx)


# ------------------------------------------------------------------------------------------------
# Buffer access

cdef inline int _acquire(object obj, Py_buffer* view, bint writable) except -1:
    # PyBUF_SIMPLE asks for a contiguous byte view whatever the item format; non-contiguous views
    # raise BufferError, read-only exporters raise BufferError when writable is requested.
    return PyObject_GetBuffer(obj, view, PyBUF_WRITABLE if writable else PyBUF_SIMPLE)


# ------------------------------------------------------------------------------------------------
# CRC-32C

cdef uint32_t crc32c_update(uint32_t crc, const unsigned char* p, size_t n) noexcept nogil:
    return kb_crc32c(crc, p, n)


cdef inline uint32_t _crc(uint32_t crc, const unsigned char* p, size_t n) noexcept:
    """CRC with the GIL released for big inputs (called with the GIL held)."""
    if n >= <size_t>NOGIL_BYTES:
        with nogil:
            crc = kb_crc32c(crc, p, n)
        return crc
    return kb_crc32c(crc, p, n)


def crc32c(buf, uint32_t crc=0):
    """CRC-32C (Castagnoli) of ``buf``, continuing from ``crc`` (a previous result, 0 to start).
    Hardware-accelerated (SSE4.2, three interleaved streams) when the CPU allows."""
    cdef Py_buffer view
    _acquire(buf, &view, False)
    try:
        return _crc(crc, <const unsigned char*>view.buf, <size_t>view.len)
    finally:
        PyBuffer_Release(&view)


def _force_software_crc(bint on):
    """Test hook: use the portable slicing-by-8 path even when SSE4.2 is available."""
    kb_crc32c_set_force_software(on)


def _crc_backend():
    """'sse4.2' or 'software': the CRC path currently in use."""
    return "sse4.2" if kb_crc32c_using_hw() else "software"


def _set_nogil_bytes(Py_ssize_t n):
    """Bench hook: the size from which CRCs, validate and assign_offsets release the GIL (65536; a size larger
    than any buffer keeps it held). Returns the previous one."""
    global NOGIL_BYTES
    previous, NOGIL_BYTES = NOGIL_BYTES, n
    return previous


# ------------------------------------------------------------------------------------------------
# Headers

cdef class BatchHeader:
    """Read-only view of one batch header (values copied out; no reference to the buffer)."""

    @property
    def size(self):
        """Whole batch in bytes: batch_length + 12."""
        return <int64_t>self.batch_length + BATCH_LOG_OVERHEAD

    @property
    def compression(self):
        return self.attributes & ATTR_CODEC_MASK

    @property
    def timestamp_type(self):
        """0 CreateTime, 1 LogAppendTime."""
        return (self.attributes >> 3) & 1

    @property
    def is_transactional(self):
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self):
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def last_offset(self):
        return self.base_offset + self.last_offset_delta

    @property
    def last_sequence(self):
        """base_sequence + last_offset_delta, wrapping past INT32_MAX to 0; -1 without a sequence."""
        return _last_sequence(self.base_sequence, self.last_offset_delta)

    def __repr__(self):
        return (f"BatchHeader(position={self.position}, base_offset={self.base_offset}, "
                f"size={self.size}, records={self.record_count}, "
                f"last_offset_delta={self.last_offset_delta}, attributes=0x{self.attributes:x}, "
                f"producer_id={self.producer_id}, base_sequence={self.base_sequence})")


cdef inline int32_t _last_sequence(int32_t base_sequence, int32_t last_offset_delta) noexcept nogil:
    # Kafka's DefaultRecordBatch.incrementSequence: sequences wrap from INT32_MAX to 0.
    cdef int64_t s
    if base_sequence < 0:
        return -1
    s = <int64_t>base_sequence + last_offset_delta
    if s > INT32_MAX:
        s -= <int64_t>INT32_MAX + 1
    return <int32_t>s


cdef BatchHeader header_from_ptr(const unsigned char* p, Py_ssize_t position):
    cdef BatchHeader h = BatchHeader.__new__(BatchHeader)
    h.position = position
    h.base_offset = be_i64(p + OFF_BASE_OFFSET)
    h.batch_length = be_i32(p + OFF_BATCH_LENGTH)
    h.partition_leader_epoch = be_i32(p + OFF_LEADER_EPOCH)
    h.magic = <signed char>p[OFF_MAGIC]
    h.crc = be_u32(p + OFF_CRC)
    h.attributes = be_i16(p + OFF_ATTRIBUTES)
    h.last_offset_delta = be_i32(p + OFF_LAST_OFFSET_DELTA)
    h.base_timestamp = be_i64(p + OFF_BASE_TIMESTAMP)
    h.max_timestamp = be_i64(p + OFF_MAX_TIMESTAMP)
    h.producer_id = be_i64(p + OFF_PRODUCER_ID)
    h.producer_epoch = be_i16(p + OFF_PRODUCER_EPOCH)
    h.base_sequence = be_i32(p + OFF_BASE_SEQUENCE)
    h.record_count = be_i32(p + OFF_RECORD_COUNT)
    return h


# Legacy message set entries (magic 0 and 1, Kafka's LegacyRecord): offset i64, size i32, crc u32,
# magic i8, attributes i8, [timestamp i64: magic 1], key, value. The 12-byte prefix and the magic
# at byte 16 are where a v2 batch has them, so a log walk tells the two apart by that byte.
cdef enum:
    LEGACY_OFF_CRC = 12
    LEGACY_OFF_ATTRIBUTES = 17
    LEGACY_OFF_TIMESTAMP = 18
    LEGACY_MIN_SIZE_V0 = 14      # size field minimum: crc + magic + attributes + key and value lengths
    LEGACY_MIN_SIZE_V1 = 22      # the same plus the timestamp


cdef inline int32_t _legacy_min_size(int magic) noexcept nogil:
    return LEGACY_MIN_SIZE_V1 if magic == 1 else LEGACY_MIN_SIZE_V0


cdef BatchHeader legacy_header_from_ptr(const unsigned char* p, Py_ssize_t position):
    """A BatchHeader describing one whole magic 0/1 entry as Kafka's LegacyRecordBatch does: one
    shallow entry whose offset is its last offset (a compressed wrapper carries the offset of its
    last inner message, so base and last offset are both that offset here), its timestamp the max
    timestamp, no producer, no leader epoch. ``p`` must hold the entry's fixed fields."""
    cdef BatchHeader h = BatchHeader.__new__(BatchHeader)
    cdef int magic = p[OFF_MAGIC]
    h.position = position
    h.base_offset = be_i64(p + OFF_BASE_OFFSET)
    h.batch_length = be_i32(p + OFF_BATCH_LENGTH)
    h.partition_leader_epoch = -1
    h.magic = magic
    h.crc = be_u32(p + LEGACY_OFF_CRC)
    # Codec bits 0-2 and (magic 1) the LogAppendTime bit 3 sit where a v2 batch has them.
    h.attributes = p[LEGACY_OFF_ATTRIBUTES] & (0x0f if magic == 1 else ATTR_CODEC_MASK)
    h.last_offset_delta = 0
    h.base_timestamp = be_i64(p + LEGACY_OFF_TIMESTAMP) if magic == 1 else -1
    h.max_timestamp = h.base_timestamp
    h.producer_id = -1
    h.producer_epoch = -1
    h.base_sequence = -1
    h.record_count = 1
    return h


def legacy_crc_ok(buf, Py_ssize_t position, Py_ssize_t size):
    """Does the magic 0/1 entry of ``size`` bytes at ``position`` pass its CRC-32 (zlib's, over
    magic..end)?"""
    with memoryview(buf) as mv, mv.cast("B") as flat:
        stored = int.from_bytes(flat[position + LEGACY_OFF_CRC:position + OFF_MAGIC], "big")
        return stored == (_zlib_crc32(flat[position + OFF_MAGIC:position + size]) & 0xFFFFFFFF)


def parse_header(buf, Py_ssize_t position=0, bint legacy=False):
    """Parse the header at ``position`` (no CRC check, and the rest of the batch need not be in
    ``buf``, so a 61-byte read is enough). CorruptRecordError if fewer than 61 bytes remain or
    the length field is impossible; InvalidRecordError if magic != 2. Errors carry
    batch_index -1. With ``legacy`` (the log's own reads) a magic 0/1 entry is described as
    ``legacy_header_from_ptr`` does; its fixed fields (26 or 34 bytes) must be in ``buf``."""
    cdef Py_buffer view
    cdef Problem pr
    cdef const unsigned char* p
    cdef Py_ssize_t remaining
    cdef int32_t length
    if position < 0:
        raise ValueError(f"negative position {position}")
    _acquire(buf, &view, False)
    try:
        remaining = view.len - position if position <= view.len else 0
        pr.position = position
        pr.batch_index = -1
        p = <const unsigned char*>view.buf + position
        if legacy and remaining > OFF_MAGIC and (p[OFF_MAGIC] == 0 or p[OFF_MAGIC] == 1):
            length = be_i32(p + OFF_BATCH_LENGTH)
            if length < _legacy_min_size(p[OFF_MAGIC]):
                _fail(&pr, R_TOO_SMALL, <int64_t>length + BATCH_LOG_OVERHEAD, remaining, 0, 0)
                _raise_problem(&pr)
            if remaining < BATCH_LOG_OVERHEAD + _legacy_min_size(p[OFF_MAGIC]):
                _fail(&pr, R_TRUNCATED, <int64_t>length + BATCH_LOG_OVERHEAD, remaining, 0, 0)
                _raise_problem(&pr)
            return legacy_header_from_ptr(p, position)
        if remaining < BATCH_HEADER_SIZE:
            if remaining < BATCH_LOG_OVERHEAD:
                _fail(&pr, R_SHORT, 0, remaining, 0, 0)
            else:
                _fail(&pr, R_TRUNCATED, <int64_t>be_i32(p + OFF_BATCH_LENGTH) + BATCH_LOG_OVERHEAD,
                      remaining, 0, 0)
            _raise_problem(&pr)
        # Magic first: a legacy message set is better reported as "magic 0" than as too short.
        if p[OFF_MAGIC] != MAGIC_V2:
            _fail(&pr, R_MAGIC, <signed char>p[OFF_MAGIC], 0, 0, 0)
            _raise_problem(&pr)
        length = be_i32(p + OFF_BATCH_LENGTH)
        if length < BATCH_HEADER_SIZE - BATCH_LOG_OVERHEAD:
            _fail(&pr, R_TOO_SMALL, <int64_t>length + BATCH_LOG_OVERHEAD, remaining, 0, 0)
            _raise_problem(&pr)
        return header_from_ptr(p, position)
    finally:
        PyBuffer_Release(&view)


# ------------------------------------------------------------------------------------------------
# Varints and records (Kafka's zigzag encoding; ByteUtils.readVarint/readVarlong semantics)

cdef inline const unsigned char* _uvarint(const unsigned char* p, const unsigned char* end,
                                          unsigned int max_shift, uint64_t* out) noexcept nogil:
    """Unsigned base-128 varint of at most ``max_shift // 7 + 1`` bytes (bits shifted beyond 64
    are dropped); NULL if it runs past ``end`` or is longer. NULL in, NULL out, so a chain of
    reads needs one check at its end."""
    cdef uint64_t raw = 0
    cdef unsigned int shift = 0
    cdef unsigned char b
    if p == NULL:
        return NULL
    while True:
        if p >= end:
            return NULL
        b = p[0]
        p += 1
        raw |= (<uint64_t>(b & 0x7f)) << shift
        if not (b & 0x80):
            break
        shift += 7
        if shift > max_shift:
            return NULL
    out[0] = raw
    return p


cdef inline const unsigned char* _varint(const unsigned char* p, const unsigned char* end,
                                         int32_t* out) noexcept nogil:
    """Zigzag varint of at most 5 bytes (see _uvarint; 0 in ``out`` on failure). Like Java,
    bits shifted beyond 32 are dropped."""
    cdef uint64_t wide = 0
    cdef uint32_t raw
    p = _uvarint(p, end, 28, &wide)
    raw = <uint32_t>wide
    out[0] = <int32_t>((raw >> 1) ^ (0u - (raw & 1u)))
    return p


cdef inline const unsigned char* _varlong(const unsigned char* p, const unsigned char* end,
                                          int64_t* out) noexcept nogil:
    """Zigzag varlong of at most 10 bytes (see _uvarint)."""
    cdef uint64_t raw = 0
    p = _uvarint(p, end, 63, &raw)
    out[0] = <int64_t>((raw >> 1) ^ (<uint64_t>0 - (raw & 1)))
    return p


cdef inline const unsigned char* _skip_bytes(const unsigned char* p, const unsigned char* end,
                                             int32_t* length) noexcept nogil:
    """Skip a varint-length-prefixed byte field (a negative length is null: nothing follows);
    NULL if it runs past ``end``. NULL in, NULL out. The length is left in ``length``."""
    p = _varint(p, end, length)
    if p == NULL or length[0] <= 0:
        return p
    if length[0] > end - p:
        return NULL
    return p + length[0]


cdef struct RecordInfo:
    int64_t timestamp_delta
    int32_t offset_delta
    int32_t key_length  # negative: null
    int32_t value_length
    int reason          # Reason on failure
    int64_t c           # Problem.c / .d on failure
    int64_t d


cdef const unsigned char* _next_record(const unsigned char* p, const unsigned char* end,
                                       RecordInfo* r) noexcept nogil:
    """Parse the record at ``p`` (bounded by ``end``) as Kafka's DefaultRecord.readFrom does:
    length, attributes, timestampDelta, offsetDelta, key, value, headers. Returns the record's
    end, or NULL with r.reason set. Negative key/value lengths mean null (Kafka accepts any
    negative there); negative header counts and header key lengths are invalid."""
    cdef int32_t length, n, count, i
    cdef const unsigned char* rec_end
    cdef const unsigned char* body
    cdef const unsigned char* start = p
    p = _varint(p, end, &length)
    if p == NULL:
        r.reason, r.c, r.d = R_REC_LENGTH_VARINT, 0, end - start
        return NULL
    if length < 0 or length > end - p:
        r.reason, r.c, r.d = R_REC_OVERRUN, length, end - p
        return NULL
    body = p
    rec_end = p + length
    r.reason, r.c = R_REC_MALFORMED, length
    if p >= rec_end:
        return NULL
    p += 1  # attributes: unused
    p = _varlong(p, rec_end, &r.timestamp_delta)
    p = _varint(p, rec_end, &r.offset_delta)
    r.key_length = r.value_length = -1
    p = _skip_bytes(p, rec_end, &r.key_length)
    p = _skip_bytes(p, rec_end, &r.value_length)
    p = _varint(p, rec_end, &count)
    if p == NULL:
        return NULL
    if count < 0:
        r.reason, r.c = R_REC_HEADER_COUNT, count
        return NULL
    # Each header takes at least 2 bytes, so a huge count fails on bounds, not on time.
    for i in range(count):
        p = _skip_bytes(p, rec_end, &n)  # header key: null is invalid
        if p != NULL and n < 0:
            r.reason, r.c = R_REC_HEADER_KEY, n
            return NULL
        p = _skip_bytes(p, rec_end, &n)  # header value
        if p == NULL:
            return NULL
    if p != rec_end:
        r.reason, r.c, r.d = R_REC_SIZE, length, p - body
        return NULL
    r.reason = R_OK
    return rec_end


cdef inline const unsigned char* _walk_record(const unsigned char* p, const unsigned char* end,
                                              const unsigned char* base, int32_t index,
                                              RecordInfo* r, Problem* pr) noexcept nogil:
    """_next_record for record ``index``, reporting a bad one in ``pr`` (its byte offset counted
    from ``base``)."""
    cdef const unsigned char* rec_end = _next_record(p, end, r)
    if rec_end == NULL:
        _fail(pr, r.reason, index, p - base, r.c, r.d)
    return rec_end


# ------------------------------------------------------------------------------------------------
# validate

cdef struct Summary:
    Py_ssize_t batch_count
    int64_t offset_count
    int64_t record_count
    int64_t first_timestamp
    int64_t max_timestamp
    int64_t offset_delta_of_max_timestamp
    int64_t producer_id
    int producer_epoch
    int32_t base_sequence
    int32_t last_sequence
    int attributes


cdef inline int _check_frame(const unsigned char* p, Py_ssize_t remaining, Py_ssize_t* size,
                             Problem* pr) noexcept nogil:
    """Length and magic of the batch at p: the checks every walker shares. Order: truncation of
    the length field, an impossibly small length, truncation of the batch, magic, the v2 minimum
    (so a small legacy message is reported by its magic)."""
    cdef int32_t length
    cdef Py_ssize_t sz = 0
    if remaining < BATCH_LOG_OVERHEAD:
        return _fail(pr, R_SHORT, 0, remaining, 0, 0)
    length = be_i32(p + OFF_BATCH_LENGTH)
    if length < OFF_MAGIC + 1 - BATCH_LOG_OVERHEAD:
        return _fail(pr, R_TOO_SMALL, <int64_t>length + BATCH_LOG_OVERHEAD, remaining, 0, 0)
    sz = <Py_ssize_t>length + BATCH_LOG_OVERHEAD
    if sz > remaining:
        return _fail(pr, R_TRUNCATED, sz, remaining, 0, 0)
    if p[OFF_MAGIC] != MAGIC_V2:
        return _fail(pr, R_MAGIC, <signed char>p[OFF_MAGIC], 0, 0, 0)
    if sz < BATCH_HEADER_SIZE:
        return _fail(pr, R_TOO_SMALL, sz, remaining, 0, 0)
    size[0] = sz
    return 0


cdef int _validate_batch(const unsigned char* p, Py_ssize_t remaining, int64_t max_batch_bytes,
                         bint from_client, Summary* s, Problem* pr, Py_ssize_t* size) noexcept nogil:
    """Check one batch and fold it into ``s``. Check order follows Kafka 2.8's produce path:
    frame and magic, size limit, CRC, codec, client-only header rules, then the records."""
    cdef Py_ssize_t sz = 0
    cdef uint32_t stored, computed
    cdef int attributes, codec
    cdef int32_t last_delta, count, i
    cdef int64_t producer_id, base_ts, ts, max_ts, max_delta
    cdef int32_t base_seq
    cdef bint log_append_time
    cdef const unsigned char* q
    cdef const unsigned char* rec
    cdef const unsigned char* end
    cdef RecordInfo ri

    if _check_frame(p, remaining, &sz, pr) < 0:
        return -1
    if sz > max_batch_bytes:
        return _fail(pr, R_TOO_LARGE, sz, max_batch_bytes, 0, 0)
    stored = be_u32(p + OFF_CRC)
    computed = kb_crc32c(0, p + OFF_ATTRIBUTES, <size_t>(sz - OFF_ATTRIBUTES))
    if stored != computed:
        return _fail(pr, R_CRC, stored, computed, sz - OFF_ATTRIBUTES, 0)
    attributes = be_i16(p + OFF_ATTRIBUTES)
    codec = attributes & ATTR_CODEC_MASK
    if codec > 4:
        return _fail(pr, R_CODEC, codec, attributes & 0xffff, 0, 0)
    last_delta = be_i32(p + OFF_LAST_OFFSET_DELTA)
    count = be_i32(p + OFF_RECORD_COUNT)
    producer_id = be_i64(p + OFF_PRODUCER_ID)
    base_seq = be_i32(p + OFF_BASE_SEQUENCE)
    log_append_time = (attributes & ATTR_LOG_APPEND_TIME) != 0
    if from_client:
        # LogValidator.validateBatch
        if count <= 0:
            return _fail(pr, R_BAD_COUNT, count, 0, 0, 0)
        if <int64_t>last_delta + 1 != count:
            return _fail(pr, R_COUNT_MISMATCH, count, last_delta, 0, 0)
        if attributes & ATTR_CONTROL:
            return _fail(pr, R_CONTROL, 0, 0, 0, 0)
        if producer_id >= 0 and base_seq < 0:
            return _fail(pr, R_NO_SEQUENCE, producer_id, base_seq, 0, 0)
        if log_append_time:
            return _fail(pr, R_LOG_APPEND_TIME, 0, 0, 0, 0)
    else:
        # Stored/replicated batches may be sparse after compaction (fewer records than offsets,
        # even none) but never have more records than offsets or offsets going backwards.
        if count < 0:
            return _fail(pr, R_BAD_COUNT, count, 0, 0, 0)
        if last_delta < 0 or <int64_t>count > <int64_t>last_delta + 1:
            return _fail(pr, R_OFFSET_RANGE, last_delta, count, 0, 0)

    base_ts = be_i64(p + OFF_BASE_TIMESTAMP)
    max_ts = -1
    max_delta = -1
    if codec == 0 and not log_append_time:
        # Walk the records: they must be exactly `count` records filling the section. Per-record
        # timestamps give the exact offset of the max timestamp, as Kafka's in-place path does.
        q = p + BATCH_HEADER_SIZE
        end = p + sz
        for i in range(count):
            rec = q
            q = _walk_record(q, end, p, i, &ri, pr)
            if q == NULL:
                return -1
            if from_client:
                if ri.offset_delta != i:
                    return _fail(pr, R_REC_OFFSET, i, rec - p, ri.offset_delta, i)
            elif ri.offset_delta < 0 or ri.offset_delta > last_delta:
                return _fail(pr, R_REC_OFFSET_RANGE, i, rec - p, ri.offset_delta, last_delta)
            ts = <int64_t>(<uint64_t>base_ts + <uint64_t>ri.timestamp_delta)  # Java wraps
            if ts > max_ts:
                max_ts = ts
                max_delta = ri.offset_delta
        if q != end:
            return _fail(pr, R_REC_TRAILING, count, q - p, end - q, 0)
    else:
        # Compressed: trusting the header instead of inflating every batch is the documented
        # trade-off (reference §3.3): no per-record structure, key or timestamp checks here.
        # LogAppendTime: every record carries maxTimestamp; like Kafka, credit the last offset.
        max_ts = be_i64(p + OFF_MAX_TIMESTAMP)
        max_delta = last_delta

    if s.batch_count == 0:
        s.first_timestamp = base_ts
        s.producer_id = producer_id
        s.producer_epoch = be_i16(p + OFF_PRODUCER_EPOCH)
        s.base_sequence = base_seq
        s.attributes = attributes
    if max_ts > s.max_timestamp:
        s.max_timestamp = max_ts
        s.offset_delta_of_max_timestamp = s.offset_count + max_delta
    s.last_sequence = _last_sequence(base_seq, last_delta)
    s.batch_count += 1
    s.offset_count += <int64_t>last_delta + 1
    s.record_count += count
    size[0] = sz
    return 0


cdef int _validate_all(const unsigned char* buf, Py_ssize_t n, int64_t max_batch_bytes,
                       bint from_client, Summary* s, Problem* pr) noexcept nogil:
    cdef Py_ssize_t pos = 0, sz = 0
    s.batch_count = 0
    s.offset_count = 0
    s.record_count = 0
    s.first_timestamp = -1
    s.max_timestamp = -1
    s.offset_delta_of_max_timestamp = -1
    s.producer_id = -1
    s.producer_epoch = -1
    s.base_sequence = -1
    s.last_sequence = -1
    s.attributes = 0
    while pos < n:
        pr.position = pos
        pr.batch_index = s.batch_count
        if _validate_batch(buf + pos, n - pos, max_batch_bytes, from_client, s, pr, &sz) < 0:
            return -1
        pos += sz
    if s.batch_count == 0 and from_client:
        # ProduceRequest.validateRecords: v3+ produce data holds at least one batch.
        pr.position = 0
        pr.batch_index = 0
        return _fail(pr, R_EMPTY, 0, 0, 0, 0)
    return 0


cdef class AppendInfo:
    """What validate() learnt about a buffer of batches. Producer fields, flags and compression
    are those of the first batch, last_sequence that of the last; max_timestamp is per record for
    uncompressed CreateTime batches and the header's maxTimestamp otherwise (-1 and
    offset_delta_of_max_timestamp -1 when nothing beats NO_TIMESTAMP)."""

    def __repr__(self):
        return (f"AppendInfo(batch_count={self.batch_count}, offset_count={self.offset_count}, "
                f"record_count={self.record_count}, size={self.size}, "
                f"max_timestamp={self.max_timestamp}, producer_id={self.producer_id}, "
                f"base_sequence={self.base_sequence}, last_sequence={self.last_sequence})")


def validate(buf, int64_t max_batch_bytes=1048588, bint from_client=True):
    """Validate every batch in ``buf`` as Kafka's produce path does, without copying.

    Checks: whole batches only (no trailing bytes), batchLength sane, magic 2, CRC-32C, codec 0-4,
    size <= max_batch_bytes, for uncompressed batches that the records exactly fill the batch and
    their count matches. With ``from_client``: recordCount == lastOffsetDelta + 1 > 0, record
    offset deltas are 0..n-1 (uncompressed), no control bit, no LogAppendTime, producerId >= 0
    implies baseSequence >= 0, and at least one batch. Without it (replication, recovery), sparse
    compacted batches are accepted. Raises the matching RecordBatchError subclass.

    Not checked here (no parameters for them): message.timestamp.difference.max.ms and the
    compacted-topic null-key rule; compressed batches are not inflated."""
    cdef Py_buffer view
    cdef Summary s
    cdef Problem pr
    cdef int rc
    cdef AppendInfo info
    _acquire(buf, &view, False)
    try:
        if view.len >= NOGIL_BYTES:
            with nogil:
                rc = _validate_all(<const unsigned char*>view.buf, view.len, max_batch_bytes,
                                   from_client, &s, &pr)
        else:
            rc = _validate_all(<const unsigned char*>view.buf, view.len, max_batch_bytes,
                               from_client, &s, &pr)
        if rc < 0:
            _raise_problem(&pr)
        info = AppendInfo.__new__(AppendInfo)
        info.batch_count = s.batch_count
        info.offset_count = s.offset_count
        info.record_count = s.record_count
        info.size = view.len
        info.first_timestamp = s.first_timestamp
        info.max_timestamp = s.max_timestamp
        info.offset_delta_of_max_timestamp = s.offset_delta_of_max_timestamp
        info.producer_id = s.producer_id
        info.producer_epoch = s.producer_epoch
        info.base_sequence = s.base_sequence
        info.last_sequence = s.last_sequence
        info.is_transactional = (s.attributes & ATTR_TRANSACTIONAL) != 0
        info.is_control = (s.attributes & ATTR_CONTROL) != 0
        info.compression = s.attributes & ATTR_CODEC_MASK
        return info
    finally:
        PyBuffer_Release(&view)


# ------------------------------------------------------------------------------------------------
# assign_offsets

cdef void _rewrite(unsigned char* buf, Py_ssize_t n, int64_t base_offset, int32_t epoch,
                   int64_t log_append_time_ms) noexcept nogil:
    """Second pass of assign_offsets; the first pass proved every batch frame sound."""
    cdef Py_ssize_t pos = 0, sz
    cdef unsigned char* p
    cdef int64_t offset = base_offset
    while pos < n:
        p = buf + pos
        sz = <Py_ssize_t>be_i32(p + OFF_BATCH_LENGTH) + BATCH_LOG_OVERHEAD
        put_be_u64(p + OFF_BASE_OFFSET, <uint64_t>offset)
        put_be_u32(p + OFF_LEADER_EPOCH, <uint32_t>epoch)
        if log_append_time_ms >= 0:
            put_be_u16(p + OFF_ATTRIBUTES, be_u16(p + OFF_ATTRIBUTES) | ATTR_LOG_APPEND_TIME)
            put_be_u64(p + OFF_MAX_TIMESTAMP, <uint64_t>log_append_time_ms)
            put_be_u32(p + OFF_CRC, kb_crc32c(0, p + OFF_ATTRIBUTES, <size_t>(sz - OFF_ATTRIBUTES)))
        offset += <int64_t>be_i32(p + OFF_LAST_OFFSET_DELTA) + 1
        pos += sz


def assign_offsets(buf, int64_t base_offset, int32_t partition_leader_epoch=-1,
                   int64_t log_append_time_ms=-1):
    """Rewrite baseOffset and partitionLeaderEpoch of each batch in place, consecutive from
    ``base_offset``; returns the next offset. With ``log_append_time_ms >= 0`` also set the
    LogAppendTime attribute bit and maxTimestamp, and recompute the CRC. Call after validate().

    ``buf`` must be writable (BufferError otherwise). The batch frames are checked before
    anything is written, so a malformed buffer raises and is left untouched."""
    cdef Py_buffer view
    cdef Problem pr
    cdef Py_ssize_t pos = 0, sz = 0, index = 0
    cdef int32_t last_delta
    cdef int64_t offset = base_offset
    cdef unsigned char* p
    if base_offset < 0:
        raise ValueError(f"negative base offset {base_offset}")
    _acquire(buf, &view, True)
    try:
        p = <unsigned char*>view.buf
        while pos < view.len:
            pr.position = pos
            pr.batch_index = index
            if _check_frame(p + pos, view.len - pos, &sz, &pr) < 0:
                _raise_problem(&pr)
            last_delta = be_i32(p + pos + OFF_LAST_OFFSET_DELTA)
            if last_delta < 0:
                _fail(&pr, R_OFFSET_RANGE, last_delta, be_i32(p + pos + OFF_RECORD_COUNT), 0, 0)
                _raise_problem(&pr)
            if offset > INT64_MAX - 1 - last_delta:
                raise OverflowError(f"batch {index} would take offsets beyond 2**63-1")
            offset += <int64_t>last_delta + 1
            pos += sz
            index += 1
        if view.len >= NOGIL_BYTES:
            with nogil:
                _rewrite(p, view.len, base_offset, partition_leader_epoch, log_append_time_ms)
        else:
            _rewrite(p, view.len, base_offset, partition_leader_epoch, log_append_time_ms)
        return offset
    finally:
        PyBuffer_Release(&view)


# ------------------------------------------------------------------------------------------------
# scan_batches

def scan_batches(buf, bint verify_crc=True):
    """Walk batches from the start of ``buf`` (e.g. a segment being recovered).
    Returns (headers, valid_bytes, status): status 0 = ended exactly at the end of ``buf``,
    1 = stopped at an incomplete batch (more bytes may complete it), 2 = stopped at a corrupt batch
    (bad length, magic or CRC). ``valid_bytes`` is the length of the whole-and-valid prefix.

    Magic 0/1 entries (a topic on message.format.version < 0.11 stores them, possibly after v2
    batches) are walked too, each described by ``legacy_header_from_ptr`` and checked with its
    CRC-32; their inner messages are not opened.

    Never raises on content. A tail whose magic byte is visible and wrong counts as corrupt even
    if incomplete; a plausible header with a length beyond the end counts as incomplete."""
    cdef Py_buffer view
    cdef const unsigned char* base
    cdef const unsigned char* p
    cdef Py_ssize_t pos = 0, remaining, sz
    cdef int32_t length, minimum
    cdef int status, magic
    headers = []
    _acquire(buf, &view, False)
    try:
        base = <const unsigned char*>view.buf
        while True:
            remaining = view.len - pos
            p = base + pos
            if remaining == 0:
                status = 0
                break
            if remaining < BATCH_LOG_OVERHEAD:
                status = 1
                break
            length = be_i32(p + OFF_BATCH_LENGTH)
            if remaining <= OFF_MAGIC:
                # The magic is not visible yet: any plausible length may still be a whole entry.
                status = 1 if length >= LEGACY_MIN_SIZE_V0 else 2
                break
            magic = p[OFF_MAGIC]
            if magic == MAGIC_V2:
                minimum = BATCH_HEADER_SIZE - BATCH_LOG_OVERHEAD
            elif magic == 0 or magic == 1:
                minimum = _legacy_min_size(magic)
            else:
                status = 2
                break
            if length < minimum:
                status = 2  # includes zero-filled preallocated tails
                break
            sz = <Py_ssize_t>length + BATCH_LOG_OVERHEAD
            if sz > remaining:
                status = 1
                break
            if magic != MAGIC_V2:
                if verify_crc and not legacy_crc_ok(buf, pos, sz):
                    status = 2
                    break
                headers.append(legacy_header_from_ptr(p, pos))
                pos += sz
                continue
            if verify_crc and be_u32(p + OFF_CRC) != _crc(0, p + OFF_ATTRIBUTES,
                                                          <size_t>(sz - OFF_ATTRIBUTES)):
                status = 2
                break
            headers.append(header_from_ptr(p, pos))
            pos += sz
        return headers, pos, status
    finally:
        PyBuffer_Release(&view)


# ------------------------------------------------------------------------------------------------
# One batch's records, walked: the header both readers below need and where its records lie

cdef struct BatchWalk:
    const unsigned char* base     # what a bad record's byte offset counts from
    const unsigned char* q        # the next record
    const unsigned char* end      # the end of the records section
    const unsigned char* batch
    Py_ssize_t size
    int attributes
    int32_t count
    int64_t base_offset, base_ts, max_ts
    bint log_append_time


cdef int _walk_header(const Py_buffer* bview, BatchWalk* w, Problem* pr) except -1:
    """Checks the batch's frame and reads the header fields the record walks use."""
    cdef const unsigned char* p = <const unsigned char*>bview.buf
    pr.position = 0
    pr.batch_index = 0
    w.size = 0
    if _check_frame(p, bview.len, &w.size, pr) < 0:
        _raise_problem(pr)
    w.batch = p
    w.attributes = be_i16(p + OFF_ATTRIBUTES)
    w.log_append_time = (w.attributes & ATTR_LOG_APPEND_TIME) != 0
    w.base_offset = be_i64(p + OFF_BASE_OFFSET)
    w.base_ts = be_i64(p + OFF_BASE_TIMESTAMP)
    w.max_ts = be_i64(p + OFF_MAX_TIMESTAMP)
    w.count = be_i32(p + OFF_RECORD_COUNT)
    return 0


cdef int _walk_records_section(object records, Py_buffer* rview, BatchWalk* w, bint name_codec) except -1:
    """Points the walk at the records: the decompressed section passed as ``records`` (acquired into ``rview``:
    returns 1, the caller releases it), else the batch's own (0); a compressed batch without ``records`` raises
    ValueError (``name_codec``: the message names the codec)."""
    if records is not None:
        _acquire(records, rview, False)
        w.base = w.q = <const unsigned char*>rview.buf
        w.end = w.q + rview.len
        return 1
    if w.attributes & ATTR_CODEC_MASK:
        if name_codec:
            raise ValueError(f"compressed batch (codec {w.attributes & ATTR_CODEC_MASK}): pass the "
                             f"decompressed records section as `records`")
        raise ValueError("compressed batch: pass the decompressed records section as `records`")
    w.base = w.batch
    w.q = w.batch + BATCH_HEADER_SIZE
    w.end = w.batch + w.size
    return 0


cdef inline int64_t _record_timestamp(const BatchWalk* w, const RecordInfo* ri) noexcept nogil:
    # A LogAppendTime batch's records all read as its maxTimestamp (DefaultRecordBatch).
    return w.max_ts if w.log_append_time else <int64_t>(<uint64_t>w.base_ts + <uint64_t>ri.timestamp_delta)


# ------------------------------------------------------------------------------------------------
# first_offset_at_or_after

def first_offset_at_or_after(batch, int64_t target_timestamp, records=None):
    """Offset of the first record of this batch with timestamp >= target, or -1 if none
    (see first_record_at_or_after)."""
    found = first_record_at_or_after(batch, target_timestamp, records)
    return -1 if found is None else found[0]


def first_record_at_or_after(batch, int64_t target_timestamp, records=None):
    """(offset, timestamp) of the first record of this batch with timestamp >= target
    (LogAppendTime batches use maxTimestamp for every record), or None. For compressed batches pass the
    decompressed records section as ``records`` (ValueError without it, unless the header's
    maxTimestamp already rules the batch out, which is Kafka's shortcut too).

    ``batch`` starts with the batch; bytes after it are ignored. No CRC check."""
    cdef Py_buffer bview, rview
    cdef bint have_records = False
    cdef Problem pr
    cdef BatchWalk w
    cdef int32_t i
    cdef int64_t ts
    cdef RecordInfo ri
    _acquire(batch, &bview, False)
    try:
        _walk_header(&bview, &w, &pr)
        if w.max_ts < target_timestamp:
            return None
        have_records = _walk_records_section(records, &rview, &w, True) == 1
        for i in range(w.count):
            w.q = _walk_record(w.q, w.end, w.base, i, &ri, &pr)
            if w.q == NULL:
                _raise_problem(&pr)
            ts = _record_timestamp(&w, &ri)
            if ts >= target_timestamp:
                return (w.base_offset + ri.offset_delta, ts)
        return None
    finally:
        if have_records:
            PyBuffer_Release(&rview)
        PyBuffer_Release(&bview)


# ------------------------------------------------------------------------------------------------
# record_problems: Kafka's per-record rules (LogValidator.validateRecord)

KEYLESS_ON_COMPACTED = 1     # INVALID_RECORD
TIMESTAMP_OUT_OF_RANGE = 2   # INVALID_TIMESTAMP
CLAIMS_LOG_APPEND_TIME = 3   # INVALID_TIMESTAMP


def record_problems(batch, records=None, bint compacted=False, bint check_timestamps=False,
                    int64_t min_timestamp=0, int64_t max_timestamp=INT64_MAX):
    """The records of one client batch that Kafka's append refuses one by one, as
    ``[(index, problem, offset_delta, timestamp, key_length, value_length)]`` (lengths -1 when
    null), at most one problem a record, the key rule first: a keyless record on a ``compacted``
    topic; with ``check_timestamps`` a CreateTime timestamp (not NO_TIMESTAMP) outside
    [min_timestamp, max_timestamp]; otherwise, every record of a batch that claims LogAppendTime.

    ``batch`` starts with the batch (frame and CRC already validated). For a compressed batch
    pass its decompressed records section as ``records``: its records are walked as validate()
    walks an uncompressed batch's (exactly recordCount records filling it, offset deltas
    0..n-1), so a malformed one raises the same RecordBatchError."""
    cdef Py_buffer bview, rview
    cdef bint have_records = False
    cdef Problem pr
    cdef BatchWalk w
    cdef const unsigned char* rec
    cdef int32_t i
    cdef int64_t ts
    cdef int problem
    cdef RecordInfo ri
    out = []
    _acquire(batch, &bview, False)
    try:
        _walk_header(&bview, &w, &pr)
        have_records = _walk_records_section(records, &rview, &w, False) == 1
        for i in range(w.count):
            rec = w.q
            w.q = _walk_record(w.q, w.end, w.base, i, &ri, &pr)
            if w.q == NULL:
                _raise_problem(&pr)
            if ri.offset_delta != i:
                _fail(&pr, R_REC_OFFSET, i, rec - w.base, ri.offset_delta, i)
                _raise_problem(&pr)
            ts = _record_timestamp(&w, &ri)
            problem = 0
            if compacted and ri.key_length < 0:
                problem = KEYLESS_ON_COMPACTED
            elif check_timestamps and ts != -1 and (ts < min_timestamp or ts > max_timestamp):
                problem = TIMESTAMP_OUT_OF_RANGE
            elif w.log_append_time:
                problem = CLAIMS_LOG_APPEND_TIME
            if problem:
                out.append((i, problem, ri.offset_delta, ts, ri.key_length, ri.value_length))
        if w.q != w.end:
            _fail(&pr, R_REC_TRAILING, w.count, w.q - w.base, w.end - w.q, 0)
            _raise_problem(&pr)
        return out
    finally:
        if have_records:
            PyBuffer_Release(&rview)
        PyBuffer_Release(&bview)
