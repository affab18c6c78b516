"""``kbroker reassign``: kafka-reassign-partitions.sh (Kafka 2.8, --bootstrap-server mode) over the
Kafka protocol.

    kbroker reassign --bootstrap-server HOST:PORT --generate --topics-to-move-json-file F
                     --broker-list 1,2,3 [--disable-rack-aware]
    kbroker reassign --bootstrap-server HOST:PORT --execute --reassignment-json-file F
                     [--additional] [--throttle B/S] [--timeout MS]
                     [--replica-alter-log-dirs-throttle B/S]
    kbroker reassign --bootstrap-server HOST:PORT --verify --reassignment-json-file F [--preserve-throttles]
    kbroker reassign --bootstrap-server HOST:PORT --list
    kbroker reassign --bootstrap-server HOST:PORT --cancel --reassignment-json-file F [--preserve-throttles]

The files are Kafka's: ``{"topics":[{"topic":"t"}],"version":1}`` for --generate and
``{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2],"log_dirs":["any","any"]}]}``
for the others (``log_dirs`` optional: "any", or the absolute log dir the replica on that broker
should live in). --execute sends AlterPartitionReassignments (45) to the controller for the partitions
whose replica set changes, then AlterReplicaLogDirs (34) to each broker with a log dir to move to
(retried until --timeout while the replica does not exist there yet); --list and --verify read
ListPartitionReassignments (46) and Metadata, --verify also DescribeLogDirs (35) for the log dir
moves; --cancel sends null replicas.

Output lines are Kafka's. Exit status: 0 done (for --verify: every partition reached its target),
1 a failure (one line on stderr starting with "Error: ") or, for --verify, some partition not
(yet) at its target; 2 bad arguments. The throttles (--throttle, --replica-alter-log-dirs-throttle) are
set before the reassignment starts and cleared by --verify once nothing moves any more
(``reassign_throttle``).

One module, as kafka-reassign-partitions.sh is one tool (Kafka's ReassignPartitionsCommand.scala): its modes
share the JSON files, their parsing and their checks.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from typing import Any, TextIO, TypeGuard, TypeVar

from kbroker import errors
from kbroker.protocol import API_KEYS
from kbroker.tools import reassign_throttle as throttles
from kbroker.tools.client import (
    AdminClient,
    ClientError,
    KafkaApiError,
    add_command_config,
    add_timeout_option,
    add_tool_parser,
    command_config,
    error_name,
    read_text_file,
)

ERROR_PREFIX = "Error: "
ANY_LOG_DIR = "any"
ACTIONS = ("generate", "execute", "verify", "list", "cancel")
ALTER = API_KEYS["AlterPartitionReassignments"]
LIST = API_KEYS["ListPartitionReassignments"]
ALTER_LOG_DIRS = API_KEYS["AlterReplicaLogDirs"]
DESCRIBE_LOG_DIRS = API_KEYS["DescribeLogDirs"]

CANNOT_EXECUTE_BECAUSE_OF_EXISTING = (
    "Cannot execute because there is an existing partition assignment.  Use --additional to override this and "
    "create a new partition assignment in addition to the existing one. The --additional flag can also be used "
    "to change the throttle by resubmitting the current reassignment.")

TP = tuple[str, int]
Replica = tuple[str, int, int]  # topic, partition, broker: Kafka's TopicPartitionReplica
_Item = TypeVar("_Item", str, int, TP)  # what a plan may list twice


class ReassignError(Exception):
    """A failure reported as one line: "Error: <message>"."""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = add_tool_parser(sub, "reassign", run,
                        help="move partition replicas between brokers (kafka-reassign-partitions.sh)",
                        description="Generate, execute, verify, list and cancel partition reassignments, "
                                    "like kafka-reassign-partitions.sh.",
                        actions={
                            "--generate": "propose an assignment of the topics in --topics-to-move-json-file "
                                          "over --broker-list",
                            "--execute": "start the reassignment in --reassignment-json-file",
                            "--verify": "check whether the reassignment in --reassignment-json-file completed",
                            "--list": "list the reassignments in progress",
                            "--cancel": "cancel the reassignments in progress of the partitions in "
                                        "--reassignment-json-file",
                        })
    p.add_argument("--reassignment-json-file", metavar="FILE",
                   help='{"version":1,"partitions":[{"topic":..,"partition":..,"replicas":[..]}]}')
    p.add_argument("--topics-to-move-json-file", metavar="FILE", help='{"topics":[{"topic":..}],"version":1}')
    p.add_argument("--broker-list", metavar="IDS", help='the brokers to spread the topics over: "0,1,2"')
    p.add_argument("--disable-rack-aware", action="store_true", help="with --generate: ignore the brokers' racks")
    p.add_argument("--additional", action="store_true",
                   help="with --execute: start even though other reassignments are in progress")
    p.add_argument("--throttle", type=int, default=-1, metavar="B/S",
                   help="with --execute: the movement of partitions between brokers is throttled to this many "
                        "bytes/s (leader and follower rates of the brokers involved)")
    p.add_argument("--replica-alter-log-dirs-throttle", type=int, default=-1, metavar="B/S",
                   help="with --execute: the movement of replicas between log dirs of a broker is throttled to "
                        "this many bytes/s")
    p.add_argument("--preserve-throttles", action="store_true",
                   help="with --verify or --cancel: leave the throttles in place")
    add_timeout_option(p, 10000, "how long the controller may take to accept the request")
    add_command_config(p)
    return p


# Kafka's rules: what each action needs and what it tolerates (joptsimple's "can't be used with").
_REQUIRED = {
    "generate": ("topics_to_move_json_file", "broker_list"),
    "execute": ("reassignment_json_file",),
    "verify": ("reassignment_json_file",),
    "cancel": ("reassignment_json_file",),
    "list": (),
}
_PERMITTED = {
    "generate": ("disable_rack_aware",),
    "execute": ("additional", "throttle", "replica_alter_log_dirs_throttle", "timeout"),
    "verify": ("preserve_throttles",),
    "cancel": ("preserve_throttles", "timeout"),
    "list": (),
}
_DEFAULTS = {"reassignment_json_file": None, "topics_to_move_json_file": None, "broker_list": None,
             "disable_rack_aware": False, "additional": False, "throttle": -1,
             "replica_alter_log_dirs_throttle": -1, "preserve_throttles": False, "timeout": 10000}


def _option(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _check_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> str:
    action = next(a for a in ACTIONS if getattr(args, a))
    for dest in _REQUIRED[action]:
        if getattr(args, dest) is None:
            parser.error(f"--{action} needs {_option(dest)}")
    for dest, default in _DEFAULTS.items():
        if getattr(args, dest) != default and dest not in _REQUIRED[action] and dest not in _PERMITTED[action]:
            parser.error(f"{_option(dest)} can't be used with --{action}")
    if args.timeout <= 0:
        parser.error("--timeout must be positive")
    return action


def run(args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    action = _check_args(args, args.parser)
    try:
        with AdminClient(args.bootstrap_server, client_id="reassign-partitions-tool",
                         security=command_config(args)) as admin:
            if action == "generate":
                generate(admin, read_text_file(args.topics_to_move_json_file), args.broker_list,
                         not args.disable_rack_aware, out)
                return 0
            if action == "execute":
                execute(admin, read_text_file(args.reassignment_json_file), args.additional, args.throttle,
                        args.replica_alter_log_dirs_throttle, args.timeout, out)
                return 0
            if action == "verify":
                return 0 if verify(admin, read_text_file(args.reassignment_json_file), out,
                                   args.preserve_throttles) else 1
            if action == "list":
                print(list_text(list_reassignments(admin)), file=out)
                return 0
            cancel(admin, read_text_file(args.reassignment_json_file), args.timeout, out, args.preserve_throttles)
            return 0
    except (ReassignError, ClientError) as exc:
        out.flush()
        print(ERROR_PREFIX + " ".join(str(exc).split()), file=err)
        return 1




def _load(text: str, what: str) -> dict[str, Any]:
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise ReassignError(f"the {what} is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ReassignError(f"the {what} must be a JSON object, not {type(obj).__name__}")
    version = obj.get("version", 1)
    if version != 1 or isinstance(version, bool):
        raise ReassignError(f"Not supported version field value {version!r} in the {what} (only 1 is)")
    return obj


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _duplicates(items: list[_Item]) -> list[_Item]:
    """The items given more than once, sorted."""
    return sorted(item for item, n in Counter(items).items() if n > 1)


def _refuse_duplicates(items: list[_Item], what: str) -> None:
    again = _duplicates(items)
    if again:
        raise ReassignError(f"{what} contains duplicate entries: {','.join(map(str, again))}")


def parse_topics(text: str) -> list[str]:
    """The topic names of a topics-to-move file, in order; duplicates and bad shapes refused."""
    obj = _load(text, "topics-to-move file")
    entries = obj.get("topics")
    if not isinstance(entries, list):
        raise ReassignError('the topics-to-move file needs "topics": a list of {"topic": NAME}')
    names = []
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("topic"), str) or not entry["topic"]:
            raise ReassignError(f'the topics-to-move file has an entry that is not {{"topic": NAME}}: '
                                f'{json.dumps(entry)}')
        names.append(entry["topic"])
    if not names:
        raise ReassignError("the topics-to-move file names no topic")
    _refuse_duplicates(names, "List of topics to reassign")
    return names


def parse_reassignment(text: str) -> list[tuple[TP, list[int]]]:
    """The (topic, partition) -> replicas entries of a reassignment file, in order, duplicates
    kept (execute refuses them). log_dirs must match the replicas in length and be "any"."""
    obj = _load(text, "reassignment file")
    entries = obj.get("partitions")
    if not isinstance(entries, list):
        raise ReassignError('the reassignment file needs "partitions": a list of '
                            '{"topic": NAME, "partition": N, "replicas": [IDS]}')
    out = []
    for entry in entries:
        if not isinstance(entry, dict):
            raise ReassignError(f"the reassignment file has a partition entry that is not an object: "
                                f"{json.dumps(entry)}")
        topic, partition, replicas = entry.get("topic"), entry.get("partition"), entry.get("replicas")
        if not isinstance(topic, str) or not topic:
            raise ReassignError(f'a partition entry has no "topic" string: {json.dumps(entry)}')
        if not _is_int(partition) or partition < 0:
            raise ReassignError(f'a partition entry has no "partition" number: {json.dumps(entry)}')
        name = f"{topic}-{partition}"
        if not isinstance(replicas, list) or not all(_is_int(r) for r in replicas):
            raise ReassignError(f'{name}: "replicas" must be a list of broker ids, not {json.dumps(replicas)}')
        log_dirs = entry.get("log_dirs")
        if log_dirs is not None:
            if not isinstance(log_dirs, list) or not all(isinstance(d, str) for d in log_dirs):
                raise ReassignError(f'{name}: "log_dirs" must be a list of strings, not {json.dumps(log_dirs)}')
            if len(log_dirs) != len(replicas):
                raise ReassignError(f"Size of replicas list {replicas} is different from size of log dirs list "
                                    f"{log_dirs} for partition {name}")
        out.append(((topic, partition), list(replicas)))
    return out


def parse_log_dir_moves(text: str) -> dict[Replica, str]:
    """The replicas given a log dir other than "any" (``parse_reassignment`` checked the file)."""
    moves: dict[Replica, str] = {}
    for entry in _load(text, "reassignment file").get("partitions") or []:
        for broker, log_dir in zip(entry["replicas"], entry.get("log_dirs") or []):
            if log_dir != ANY_LOG_DIR:
                moves[(entry["topic"], entry["partition"], broker)] = log_dir
    return moves


def _replica(r: Replica) -> str:
    return f"{r[0]}-{r[1]}-{r[2]}"


def check_execute(entries: list[tuple[TP, list[int]]]) -> dict[TP, list[int]]:
    """Kafka's parseExecuteAssignmentArgs checks: nothing empty, no partition twice, no broker
    twice in one replica list."""
    if not entries:
        raise ReassignError("Partition reassignment list cannot be empty")
    empty = [_name(tp) for tp, replicas in entries if not replicas]
    if empty:
        raise ReassignError(f"Partition replica list cannot be empty: {','.join(empty)}")
    twice = _duplicates([tp for tp, _ in entries])
    if twice:
        raise ReassignError("Partition reassignment contains duplicate topic partitions: "
                            + ",".join(map(_name, twice)))
    duplicated = []
    for tp, replicas in entries:
        again = _duplicates(replicas)
        if again:
            duplicated.append(f"{_name(tp)} contains multiple entries for {','.join(map(str, again))}")
    if duplicated:
        raise ReassignError("Partition replica lists may not contain duplicate entries: " + ". ".join(duplicated))
    return dict(entries)


def _name(tp: TP) -> str:
    return f"{tp[0]}-{tp[1]}"


def _plural(n: int) -> str:
    return "" if n == 1 else "s"


def format_json(assignment: dict[TP, list[int]]) -> str:
    """Kafka's formatAsReassignmentJson: compact, partitions sorted by topic then partition."""
    return json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": list(assignment[(t, p)]),
         "log_dirs": [ANY_LOG_DIR] * len(assignment[(t, p)])} for t, p in sorted(assignment)]},
        separators=(",", ":"))


