"""``kbroker topics``: kafka-topics.sh over the Kafka protocol.

    kbroker topics --bootstrap-server HOST:PORT --create --topic T [--partitions N]
                   [--replication-factor R] [--config k=v ...] [--if-not-exists]
    kbroker topics --bootstrap-server HOST:PORT --create --topic T --replica-assignment 1:2,2:3,3:1 [...]
    kbroker topics --bootstrap-server HOST:PORT --list [--topic REGEX] [--exclude-internal]
    kbroker topics --bootstrap-server HOST:PORT --describe [--topic REGEX] [--exclude-internal]
                   [--topics-with-overrides | --unavailable-partitions | --under-replicated-partitions]
    kbroker topics --bootstrap-server HOST:PORT --alter --topic REGEX --partitions N
                   [--replica-assignment 1:2,2:3,3:1,...] [--if-exists]
    kbroker topics --bootstrap-server HOST:PORT --delete --topic REGEX [--if-exists]

As in Kafka, --topic of the other actions is a regular expression matched against whole names
("a.*", or "a,b" for either), and the output is Kafka's: "Created topic T.", names one per line,
and for --describe a tab-separated header line per topic followed by one line per partition.
--replica-assignment is kafka-topics.sh's: partitions separated by commas, each one's broker ids by
colons. With --create it gives the partitions (and so their count and replication factor); with
--alter it lists every partition, and the ones the topic already has are left out of the request.
Exit status: 0 done, 1 an error from the broker or the network (one line on stderr, Kafka's
"Error while executing topic command : ..."), 2 bad arguments.
"""
from __future__ import annotations

import argparse
import base64
import re
import sys
import uuid
from typing import Any, TextIO

from kbroker.tools.client import (
    AdminClient,
    ClientError,
    KafkaApiError,
    add_command_config,
    add_timeout_option,
    add_tool_parser,
    command_config,
)

ERROR_PREFIX = "Error while executing topic command : "
TOPIC_ALREADY_EXISTS = 36
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
ZERO_UUID = uuid.UUID(int=0)


class TopicCommandError(Exception):
    """A failure to report as "Error while executing topic command : <message>"."""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = add_tool_parser(sub, "topics", run, help="create, list, describe, alter and delete topics (kafka-topics.sh)",
                        description="Create, list, describe, alter and delete topics, like kafka-topics.sh.",
                        actions={"--create": "create a topic",
                                 "--list": "list the topics",
                                 "--describe": "describe topics and their partitions",
                                 "--alter": "add partitions to topics",
                                 "--delete": "delete topics"})
    p.add_argument("--topic", metavar="TOPIC",
                   help="the topic to create; for the other actions a regular expression of topic names")
    p.add_argument("--partitions", type=int, metavar="N",
                   help="partitions of the new topic (--create; default: the broker's num.partitions), "
                        "or the new partition count (--alter)")
    p.add_argument("--replication-factor", type=int, metavar="R",
                   help="replicas per partition of the new topic (default: default.replication.factor)")
    p.add_argument("--replica-assignment", metavar="B:B,B:B,...",
                   help="the replicas of each partition, partitions separated by commas and broker ids by colons "
                        "(--create, instead of --partitions and --replication-factor; --alter, listing every "
                        "partition: those the topic has are left out)")
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                   help="a topic config override for the new topic (repeatable)")
    p.add_argument("--if-not-exists", action="store_true", help="with --create: succeed if the topic exists")
    p.add_argument("--if-exists", action="store_true",
                   help="with --alter, --delete or --describe: succeed if no topic matches")
    p.add_argument("--exclude-internal", action="store_true", help="leave out internal topics (--list, --describe)")
    p.add_argument("--topics-with-overrides", action="store_true",
                   help="with --describe: only topics with config overrides, without their partitions")
    p.add_argument("--unavailable-partitions", action="store_true",
                   help="with --describe: only partitions without a leader")
    p.add_argument("--under-replicated-partitions", action="store_true",
                   help="with --describe: only partitions whose ISR is smaller than their replicas")
    add_timeout_option(p, 30000, "how long to wait for each answer")
    add_command_config(p)
    return p


