"""Where a keyed row goes: Kafka's Java default partitioner (``murmur2``), as librdkafka's ``murmur2_random``.
"""
from __future__ import annotations

import random
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where used at run time: the driver needs confluent_kafka only to plan
    pass



def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (org.apache.kafka.common.utils.Utils.murmur2) as an unsigned 32-bit value."""
    m = 0x5BD1E995
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    end4 = length & ~3
    for i in range(0, end4, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    extra = length & 3
    if extra == 3:
        h ^= data[end4 + 2] << 16
    if extra >= 2:
        h ^= data[end4 + 1] << 8
    if extra >= 1:
        h ^= data[end4]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h


def partition_for(key: bytes | None, partitions: int) -> int:
    """librdkafka's murmur2_random (= Java's default partitioner for keyed records)."""
    if key is None:
        return random.randrange(partitions)
    return (murmur2(key) & 0x7FFFFFFF) % partitions