# --- the cluster ---------------------------------------------------------------------------

def _assignments(admin: AdminClient, topics: list[str]) -> tuple[dict[TP, list[int]], Any]:
    """Every partition's replicas for `topics` (each must exist), and the Metadata response."""
    meta = admin.metadata(sorted(set(topics)))
    out: dict[TP, list[int]] = {}
    for t in meta.topics:
        if t.error_code == errors.UnknownTopicOrPartitionError.code:
            raise ReassignError(f"Topic '{t.name}' not found.")
        if t.error_code:
            raise KafkaApiError(t.error_code, context=f"Metadata of topic '{t.name}'")
        for p in t.partitions:
            out[(t.name, p.partition_index)] = list(p.replica_nodes)
    return out, meta


def list_reassignments(admin: AdminClient, partitions: list[TP] | None = None
                       ) -> dict[TP, tuple[list[int], list[int], list[int]]]:
    """ListPartitionReassignments at the controller: tp -> (replicas, adding, removing)."""
    topics = None
    if partitions is not None:
        by_topic: dict[str, list[int]] = {}
        for t, p in sorted(set(partitions)):
            by_topic.setdefault(t, []).append(p)
        topics = [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]
    response = admin.controller().send(LIST, {"timeout_ms": int(admin.timeout * 1000), "topics": topics})
    if response.error_code:
        raise KafkaApiError(response.error_code, response.error_message, context="ListPartitionReassignments")
    return {(t.name, p.partition_index): (list(p.replicas), list(p.adding_replicas), list(p.removing_replicas))
            for t in response.topics for p in t.partitions}


