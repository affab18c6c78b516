"""``kbroker leader-election``: kafka-leader-election.sh (Kafka 2.8) over the Kafka protocol.

    kbroker leader-election --bootstrap-server HOST:PORT --election-type preferred|unclean
                            (--topic T --partition P | --all-topic-partitions | --path-to-json-file F)
                            [--admin.config FILE]

The JSON file is Kafka's: ``{"partitions": [{"topic": "t", "partition": 0}, ...]}``. The request,
ElectLeaders (43), goes to the controller (once more after a NOT_CONTROLLER, with the controller
looked up again). Output lines are Kafka's:

    Successfully completed leader election (PREFERRED) for partitions t-0, t-1
    Valid replica already elected for partitions u-0
    Error completing leader election (PREFERRED) for partition: v-3: <exception>: <message>

With --all-topic-partitions the broker leaves out the partitions that need no election, so only
elections and failures are listed. Exit status: 0 every partition elected or already led by a
valid replica, 1 some partition failed or the request failed (a line on stderr starting with
"Error: "), 2 bad arguments.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from typing import Any, TextIO

from kbroker import errors
from kbroker.protocol import API_KEYS
from kbroker.tools.client import (
    AdminClient,
    ClientError,
    KafkaApiError,
    bootstrap_servers,
    command_config,
    error_name,
    read_text_file,
)

ELECT_LEADERS = API_KEYS["ElectLeaders"]
ELECTION_TYPES = {"PREFERRED": 0, "UNCLEAN": 1}
REQUEST_TIMEOUT_MS = 30000  # the Kafka tool's admin client waits 30 s
ERROR_PREFIX = "Error: "
NOT_AUTHORIZED = "Not authorized to perform leader election"
# Java's exception classes for the codes whose name does not spell it (the rest: CamelCase + "Exception")
_JAVA_NAMES = {errors.RequestTimedOutError.code: "TimeoutException",
               errors.InvalidTopicError.code: "InvalidTopicException",
               errors.ClusterAuthorizationFailedError.code: "ClusterAuthorizationException"}

TP = tuple[str, int]


class ElectionError(Exception):
    """A failure reported as one line: "Error: <message>"."""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = sub.add_parser("leader-election",
                       help="elect preferred or unclean partition leaders (kafka-leader-election.sh)",
                       description="Run a preferred or unclean leader election for some or all partitions, "
                                   "like kafka-leader-election.sh.")
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT", type=bootstrap_servers,
                   help="the broker(s) to talk to: host:port[,host:port...]")
    p.add_argument("--election-type", required=True, type=_election_type, metavar="preferred|unclean",
                   help="preferred: move leadership back to the first assigned replica; unclean: elect a live "
                        "replica, even one out of sync, for partitions without a live leader")
    p.add_argument("--topic", help="the topic of the partition to elect (with --partition)")
    p.add_argument("--partition", type=_partition, metavar="P", help="the partition to elect (with --topic)")
    p.add_argument("--all-topic-partitions", action="store_true", help="elect every partition of the cluster")
    p.add_argument("--path-to-json-file", metavar="FILE",
                   help='the partitions to elect: {"partitions":[{"topic":..,"partition":..}]}')
    p.add_argument("--admin.config", "--command-config", dest="command_config", metavar="FILE",
                   help="Kafka client properties for a TLS or SASL listener")
    p.set_defaults(run=run, parser=p)
    return p


def _election_type(value: str) -> str:
    if value.upper() not in ELECTION_TYPES:
        raise argparse.ArgumentTypeError(f"{value!r} is not an election type: preferred or unclean")
    return value.upper()


def _partition(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a partition number") from None
    if number < 0:
        raise argparse.ArgumentTypeError(f"{value} is not a partition number (must be 0 or more)")
    return number


def _check_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """Kafka's rules: exactly one way of naming partitions, and --partition if and only if --topic."""
    chosen = [args.topic is not None, args.all_topic_partitions, args.path_to_json_file is not None]
    if sum(chosen) != 1:
        parser.error("one and only one of --topic, --all-topic-partitions and --path-to-json-file is required")
    if args.topic is not None and args.partition is None:
        parser.error("--topic needs --partition")
    if args.topic is None and args.partition is not None:
        parser.error("--partition is only allowed with --topic")


