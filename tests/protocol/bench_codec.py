"""Micro-benchmark of the codec (not a test): python -m tests.protocol.bench_codec

Prints µs per call for decode and encode of typical requests, plus a large Produce request and a
Fetch response (the workloads of the protocol reference §8, for comparison).
"""
from __future__ import annotations

import sys
import timeit

from kbroker.protocol import (
    FetchRequest,
    FetchResponse,
    MetadataRequest,
    ProduceRequest,
    decode_request,
    encode_request,
    encode_response,
)


class FileSlice:
    def __init__(self, length: int) -> None:
        self.length = length


def _metadata():
    return 3, 9, MetadataRequest(topics=[MetadataRequest.Topic(name=f"topic-{i}") for i in range(3)],
                                 allow_auto_topic_creation=True)


def _produce(topics: int, partitions: int, size: int, version: int = 9):
    batch = bytes(size)
    P = ProduceRequest
    return 0, version, P(acks=-1, timeout_ms=30000, topic_data=[
        P.TopicData(name=f"topic-{t}", partition_data=[
            P.TopicData.PartitionData(index=p, records=batch) for p in range(partitions)])
        for t in range(topics)])


def _fetch(partitions: int, version: int = 12):
    F = FetchRequest
    return 1, version, F(replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=52428800,
                         isolation_level=1, session_id=0, session_epoch=-1, topics=[
        F.FetchTopic(topic="events", partitions=[
            F.FetchTopic.FetchPartition(partition=p, current_leader_epoch=0, fetch_offset=1000 * p,
                                        partition_max_bytes=1048576)
            for p in range(partitions)])])


def _fetch_response(topics: int, partitions: int, records):
    F = FetchResponse
    T = F.TopicResponse
    return F(session_id=0, responses=[T(topic=f"topic-{t}", partitions=[
        T.PartitionData(partition_index=p, high_watermark=10, last_stable_offset=10, log_start_offset=0,
                        aborted_transactions=None, records=records)
        for p in range(partitions)]) for t in range(topics)])


def bench(label: str, fn, number: int) -> float:
    # many short repeats, best one: on a shared machine only the minimum is meaningful
    number = max(1, number // 100)
    timeit.repeat(fn, number=number, repeat=20)  # warm up (allocator, CPU clock)
    best = min(timeit.repeat(fn, number=number, repeat=300)) / number * 1e6
    print(f"{label:<58} {best:9.2f} µs")
    return best


def main() -> None:
    print(f"python {sys.version.split()[0]}")
    cases = [
        ("Metadata v9 request, 3 topics", _metadata()),
        ("Produce v9 request, 1 topic x 1 partition x 1 KiB", _produce(1, 1, 1024)),
        ("Produce v7 request, 1 topic x 1 partition x 1 KiB", _produce(1, 1, 1024, 7)),
        ("Produce v9 request, 3 topics x 10 partitions x 1 KiB", _produce(3, 10, 1024)),
        ("Fetch v12 request, 1 topic x 10 partitions", _fetch(10)),
        ("Fetch v11 request, 1 topic x 10 partitions", _fetch(10, 11)),
    ]
    for label, (key, version, body) in cases:
        frame = encode_request(key, version, 1, "rdkafka", body)
        view = memoryview(bytearray(frame))[4:]
        n = 20000 if len(frame) < 4096 else 5000
        d = bench(f"decode {label}", lambda: decode_request(view), n)
        _, decoded = decode_request(view)
        e = bench(f"encode {label}", lambda: encode_request(key, version, 1, "rdkafka", decoded), n)
        print(f"{'  decode + encode':<58} {d + e:9.2f} µs")
    resp = _fetch_response(3, 10, bytes(16384))
    bench("encode Fetch v12 response, 3 x 10 x 16 KiB bytes", lambda: encode_response(1, 12, 1, resp), 2000)
    resp = _fetch_response(3, 10, FileSlice(16384))
    bench("encode Fetch v12 response, 3 x 10 file slices", lambda: encode_response(1, 12, 1, resp), 5000)


if __name__ == "__main__":
    main()