def parse_replica_assignment(text: str) -> list[list[int]]:
    """kafka-topics.sh's --replica-assignment ("1:2,2:3,3:1"): each partition's broker ids, with its
    checks (no duplicate broker in a partition, the same replication factor everywhere) and a clear
    ValueError for what it would not parse (an empty part, a word)."""
    partitions: list[list[int]] = []
    for index, part in enumerate(text.split(",")):
        replicas = []
        for item in part.split(":"):
            item = item.strip()
            if not item:
                raise ValueError(f"partition {index} ({part.strip()!r}) has an empty broker id")
            if not re.fullmatch(r"[+-]?[0-9]+", item):
                raise ValueError(f"{item!r} in partition {index} is not a broker id")
            replicas.append(int(item))
        duplicates = sorted({b for b in replicas if replicas.count(b) > 1})
        if duplicates:
            raise ValueError("Partition replica lists may not contain duplicate entries: "
                             + ",".join(map(str, duplicates)))
        if partitions and len(replicas) != len(partitions[0]):
            raise ValueError(f"Partition {index} has different replication factor: {':'.join(map(str, replicas))} "
                             f"({len(replicas)} replicas, partition 0 has {len(partitions[0])})")
        partitions.append(replicas)
    return partitions


def _check_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> dict[str, str]:
    """Kafka's option rules; parser.error (exit 2) on a violation. Returns the parsed --config, and
    leaves the parsed --replica-assignment in ``args.assignment`` (None without it)."""
    action = next(a for a in ("create", "list", "describe", "alter", "delete") if getattr(args, a))

    def only(option: str, value: Any, allowed: tuple[str, ...]) -> None:
        if value and action not in allowed:
            parser.error(f"{option} can only be used with " + " or ".join(f"--{a}" for a in allowed))

    if action in ("create", "alter", "delete") and not args.topic:
        parser.error(f"--{action} needs --topic")
    if action == "alter" and args.partitions is None:
        parser.error("--alter needs --partitions (topic configs are changed with AlterConfigs, not here)")
    only("--partitions", args.partitions is not None, ("create", "alter"))
    only("--replication-factor", args.replication_factor is not None, ("create",))
    only("--replica-assignment", args.replica_assignment is not None, ("create", "alter"))
    if action == "create" and args.replica_assignment is not None and (
            args.partitions is not None or args.replication_factor is not None):
        parser.error("--replica-assignment cannot be used with --partitions or --replication-factor in --create "
                     "(the assignment gives both)")
    args.assignment = None
    if args.replica_assignment is not None:
        try:
            args.assignment = parse_replica_assignment(args.replica_assignment)
        except ValueError as exc:
            parser.error(f"--replica-assignment {args.replica_assignment!r}: {exc}")
    only("--config", args.config, ("create",))
    only("--if-not-exists", args.if_not_exists, ("create",))
    only("--if-exists", args.if_exists, ("alter", "delete", "describe"))
    only("--exclude-internal", args.exclude_internal, ("list", "describe"))
    for option in ("topics_with_overrides", "unavailable_partitions", "under_replicated_partitions"):
        only("--" + option.replace("_", "-"), getattr(args, option), ("describe",))
    if args.partitions is not None and args.partitions < 1:
        parser.error("--partitions must be at least 1")
    if args.replication_factor is not None and args.replication_factor < 1:
        parser.error("--replication-factor must be at least 1")
    if args.timeout <= 0:
        parser.error("--timeout must be positive")
    configs: dict[str, str] = {}
    for item in args.config:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            parser.error(f"--config {item!r} is not KEY=VALUE")
        configs[key.strip()] = value.strip()
    return configs


