"""Kafka's storage layout: partition logs made of segments, spread over log directories."""
try:
    from kbroker._core import appender, index, records  # noqa: F401  every module below uses them
except ImportError as exc:  # no pure-Python stand-in: it would hide a many times slower broker
    raise ImportError(f"kbroker's compiled core is missing ({exc}); build it with `make build`") from exc

from kbroker.config.topic import LogConfig
from kbroker.log.cleaner import CleanStats, clean_log
from kbroker.log.leader_epoch import LeaderEpochCache
from kbroker.log.log_manager import LogManager
from kbroker.log.names import TopicPartition
from kbroker.log.partition_log import AppendResult, PartitionLog, UnexpectedAppendOffsetError
from kbroker.log.segment import FileSlice, Segment

__all__ = ["AppendResult", "CleanStats", "clean_log", "FileSlice", "LeaderEpochCache", "LogConfig", "LogManager",
           "PartitionLog", "Segment", "TopicPartition", "UnexpectedAppendOffsetError"]
