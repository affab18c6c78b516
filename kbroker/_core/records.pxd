# cython: language_level=3
"""C-level surface of kbroker._core.records for other Cython modules.

Field offsets and big-endian helpers live here (and only here) so every module reads batch
headers the same way. The CRC header is deliberately *not* included here: its tables are
per-translation-unit state initialised by records' import, so other modules must call
``crc32c_update`` (exported through the module's C API capsule) instead.
"""
from libc.stdint cimport int16_t, int32_t, int64_t, uint16_t, uint32_t, uint64_t

# Record batch v2 layout (see records.pyi).
cdef enum:
    OFF_BASE_OFFSET = 0
    OFF_BATCH_LENGTH = 8
    OFF_LEADER_EPOCH = 12
    OFF_MAGIC = 16
    OFF_CRC = 17
    OFF_ATTRIBUTES = 21          # first CRC-covered byte
    OFF_LAST_OFFSET_DELTA = 23
    OFF_BASE_TIMESTAMP = 27
    OFF_MAX_TIMESTAMP = 35
    OFF_PRODUCER_ID = 43
    OFF_PRODUCER_EPOCH = 51
    OFF_BASE_SEQUENCE = 53
    OFF_RECORD_COUNT = 57
    BATCH_HEADER_SIZE = 61
    BATCH_LOG_OVERHEAD = 12
    MAGIC_V2 = 2
    ATTR_CODEC_MASK = 0x07
    ATTR_LOG_APPEND_TIME = 0x08
    ATTR_TRANSACTIONAL = 0x10
    ATTR_CONTROL = 0x20


# Big-endian access. Byte-wise composition is alignment- and host-endianness-safe; gcc/clang
# turn each into a single load/store plus bswap.
cdef inline uint16_t be_u16(const unsigned char* p) noexcept nogil:
    return <uint16_t>((<uint16_t>p[0] << 8) | p[1])

cdef inline uint32_t be_u32(const unsigned char* p) noexcept nogil:
    return ((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) |
            (<uint32_t>p[2] << 8) | <uint32_t>p[3])

cdef inline uint64_t be_u64(const unsigned char* p) noexcept nogil:
    return (<uint64_t>be_u32(p) << 32) | be_u32(p + 4)

cdef inline int16_t be_i16(const unsigned char* p) noexcept nogil:
    return <int16_t>be_u16(p)

cdef inline int32_t be_i32(const unsigned char* p) noexcept nogil:
    return <int32_t>be_u32(p)

cdef inline int64_t be_i64(const unsigned char* p) noexcept nogil:
    return <int64_t>be_u64(p)

cdef inline void put_be_u16(unsigned char* p, uint16_t v) noexcept nogil:
    p[0] = <unsigned char>(v >> 8)
    p[1] = <unsigned char>v

cdef inline void put_be_u32(unsigned char* p, uint32_t v) noexcept nogil:
    p[0] = <unsigned char>(v >> 24)
    p[1] = <unsigned char>(v >> 16)
    p[2] = <unsigned char>(v >> 8)
    p[3] = <unsigned char>v

cdef inline void put_be_u64(unsigned char* p, uint64_t v) noexcept nogil:
    put_be_u32(p, <uint32_t>(v >> 32))
    put_be_u32(p + 4, <uint32_t>v)


cdef class BatchHeader:
    cdef readonly Py_ssize_t position
    cdef readonly int64_t base_offset
    cdef readonly int32_t batch_length
    cdef readonly int32_t partition_leader_epoch
    cdef readonly int magic
    cdef readonly uint32_t crc
    cdef readonly int attributes
    cdef readonly int32_t last_offset_delta
    cdef readonly int64_t base_timestamp
    cdef readonly int64_t max_timestamp
    cdef readonly int64_t producer_id
    cdef readonly int producer_epoch
    cdef readonly int32_t base_sequence
    cdef readonly int32_t record_count


cdef class AppendInfo:
    cdef readonly Py_ssize_t batch_count
    cdef readonly int64_t offset_count
    cdef readonly int64_t record_count
    cdef readonly Py_ssize_t size
    cdef readonly int64_t first_timestamp
    cdef readonly int64_t max_timestamp
    cdef readonly int64_t offset_delta_of_max_timestamp
    cdef readonly int64_t producer_id
    cdef readonly int producer_epoch
    cdef readonly int32_t base_sequence
    cdef readonly int32_t last_sequence
    cdef readonly bint is_transactional
    cdef readonly bint is_control
    cdef readonly int compression


# CRC-32C continuing from a finished CRC value (0 to start); hardware-accelerated when possible.
cdef uint32_t crc32c_update(uint32_t crc, const unsigned char* p, size_t n) noexcept nogil

# Copy the header at p (which must have BATCH_HEADER_SIZE readable bytes) into a new BatchHeader.
cdef BatchHeader header_from_ptr(const unsigned char* p, Py_ssize_t position)
