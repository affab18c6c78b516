"""Kafka's names for things on disk: ``<topic>-<partition>`` directories, 20-digit segment files
and the suffixes a segment's files take while the cleaner replaces them or a delete is pending."""
from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"          # the cleaner's output, before the swap begins
SWAP_SUFFIX = ".swap"                # complete cleaner output, being swapped in
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"

# The internal topics (Kafka's Topic.isInternal: by name): clients may not produce to them
OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_TOPIC = "__transaction_state"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_TOPIC})

# Kafka's legal topic names: at most 249 characters of [a-zA-Z0-9._-], not "." or "..".
_TOPIC_RE = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


def validate_topic_name(topic: str) -> None:
    if topic in (".", "..") or not _TOPIC_RE.match(topic):
        raise ValueError(
            f"illegal topic name {topic!r}: use 1-249 characters of ASCII letters, digits, '.', '_', '-'"
        )


def segment_file_stem(base_offset: int) -> str:
    return f"{base_offset:020d}"


def segment_paths(directory: Path, base_offset: int, suffix: str = "") -> tuple[Path, Path, Path]:
    """``.log``, ``.index`` and ``.timeindex`` of the segment at ``base_offset``, plus ``suffix``."""
    stem = segment_file_stem(base_offset)
    return (directory / f"{stem}{LOG_SUFFIX}{suffix}", directory / f"{stem}{INDEX_SUFFIX}{suffix}",
            directory / f"{stem}{TIME_INDEX_SUFFIX}{suffix}")


def parse_log_dir_name(name: str) -> TopicPartition | None:
    """``my-topic-3`` -> TopicPartition('my-topic', 3); None for anything else."""
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        return None
    try:
        validate_topic_name(topic)
    except ValueError:
        return None
    return TopicPartition(topic, int(partition))
