"""The checks batches meet before a partition log writes them (Kafka's LogValidator): a producer's
(``validate_produce``: Kafka's produce-path rules, the records of compressed batches walked, per-record
rules where the topic asks for them, conversion to magic 0/1 messages below message format 0.11) and a
leader's copy (``validate_replicated``: the replication rules, no size limit). Each raises the
``kbroker.errors.KafkaError`` of the first problem, its message prefixed with the partition."""
from __future__ import annotations

from kbroker import errors
from kbroker._core import records
from kbroker.config.topic import LogConfig
from kbroker.log import legacy, legacy_append, record_checks
from kbroker.log.legacy_append import LegacyAppendInfo


def validate_produce(batches: bytearray | memoryview, config: LogConfig, tp: str,
                     now: int) -> records.AppendInfo | LegacyAppendInfo:
    """Kafka's produce-path checks; for refused records a ``record_checks`` error naming each of them.
    Below message format 0.11 the records are also converted to the magic 0/1 messages the log will
    store (``legacy_append``)."""
    if config.record_magic < 2 and legacy.is_legacy(batches):  # Produce v0-2, stored as sent
        try:
            return legacy_append.prepare_from_message_set(batches, config, tp, now)
        except errors.KafkaError as exc:
            raise type(exc)(f"{tp}: {exc.message}") from None
    info = _validate_batches(batches, config, tp, now)
    if config.record_magic < 2:
        try:
            return legacy_append.prepare_from_batches(batches, config)
        except errors.KafkaError as exc:
            raise type(exc)(f"{tp}: {exc.message}") from None
    return info


def _validate_batches(batches: bytearray | memoryview, config: LogConfig, tp: str, now: int) -> records.AppendInfo:
    try:
        info = records.validate(batches, config.max_message_bytes, True)
    except records.InvalidTimestampError as exc:
        # A batch claiming LogAppendTime: Kafka refuses each of its records (record errors).
        _check_records(batches, True, config, tp, now)
        raise errors.InvalidTimestampError(f"{tp}: {exc}") from None
    except records.RecordBatchError as exc:
        raise errors.for_code(exc.code)(f"{tp}: {exc}") from None
    if info.size > config.segment_bytes:
        raise errors.RecordListTooLargeError(
            f"{tp}: {info.size} bytes in one append exceed segment.bytes={config.segment_bytes}")
    per_record = record_checks.needs_record_checks(config.compact, config.message_timestamp_difference_max_ms,
                                                   config.log_append_time)
    if info.compression or per_record:
        _check_records(batches, per_record, config, tp, now)
    return info


def _check_records(batches: bytearray | memoryview, per_record: bool, config: LogConfig, tp: str, now: int) -> None:
    """Each compressed batch is decompressed and its records walked (a payload that does not
    decompress or holds malformed records would poison every consumer: CORRUPT_MESSAGE /
    INVALID_RECORD, as Kafka); with ``per_record`` (a compacted topic, a timestamp bound, a
    batch claiming LogAppendTime) every batch's records meet Kafka's per-record rules."""
    headers, _, _ = records.scan_batches(batches, verify_crc=False)
    view = memoryview(batches)
    try:
        for header in headers:
            if header.compression or per_record:
                record_checks.check_batch(
                    view[header.position:header.position + header.size], header, tp,
                    compacted=config.compact, log_append_time_topic=config.log_append_time,
                    timestamp_difference_max_ms=config.message_timestamp_difference_max_ms, now=now)
    except errors.CorruptMessageError as exc:
        raise errors.CorruptMessageError(f"{tp}: {exc}") from None
    except records.RecordBatchError as exc:
        raise errors.for_code(exc.code)(f"{tp}: {exc}") from None
    finally:
        view.release()


def validate_replicated(view: memoryview, headers: list[records.BatchHeader], whole: int, config: LogConfig,
                        tp: str) -> None:
    """The replication checks over each run of one format: v2 batches by the core, magic 0/1
    entries (a topic below message format 0.11) by ``legacy``. Nothing is written before."""
    i = 0
    while i < len(headers):
        j = i
        while j < len(headers) and (headers[j].magic < 2) == (headers[i].magic < 2):
            j += 1
        start = headers[i].position
        end = headers[j].position if j < len(headers) else whole
        try:
            with view[start:end] as part:
                if headers[i].magic < 2:
                    legacy.validate_stored(part)
                else:
                    records.validate(part, max(config.max_message_bytes, end - start), False)
        except records.RecordBatchError as exc:
            raise errors.for_code(exc.code)(f"{tp}: replicated data: {exc}") from None
        except errors.KafkaError as exc:
            raise type(exc)(f"{tp}: replicated data: {exc.message}") from None
        i = j