def run(args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    configs = _check_args(args, args.parser)
    try:
        with AdminClient(args.bootstrap_server, timeout=args.timeout / 1000, security=command_config(args)) as admin:
            if args.create:
                create(admin, args, configs, out)
            elif args.list:
                for name in _matching(admin, args.topic, args.exclude_internal):
                    print(name, file=out)
            elif args.describe:
                describe(admin, args, out)
            elif args.alter:
                alter(admin, args)
            elif args.delete:
                delete(admin, args)
    except (TopicCommandError, ClientError) as exc:
        out.flush()
        print(ERROR_PREFIX + str(exc), file=err)
        return 1
    return 0


def _include_list(expr: str) -> re.Pattern[str]:
    """Kafka's IncludeList: commas mean "or", spaces and surrounding quotes are dropped."""
    raw = re.sub(r"""["']+$""", "", re.sub(r"""^["']+""", "", expr.replace(",", "|").replace(" ", "")))
    try:
        return re.compile(raw)
    except re.error as exc:
        raise TopicCommandError(f"--topic {expr!r} is not a valid regular expression: {exc}") from None


def _matching(admin: AdminClient, expr: str | None, exclude_internal: bool = False,
              topics: list[Any] | None = None) -> list[str]:
    names = [t.name for t in (topics if topics is not None else admin.list_topics())]
    if expr is not None:
        pattern = _include_list(expr)
        names = [n for n in names if pattern.fullmatch(n)]
    if exclude_internal:
        names = [n for n in names if n not in INTERNAL_TOPICS]
    return sorted(names)


def _ensure_found(names: list[str], expr: str, if_exists: bool) -> None:
    if not names and not if_exists:
        raise TopicCommandError(f"Topic '{expr}' does not exist as expected")


def _fail_on(results: list[Any], what: str, ignore: frozenset[int] = frozenset()) -> None:
    for r in results:
        if r.error_code and r.error_code not in ignore:
            if r.error_code == TOPIC_ALREADY_EXISTS:
                raise TopicCommandError(f"Topic '{r.name}' already exists.")
            raise KafkaApiError(r.error_code, getattr(r, "error_message", None), context=f"{what} '{r.name}'")


def create(admin: AdminClient, args: argparse.Namespace, configs: dict[str, str], out: TextIO) -> None:
    topic = {
        "name": args.topic,
        "num_partitions": -1 if args.partitions is None else args.partitions,
        "replication_factor": -1 if args.replication_factor is None else args.replication_factor,
        "assignments": [{"partition_index": i, "broker_ids": replicas}
                        for i, replicas in enumerate(args.assignment or [])],
        "configs": [{"name": k, "value": v} for k, v in configs.items()],
    }
    results = admin.create_topics([topic])
    if args.if_not_exists and all(r.error_code == TOPIC_ALREADY_EXISTS for r in results):
        return
    _fail_on(results, "cannot create topic")
    print(f"Created topic {args.topic}.", file=out)


def alter(admin: AdminClient, args: argparse.Namespace) -> None:
    topics = admin.list_topics()
    names = _matching(admin, args.topic, topics=topics)
    _ensure_found(names, args.topic, args.if_exists)
    if not names:
        return
    assignments = None
    if args.assignment is not None:  # as kafka-topics.sh: the partitions each topic has are dropped
        current = {t.name: len(t.partitions) for t in topics}
        assignments = {n: args.assignment[current[n]:] for n in names}
    _fail_on(admin.create_partitions({n: args.partitions for n in names}, assignments=assignments),
             "cannot add partitions to topic")


def delete(admin: AdminClient, args: argparse.Namespace) -> None:
    names = _matching(admin, args.topic)
    _ensure_found(names, args.topic, args.if_exists)
    if names:
        _fail_on(admin.delete_topics(names), "cannot delete topic")


def format_topic_id(topic_id: uuid.UUID) -> str:
    """Kafka's Uuid.toString(): url-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def describe(admin: AdminClient, args: argparse.Namespace, out: TextIO) -> None:
    all_topics = admin.list_topics()
    names = _matching(admin, args.topic, args.exclude_internal, all_topics)
    if args.topic is not None:
        _ensure_found(names, args.topic, args.if_exists)
    if not names:
        return
    meta = {t.name: t for t in all_topics}
    configs = admin.describe_topic_configs(names)
    partition_filter = args.unavailable_partitions or args.under_replicated_partitions
    for name in names:
        t = meta.get(name)
        if t is None or t.error_code:
            raise KafkaApiError(t.error_code if t is not None else 3, context=f"Metadata of topic '{name}'")
        result = configs.get(name)
        if result is not None and result.error_code:
            raise KafkaApiError(result.error_code, result.error_message, context=f"configs of topic '{name}'")
        overrides = [f"{c.name}={'' if c.value is None else c.value}"
                     for c in (result.configs if result is not None else []) if not c.is_default]
        partitions = sorted(t.partitions, key=lambda p: p.partition_index)
        if args.topics_with_overrides and not overrides:
            continue
        if not partition_filter:
            line = f"Topic: {name}"
            if getattr(t, "topic_id", ZERO_UUID) != ZERO_UUID:
                line += f"\tTopicId: {format_topic_id(t.topic_id)}"
            replication = len(partitions[0].replica_nodes) if partitions else 0
            line += f"\tPartitionCount: {len(partitions)}\tReplicationFactor: {replication}"
            line += f"\tConfigs: {','.join(overrides)}"
            print(line, file=out)
        if args.topics_with_overrides:
            continue
        for p in partitions:
            if args.unavailable_partitions and p.leader_id >= 0:
                continue
            if args.under_replicated_partitions and len(p.isr_nodes) >= len(p.replica_nodes):
                continue
            leader = str(p.leader_id) if p.leader_id >= 0 else "none"
            print(f"\tTopic: {name}\tPartition: {p.partition_index}\tLeader: {leader}"
                  f"\tReplicas: {','.join(map(str, p.replica_nodes))}\tIsr: {','.join(map(str, p.isr_nodes))}",
                  file=out)
