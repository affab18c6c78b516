"""`kbroker dump-log` of a segment holding v2 batches then magic-1 and magic-0 messages (a topic moved to
message.format.version 0.10.0, then 0.9.0), printed as Kafka 2.8's DumpLogSegments prints each kind."""
from __future__ import annotations

import dataclasses
import re
import subprocess
import sys

from kbroker.log import LogConfig, PartitionLog, TopicPartition, batches
from kbroker.log.compression import GZIP

TP = TopicPartition("mixed", 0)
V2 = re.compile(r"baseOffset: 0 lastOffset: 1 count: 2 .* position: 0 CreateTime: 1001 size: \d+ magic: 2 "
                r"compresscodec: none crc: \d+ isvalid: true")


def test_dump_log_prints_legacy_entries_by_their_offset(tmp_path, appender):
    plog = PartitionLog(tmp_path / str(TP), TP, LogConfig(), appender)
    plog.append(batches.build_batch([(b"k", b"a", 1000), (b"k", b"b", 1001)]))
    plog.config = dataclasses.replace(plog.config, message_format_version="0.10.0")
    plog.append(batches.build_batch([(b"k", b"c", 1002)]))
    plog.append(batches.build_batch([(b"k", b"d", 1003), (b"k", b"e", 1004)], codec=GZIP))
    plog.config = dataclasses.replace(plog.config, message_format_version="0.9.0")
    plog.append(batches.build_batch([(b"k", b"f", 1005)]))
    segment = plog.active.log_path
    plog.close()
    done = subprocess.run([sys.executable, "-m", "kbroker.cli", "dump-log", "--files", str(segment)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()[2:6]
    assert V2.fullmatch(lines[0]), lines[0]
    legacy = [re.fullmatch(r"offset: (\d+) position: (\d+) (\w+): (-?\d+) size: (\d+) magic: (\d) "
                           r"compresscodec: (\w+) crc: \d+ isvalid: true", line) for line in lines[1:]]
    assert all(legacy), lines[1:]
    assert [(int(m[1]), m[3], int(m[4]), int(m[6]), m[7]) for m in legacy] == [
        (2, "CreateTime", 1002, 1, "none"), (4, "CreateTime", 1004, 1, "gzip"), (5, "NoTimestampType", -1, 0, "none")]
    assert int(legacy[0][2]) + int(legacy[0][5]) == int(legacy[1][2])  # contiguous positions