def alter_reassignments(admin: AdminClient, moves: dict[TP, list[int] | None], timeout_ms: int
                        ) -> dict[TP, str]:
    """AlterPartitionReassignments at the controller (None cancels): tp -> error text, for the
    partitions that failed."""
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (t, p), replicas in sorted(moves.items()):
        by_topic.setdefault(t, []).append({"partition_index": p, "replicas": replicas})
    response = admin.controller().send(ALTER, {
        "timeout_ms": timeout_ms, "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]})
    if response.error_code:
        raise KafkaApiError(response.error_code, response.error_message, context="AlterPartitionReassignments")
    failed: dict[TP, str] = {}
    answered = set()
    for t in response.responses:
        for p in t.partitions:
            answered.add((t.name, p.partition_index))
            if p.error_code:
                name = error_name(p.error_code)
                failed[(t.name, p.partition_index)] = f"{p.error_message} ({name})" if p.error_message else name
    for tp in moves:
        if tp not in answered:
            failed[tp] = "no answer for this partition"
    return failed


def _failures(what: str, failed: dict[TP, str]) -> ReassignError:
    return ReassignError(f"{what} partition reassignment{_plural(len(failed))} failed: "
                         + "; ".join(f"{_name(tp)}: {failed[tp]}" for tp in sorted(failed)))


# --- actions -------------------------------------------------------------------------------

def _broker_ids(text: str) -> list[int]:
    try:
        ids = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ReassignError(f"--broker-list {text!r} is not a comma-separated list of broker ids") from None
    if not ids:
        raise ReassignError("--broker-list names no broker")
    _refuse_duplicates(ids, "Broker list")
    return ids


def generate(admin: AdminClient, topics_json: str, broker_list: str, rack_aware: bool, out: TextIO
             ) -> tuple[dict[TP, list[int]], dict[TP, list[int]]]:
    from zk_compat.assignment import RackAwareMode, assign_replicas_to_brokers, broker_metadatas
    from zk_compat.servers import servers_of

    brokers = _broker_ids(broker_list)
    topics = parse_topics(topics_json)
    current, meta = _assignments(admin, topics)
    known = {b.node_id: getattr(b, "rack", None) for b in meta.brokers}
    # brokers Metadata shows at one host are one server: their replicas are kept apart as racks are (issue 24)
    servers = servers_of({b.node_id: [b.host] for b in meta.brokers})
    unknown = [b for b in brokers if b not in known]
    if unknown:
        raise ReassignError(f"Unknown broker id{_plural(len(unknown))} {','.join(map(str, unknown))} in --broker-list")
    try:
        with errors.translate_zk():
            metas = broker_metadatas([(b, known[b]) for b in brokers],
                                     RackAwareMode.ENFORCED if rack_aware else RackAwareMode.DISABLED, servers)
    except errors.KafkaError:
        raise ReassignError("Not all brokers have rack information. Add --disable-rack-aware in command line to "
                            "make replica assignment without rack information.") from None
    proposed: dict[TP, list[int]] = {}
    for topic in topics:
        partitions = sorted(p for t, p in current if t == topic)
        factor = len(current[(topic, partitions[0])]) if partitions else 0
        try:
            with errors.translate_zk():
                assigned = assign_replicas_to_brokers(metas, len(partitions), factor)
        except errors.KafkaError as exc:
            raise ReassignError(f"cannot assign topic '{topic}': {exc.message}") from None
        for p, replicas in assigned.items():
            proposed[(topic, p)] = replicas
    print(f"Current partition replica assignment\n{format_json(current)}\n", file=out)
    print(f"Proposed partition reassignment configuration\n{format_json(proposed)}", file=out)
    return proposed, current


def execute(admin: AdminClient, reassignment_json: str, additional: bool, throttle: int, log_dir_throttle: int,
            timeout_ms: int, out: TextIO) -> None:
    proposed = check_execute(parse_reassignment(reassignment_json))
    ongoing = list_reassignments(admin)
    if not additional and ongoing:
        raise ReassignError(CANNOT_EXECUTE_BECAUSE_OF_EXISTING)
    current, meta = _assignments(admin, [t for t, _ in proposed])
    missing = [tp for tp in sorted(proposed) if tp not in current]
    if missing:
        raise ReassignError("The proposed assignment contains non-existent partitions: "
                            + ",".join(map(_name, missing)))
    live = {b.node_id for b in meta.brokers}
    unknown = sorted({r for replicas in proposed.values() for r in replicas} - live)
    if unknown:
        raise ReassignError(f"Unknown broker id{_plural(len(unknown))} {','.join(map(str, unknown))}")
    print("Current partition replica assignment\n\n"
          f"{format_json({tp: current[tp] for tp in proposed})}\n\n"
          "Save this to use as the --reassignment-json-file option during rollback", file=out)
    moves = parse_log_dir_moves(reassignment_json)
    if throttle >= 0 or log_dir_throttle >= 0:
        print(throttles.VERIFY_PERIODICALLY, file=out)
        if throttle >= 0:
            throttles.set_reassignment_throttle(admin, throttles.move_map(ongoing, proposed, current), throttle, out)
        if log_dir_throttle >= 0:
            throttles.set_log_dir_throttle(admin, {broker for _, _, broker in moves}, log_dir_throttle, out)
    # A replica set that does not change needs no reassignment (Kafka's completes at once; a single
    # kbroker has no controller to send it to): only its log dir moves.
    changed: dict[TP, list[int] | None] = {tp: r for tp, r in proposed.items() if r != current[tp]}
    failed = alter_reassignments(admin, changed, timeout_ms) if changed else {}
    if failed:
        raise _failures("starting", failed)
    print(f"Successfully started partition reassignment{_plural(len(proposed))} for "
          + ",".join(map(_name, sorted(proposed))), file=out)
    if moves:
        execute_moves(admin, moves, timeout_ms, out)


def alter_log_dirs(admin: AdminClient, moves: dict[Replica, str]) -> dict[Replica, int]:
    """AlterReplicaLogDirs to each broker concerned: every replica's error code."""
    codes: dict[Replica, int] = {}
    for broker in sorted({r[2] for r in moves}):
        dirs: dict[str, dict[str, list[int]]] = {}
        for (topic, partition, b), path in moves.items():
            if b == broker:
                dirs.setdefault(path, {}).setdefault(topic, []).append(partition)
        response = admin.node(broker).send(ALTER_LOG_DIRS, {"dirs": [
            {"path": path, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
            for path, topics in dirs.items()]})
        for result in response.results:
            for p in result.partitions:
                codes[(result.topic_name, p.partition_index, broker)] = p.error_code
    return codes


def execute_moves(admin: AdminClient, moves: dict[Replica, str], timeout_ms: int, out: TextIO) -> None:
    """Kafka's executeMoves: AlterReplicaLogDirs until each replica's move started; a replica not on its
    broker yet (REPLICA_NOT_AVAILABLE: its reassignment has not created it) is asked again every 100 ms."""
    deadline = time.monotonic() + timeout_ms / 1000
    pending = dict(moves)
    while True:
        codes = alter_log_dirs(admin, pending)
        failed = {r: c for r, c in codes.items() if c not in (0, errors.ReplicaNotAvailableError.code)}
        if failed:
            replica, code = min(failed.items())
            raise ReassignError(f"Failed to alter dir for {_replica(replica)}: {error_name(code)}")
        started = sorted(r for r, c in codes.items() if c == 0)
        if started:
            print(f"Successfully started log directory move{_plural(len(started))} for: "
                  + ",".join(map(_replica, started)), file=out)
        for r in started:
            pending.pop(r, None)
        if not pending:
            return
        if time.monotonic() >= deadline:
            raise ReassignError(f"Timed out before log directory move{_plural(len(pending))} could be started for: "
                                + ",".join(map(_replica, sorted(pending))))
        time.sleep(0.1)


def log_dir_states(admin: AdminClient, moves: dict[Replica, str]) -> dict[Replica, tuple[str | None, str | None]]:
    """(current log dir, future log dir) of each replica, from DescribeLogDirs of its broker."""
    states: dict[Replica, tuple[str | None, str | None]] = {}
    for broker in sorted({r[2] for r in moves}):
        wanted: dict[str, list[int]] = {}
        for topic, partition, b in moves:
            if b == broker:
                wanted.setdefault(topic, []).append(partition)
        response = admin.node(broker).send(DESCRIBE_LOG_DIRS, {"topics": [
            {"topic": t, "partitions": ps} for t, ps in wanted.items()]})
        found: dict[Replica, list[str | None]] = {}
        for result in response.results:
            if result.error_code:
                continue
            for t in result.topics:
                for p in t.partitions:
                    entry = found.setdefault((t.name, p.partition_index, broker), [None, None])
                    entry[1 if p.is_future_key else 0] = result.log_dir
        for replica in moves:
            if replica in found:
                states[replica] = (found[replica][0], found[replica][1])
    return states


def verify_moves(admin: AdminClient, moves: dict[Replica, str]) -> tuple[list[str], bool]:
    """Kafka's replicaMoveStatesToString lines and whether every move is done."""
    states = log_dir_states(admin, moves)
    statuses = [_move_status(replica, moves[replica], states.get(replica)) for replica in sorted(moves)]
    return [line for line, _ in statuses], all(done for _, done in statuses)


def _move_status(replica: Replica, target: str, state: tuple[str | None, str | None] | None) -> tuple[str, bool]:
    """The line of one replica's move to log dir ``target`` (``state``: its current and future log dir, None
    when no live log dir of its broker holds it) and whether the move is done."""
    topic, partition, broker = replica
    if state is None:
        return f"Partition {topic}-{partition} cannot be found in any live log directory on broker {broker}.", False
    current, future = state
    if current is None:
        return (f"Partition {topic}-{partition} is not found in any live log dir on broker {broker}. "
                f"There is likely an offline log directory on the broker."), False
    if future == target:
        return f"Reassignment of replica {_replica(replica)} is still in progress.", False
    if future is not None:
        return (f"Partition {topic}-{partition} on broker {broker} is being moved to log dir "
                f"{future} instead of {target}."), False
    if current == target:
        return f"Reassignment of replica {_replica(replica)} completed successfully.", True
    return (f"Partition {topic}-{partition} on broker {broker} is not being moved from log dir "
            f"{current} to {target}."), False


def verify(admin: AdminClient, reassignment_json: str, out: TextIO, preserve_throttles: bool = False) -> bool:
    """Print each partition's state; True when every one has reached its target. Once no reassignment is in
    progress (any, as Kafka asks) and no log-dir move of the file, the throttles are cleared."""
    targets = dict(parse_reassignment(reassignment_json))
    if not targets:
        raise ReassignError("Partition reassignment list cannot be empty")
    ongoing = list_reassignments(admin)
    settled = [tp for tp in targets if tp not in ongoing]
    current: dict[TP, list[int]] = {}
    if settled:
        meta = admin.metadata(sorted({t for t, _ in settled}))
        for t in meta.topics:
            if t.error_code and t.error_code != errors.UnknownTopicOrPartitionError.code:
                raise KafkaApiError(t.error_code, context=f"Metadata of topic '{t.name}'")
            for p in t.partitions:
                current[(t.name, p.partition_index)] = list(p.replica_nodes)
    lines = ["Status of partition reassignment:"]
    complete = True
    for tp in sorted(targets):
        if tp in ongoing:
            lines.append(f"Reassignment of partition {_name(tp)} is still in progress.")
            complete = False
        elif current.get(tp, []) == targets[tp]:
            lines.append(f"Reassignment of partition {_name(tp)} is complete.")
        else:
            lines.append(f"There is no active reassignment of partition {_name(tp)}, but replica set is "
                         f"{','.join(map(str, current.get(tp, [])))} rather than {','.join(map(str, targets[tp]))}.")
            complete = False
    print("\n".join(lines), file=out)
    moves = parse_log_dir_moves(reassignment_json)
    move_lines, moved = verify_moves(admin, moves) if moves else ([], True)
    print("\n".join(move_lines), file=out)  # an empty line without moves, as Kafka prints it
    complete = complete and moved
    if not ongoing and moved and not preserve_throttles:
        throttles.clear_all_throttles(admin, targets, out)
    return complete


def list_text(reassignments: dict[TP, tuple[list[int], list[int], list[int]]]) -> str:
    """Kafka's curReassignmentsToString."""
    if not reassignments:
        return "No partition reassignments found."
    lines = ["Current partition reassignments:"]
    for tp in sorted(reassignments):
        replicas, adding, removing = reassignments[tp]
        line = f"{_name(tp)}: replicas: {','.join(map(str, replicas))}."
        if adding:
            line += f" adding: {','.join(map(str, adding))}."
        if removing:
            line += f" removing: {','.join(map(str, removing))}."
        lines.append(line)
    return "\n".join(lines)


def cancel(admin: AdminClient, reassignment_json: str, timeout_ms: int, out: TextIO,
           preserve_throttles: bool = False) -> list[TP]:
    entries = parse_reassignment(reassignment_json)
    targets = [tp for tp, _ in entries]
    if not targets:
        raise ReassignError("Partition reassignment list cannot be empty")
    active = sorted(tp for tp, (_, adding, removing) in list_reassignments(admin, targets).items()
                    if adding or removing)
    if not active:
        print("None of the specified partition reassignments are active.", file=out)
    else:
        failed = alter_reassignments(admin, {tp: None for tp in active}, timeout_ms)
        if failed:
            raise _failures("cancelling", failed)
        print(f"Successfully cancelled partition reassignment{_plural(len(active))} for: "
              + ",".join(map(_name, active)), file=out)
    moves = parse_log_dir_moves(reassignment_json)
    # as Kafka: a move in flight is cancelled by moving the replica to where it is
    states = log_dir_states(admin, moves) if moves else {}
    back = {r: state[0] for r, state in states.items() if state[0] is not None and state[1] is not None}
    if not back:
        print("None of the specified partition moves are active.", file=out)
    else:
        execute_moves(admin, back, timeout_ms, out)
    if not preserve_throttles:
        throttles.clear_all_throttles(admin, dict(entries), out)
    return active