def run(args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    _check_args(args, args.parser)
    try:
        if args.path_to_json_file is not None:
            partitions: list[TP] | None = parse_partitions(read_text_file(args.path_to_json_file))
        elif args.topic is not None:
            partitions = [(args.topic, args.partition)]
        else:
            partitions = None
        with AdminClient(args.bootstrap_server, client_id="leader-election-tool",
                         timeout=REQUEST_TIMEOUT_MS / 1000 + 5, security=command_config(args)) as admin:
            code, results = elect(admin, ELECTION_TYPES[args.election_type], partitions)
        if code == errors.ClusterAuthorizationFailedError.code:
            print(NOT_AUTHORIZED, file=out)
            raise ElectionError(NOT_AUTHORIZED)
        if code:
            raise KafkaApiError(code, context="ElectLeaders")
        failed = report(args.election_type, results, out)
        if failed:
            raise ElectionError(f"{failed} replica(s) could not be elected")
        return 0
    except (ElectionError, ClientError) as exc:
        out.flush()
        print(ERROR_PREFIX + " ".join(str(exc).split()), file=err)
        return 1




def parse_partitions(text: str) -> list[TP]:
    """The partitions of an election file, in order; bad shapes and duplicates refused."""
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise ElectionError(f"the election file is not valid JSON: {exc}") from None
    if not isinstance(obj, dict) or "partitions" not in obj:
        raise ElectionError('the election file has no "partitions" list: '
                            '{"partitions":[{"topic":"t","partition":0}]}')
    entries = obj["partitions"]
    if not isinstance(entries, list):
        raise ElectionError(f'"partitions" must be a list, not {type(entries).__name__}')
    out = []
    for n, entry in enumerate(entries):
        topic = entry.get("topic") if isinstance(entry, dict) else None
        partition = entry.get("partition") if isinstance(entry, dict) else None
        if not isinstance(topic, str) or not topic:
            raise ElectionError(f'partition entry {n} needs a "topic" string: {json.dumps(entry)}')
        if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
            raise ElectionError(f'partition entry {n} needs a "partition" number (0 or more): {json.dumps(entry)}')
        out.append((topic, partition))
    again = sorted(tp for tp, count in Counter(out).items() if count > 1)
    if again:
        raise ElectionError("the election file contains duplicate partitions: " + ",".join(map(_name, again)))
    return out


def elect(admin: AdminClient, election_type: int, partitions: list[TP] | None) -> tuple[int, dict[TP, tuple[int, Any]]]:
    """ElectLeaders at the controller: (top-level error code, tp -> (error code, message))."""
    body = {"election_type": election_type, "timeout_ms": REQUEST_TIMEOUT_MS, "topic_partitions": None
            if partitions is None else [{"topic": t, "partition_id": [p for tt, p in partitions if tt == t]}
                                        for t in dict.fromkeys(t for t, _ in partitions)]}
    for attempt in range(2):
        response = admin.controller().send(ELECT_LEADERS, body, min_version=1 if election_type else 0)
        results = {(r.topic, p.partition_id): (p.error_code, p.error_message)
                   for r in response.replica_election_results for p in r.partition_result}
        moved = any(code == errors.NotControllerError.code for code, _ in results.values())
        if not moved or attempt:
            return getattr(response, "error_code", 0), results
        admin.metadata([])  # the controller moved: look it up again
    raise AssertionError("unreachable")


def report(election_type: str, results: dict[TP, tuple[int, Any]], out: TextIO) -> int:
    """Print Kafka's lines for the results; returns how many partitions failed."""
    done = sorted(tp for tp, (code, _) in results.items() if code == 0)
    noop = sorted(tp for tp, (code, _) in results.items() if code == errors.ElectionNotNeededError.code)
    failed = sorted(tp for tp in results if tp not in done and tp not in noop)
    if done:
        print(f"Successfully completed leader election ({election_type}) for partitions "
              + ", ".join(map(_name, done)), file=out)
    if noop:
        print("Valid replica already elected for partitions " + ", ".join(map(_name, noop)), file=out)
    for tp in failed:
        code, message = results[tp]
        print(f"Error completing leader election ({election_type}) for partition: {_name(tp)}: "
              f"{_exception(code, message)}", file=out)
    return len(failed)


def _name(tp: TP) -> str:
    return f"{tp[0]}-{tp[1]}"


def _exception(code: int, message: str | None) -> str:
    """How Kafka's tool prints the error: the Java exception, then its message."""
    java = _JAVA_NAMES.get(code) or "".join(w.capitalize() for w in error_name(code).split("_")) + "Exception"
    return f"org.apache.kafka.common.errors.{java}: {message or error_name(code)}"
