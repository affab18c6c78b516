"""``kbroker log-dirs``: kafka-log-dirs.sh (Kafka 2.8) over the Kafka protocol.

    kbroker log-dirs --describe --bootstrap-server HOST:PORT [--broker-list 1,2] [--topic-list a,b]

Asks each broker (every live one without --broker-list) for its log dirs with DescribeLogDirs (35)
and prints Kafka's three lines: "Querying brokers for log directories information", "Received log
directory information from brokers 1,2", then one JSON line: per broker, per log dir, the partitions
with their size, offset lag and whether the replica is a future one (a move between log dirs in
progress). A broker named in --broker-list that is not in the cluster gets Kafka's ERROR line instead.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from kbroker import errors
from kbroker.protocol import API_KEYS
from kbroker.tools.client import AdminClient, ClientError, add_command_config, add_tool_parser, command_config

DESCRIBE_LOG_DIRS = API_KEYS["DescribeLogDirs"]
ERROR_PREFIX = "Error: "


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = add_tool_parser(sub, "log-dirs", run, help="describe the log dirs of brokers (kafka-log-dirs.sh)",
                        description="Query brokers for their log directories, like kafka-log-dirs.sh.",
                        actions={"--describe": "describe the specified log directories on the specified brokers"})
    p.add_argument("--broker-list", metavar="IDS", default=None,
                   help='the brokers to query, "0,1,2" (default: every broker in the cluster)')
    p.add_argument("--topic-list", metavar="TOPICS", default="",
                   help='only these topics\' partitions, "t1,t2" (default: every topic)')
    add_command_config(p)
    return p


def _ids(text: str) -> set[int]:
    try:
        return {int(part) for part in text.split(",") if part.strip()}
    except ValueError:
        raise ClientError(f"--broker-list {text!r} is not a comma-separated list of broker ids") from None


def _exception_class(code: int) -> str:
    """Kafka's JSON names a dir's error by the exception class the Java client raises."""
    stem = errors.for_code(code).__name__.removesuffix("Error")
    return f"org.apache.kafka.common.errors.{stem}Exception"


def describe(admin: AdminClient, broker_list: str | None, topic_list: str, out: TextIO) -> int:
    cluster = sorted(b.node_id for b in admin.metadata([]).brokers)
    wanted = sorted(_ids(broker_list)) if broker_list is not None else cluster
    missing = sorted(set(wanted) - set(cluster))
    if missing:
        print(f"ERROR: The given brokers do not exist from --broker-list: {','.join(map(str, missing))}. "
              f"Current existent brokers: {','.join(map(str, cluster))}", file=out)
        return 1
    topics = {t for t in topic_list.split(",") if t}
    print("Querying brokers for log directories information", file=out)
    brokers: list[dict[str, Any]] = []
    for broker in wanted:
        response = admin.node(broker).send(DESCRIBE_LOG_DIRS, {"topics": None})
        dirs = []
        for result in response.results:
            partitions = [{"partition": f"{t.name}-{p.partition_index}", "size": p.partition_size,
                           "offsetLag": p.offset_lag, "isFuture": p.is_future_key}
                          for t in result.topics if not topics or t.name in topics for p in t.partitions]
            dirs.append({"logDir": result.log_dir,
                         "error": _exception_class(result.error_code) if result.error_code else None,
                         "partitions": partitions})
        brokers.append({"broker": broker, "logDirs": dirs})
    print(f"Received log directory information from brokers {','.join(map(str, wanted))}", file=out)
    print(json.dumps({"version": 1, "brokers": brokers}, separators=(",", ":")), file=out)
    return 0


def run(args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    try:
        with AdminClient(args.bootstrap_server, client_id="log-dirs-tool", security=command_config(args)) as admin:
            return describe(admin, args.broker_list, args.topic_list, out)
    except ClientError as exc:
        out.flush()
        print(ERROR_PREFIX + " ".join(str(exc).split()), file=err)
        return 1
