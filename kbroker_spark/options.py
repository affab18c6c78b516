"""The source's options (Spark's Kafka source's names) and what they resolve to: librdkafka's
configuration, the topics subscribed, their watermarks, starting and ending offsets.
"""
from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where used at run time: the driver needs confluent_kafka only to plan
    from confluent_kafka import Consumer


SCHEMA = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
          "headers array<struct<key: string, value: binary>>")
EARLIEST, LATEST = -2, -1
DEFAULT_TIMEOUT = 60.0

Options = dict[str, str]                          # lower-cased option name -> value
Marks = dict[str, dict[str, tuple[int, int]]]     # topic -> partition (a string, as in JSON) -> (low, high)
Offsets = dict[str, dict[str, int]]               # topic -> partition -> offset: Spark's offsets for a stream
Record = tuple[Any, ...]                          # one row of SCHEMA
ClientConfig = dict[str, str | int | float | bool]  # librdkafka's configuration


def client_config(options: Options) -> ClientConfig:
    servers = options.get("kafka.bootstrap.servers")
    if not servers:
        raise ValueError("the kbroker data source needs the kafka.bootstrap.servers option")
    conf: ClientConfig = {"bootstrap.servers": servers}
    for k, v in options.items():
        if k.startswith("kafka.") and k != "kafka.bootstrap.servers":
            conf[k[len("kafka."):]] = v
    return conf


def option_timeout(options: Options) -> float:
    return float(options.get("kbroker.timeout.ms", DEFAULT_TIMEOUT * 1000)) / 1000


def new_consumer(options: Options, **extra: Any) -> Consumer:
    from confluent_kafka import Consumer

    conf = {"group.id": "kbroker-spark", "enable.auto.commit": False, "enable.partition.eof": True,
            "isolation.level": "read_committed", **client_config(options), **extra}
    return Consumer(conf)


def resolve_topics(options: Options, consumer: Consumer) -> dict[str, int]:
    """topic -> partition count for subscribe / subscribePattern."""
    md = consumer.list_topics(timeout=option_timeout(options))
    if options.get("subscribe"):
        names = [t.strip() for t in options["subscribe"].split(",") if t.strip()]
        missing = [t for t in names if t not in md.topics or md.topics[t].error is not None]
        if missing:
            raise ValueError(f"unknown topics: {missing}")
    elif options.get("subscribepattern"):
        rx = re.compile(options["subscribepattern"])
        names = sorted(t for t in md.topics if rx.fullmatch(t) and not t.startswith("__"))
    else:
        raise ValueError("the kbroker source needs subscribe or subscribePattern")
    return {t: len(md.topics[t].partitions) for t in names}


def watermarks(options: Options, consumer: Consumer, topics: dict[str, int]) -> Marks:
    from confluent_kafka import TopicPartition

    out: Marks = {}
    for t, n in topics.items():
        out[t] = {}
        for p in range(n):
            lo, hi = consumer.get_watermark_offsets(TopicPartition(t, p), timeout=option_timeout(options), cached=False)
            out[t][str(p)] = (lo, hi)
    return out


def resolve_offsets(spec: str | None, default: str, marks: Marks) -> Offsets:
    """startingOffsets / endingOffsets -> {topic: {"p": offset}}."""
    spec = (spec or default).strip()
    if spec.startswith("{"):
        explicit, fallback = json.loads(spec), default
    else:
        explicit, fallback = {}, spec
    if fallback not in ("earliest", "latest"):
        raise ValueError(f"offsets must be earliest, latest or JSON, not {spec!r}")
    out: Offsets = {}
    for t, parts in marks.items():
        out[t] = {}
        for p, (lo, hi) in parts.items():
            v = int(explicit.get(t, {}).get(p, EARLIEST if fallback == "earliest" else LATEST))
            out[t][p] = lo if v == EARLIEST else hi if v == LATEST else v
    return out
