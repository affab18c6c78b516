"""Kafka's per-record append rules (LogValidator.validateRecord) and the errors that name each
refused record, which Produce v8+ returns as ``record_errors`` so that a client fails exactly
those records (librdkafka fails the others of the batch with _INVALID_DIFFERENT_RECORD).

The rules, checked for client batches only and in Kafka's order, one error a record:
  - a keyless record on a compacted topic (INVALID_RECORD);
  - under CreateTime, a timestamp (not -1) more than ``message.timestamp.difference.max.ms`` from
    the broker's clock (INVALID_TIMESTAMP);
  - any record of a batch that claims LogAppendTime (INVALID_TIMESTAMP).
A batch with any refused record is refused whole; the partition error is INVALID_TIMESTAMP when a
timestamp was among the reasons, else INVALID_RECORD, with Kafka's summary as its message.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from kbroker import errors
from kbroker._core import records
from kbroker.log.compression import decompress_records

if TYPE_CHECKING:  # the stub's alias: the compiled module has no such name
    from kbroker._core.records import Buffer

INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)


class RecordsRejected(errors.KafkaError):
    """A batch refused for some of its records: INVALID_RECORD, or INVALID_TIMESTAMP when a
    timestamp was among the reasons; ``record_errors`` is [(batch index, message)]."""

    def __init__(self, error: type[errors.KafkaError], message: str, record_errors: list[tuple[int, str]]) -> None:
        super().__init__(message)
        self.code = error.code
        self.name = error.name
        self.record_errors = record_errors


def needs_record_checks(compacted: bool, timestamp_difference_max_ms: int, log_append_time_topic: bool) -> bool:
    """Whether a topic's configs make any per-record rule apply to well-formed CreateTime batches."""
    return compacted or (not log_append_time_topic and timestamp_difference_max_ms < INT64_MAX)


def check_batch(batch: Buffer, header: records.BatchHeader, topic_partition: str, *, compacted: bool,
                log_append_time_topic: bool, timestamp_difference_max_ms: int, now: int) -> None:
    """Raise RecordsRejected / TimestampsRejected when Kafka would refuse records of this client
    batch (its whole bytes, ``header`` its parsed header); a malformed compressed records section
    raises the core's RecordBatchError as an uncompressed one would in validate()."""
    section = None
    if header.compression:
        start = records.HEADER_SIZE
        section = decompress_records(header.compression, memoryview(batch)[start:header.size])
    check_timestamps = not log_append_time_topic and timestamp_difference_max_ms < INT64_MAX
    low = max(now - timestamp_difference_max_ms, INT64_MIN)
    high = min(now + timestamp_difference_max_ms, INT64_MAX)
    found = records.record_problems(batch, section, compacted, check_timestamps, low, high)
    if not found:
        return
    rejected = []
    timestamps = False
    for index, problem, offset_delta, timestamp, key_length, value_length in found:
        if problem == records.KEYLESS_ON_COMPACTED:
            text = f"Compacted topic cannot accept message without key in topic partition {topic_partition}."
        elif problem == records.TIMESTAMP_OUT_OF_RANGE:
            timestamps = True
            text = (f"Timestamp {timestamp} of message with offset {offset_delta} is out of range. The timestamp "
                    f"should be within [{now - timestamp_difference_max_ms}, {now + timestamp_difference_max_ms}]")
        else:
            timestamps = True
            described = (f"DefaultRecord(offset={offset_delta}, timestamp={timestamp}, "
                         f"key={max(key_length, 0)} bytes, value={max(value_length, 0)} bytes)")
            text = (f"Invalid timestamp type in message {described}. Producer should not set timestamp "
                    f"type to LogAppendTime.")
        rejected.append((index, text))
    if timestamps:
        raise RecordsRejected(errors.InvalidTimestampError,
                              "One or more records have been rejected due to invalid timestamp", rejected)
    raise RecordsRejected(errors.InvalidRecordError, "One or more records have been rejected", rejected)
