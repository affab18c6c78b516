"""``kbroker groups``: kafka-consumer-groups.sh over the Kafka protocol.

    kbroker groups --bootstrap-server HOST:PORT --list [--state [STATE,...]]
    kbroker groups --bootstrap-server HOST:PORT --describe (--group G ... | --all-groups)
                   [--offsets | --members [--verbose] | --state]
    kbroker groups --bootstrap-server HOST:PORT --reset-offsets (--group G ... | --all-groups)
                   (--all-topics | --topic T[:P,P...] ... | --from-file F) SPEC [--dry-run | --execute] [--export]
    kbroker groups --bootstrap-server HOST:PORT --delete-offsets --group G --topic T[:P,P...] ...

SPEC is one of --to-earliest, --to-latest, --to-current, --to-offset N, --shift-by N,
--to-datetime YYYY-MM-DDTHH:mm:SS.sss[zone], --by-duration PnDTnHnMnS, --from-file F; the plan
(``kbroker.tools.group_reset``) follows kafka-consumer-groups.sh.

--describe prints, per group, Kafka's tables (a blank line, then a header):

    GROUP  TOPIC  PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG  CONSUMER-ID  HOST  CLIENT-ID

one row per partition a member is assigned (members with most partitions first), then one per
partition with a committed offset that nobody is assigned ("-" in the member columns).
CURRENT-OFFSET is the committed offset (OffsetFetch), LOG-END-OFFSET the latest offset
(ListOffsets at the leader), LAG their difference; "-" when unknown. Notes go to stderr as Kafka
writes them: "Consumer group 'G' has no active members." before the table of an Empty group,
"Warning: Consumer group 'G' is rebalancing." Exit status: 0 done, 1 a group that does not exist
or an error from the broker or the network, 2 bad arguments.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Any, TextIO

from kbroker.tools import group_reset
from kbroker.tools.client import (
    AdminClient,
    ClientError,
    TopicPartition,
    add_command_config,
    add_timeout_option,
    add_tool_parser,
    command_config,
    decode_consumer_assignment,
)

MISSING = "-"
CONSUMER_PROTOCOL = "consumer"
REBALANCING = frozenset({"PreparingRebalance", "CompletingRebalance", "AwaitingSync", "Assigning", "Reconciling"})


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = add_tool_parser(sub, "groups", run, help="list and describe consumer groups (kafka-consumer-groups.sh)",
                        description="List consumer groups and describe their members, offsets and lag, "
                                    "like kafka-consumer-groups.sh.",
                        actions={"--list": "list the consumer groups", "--describe": "describe consumer groups",
                                 "--reset-offsets": "reset the committed offsets of inactive groups (a dry run "
                                                    "unless --execute)",
                                 "--delete-offsets": "delete committed offsets of one group (OffsetDelete)"})
    p.add_argument("--group", action="append", default=[], metavar="GROUP", help="the group to describe (repeatable)")
    p.add_argument("--all-groups", action="store_true", help="with --describe: every consumer group")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--offsets", action="store_true",
                      help="with --describe: offsets and lag per partition (the default)")
    what.add_argument("--members", action="store_true", help="with --describe: the members and their partitions")
    what.add_argument("--state", nargs="?", const="", default=None, metavar="STATES",
                      help="with --describe: state, coordinator, strategy and member count; with --list: "
                           "show each group's state, or only groups in these comma-separated states")
    p.add_argument("--verbose", action="store_true", help="with --describe --members: each member's partitions")
    group_reset.add_options(p)
    add_timeout_option(p, 30000, "how long to wait for each answer and for a coordinator")
    add_command_config(p)
    return p


def _check_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    group_reset.check_args(args, parser)
    if args.describe and not args.group and not args.all_groups:
        parser.error("--describe needs --group or --all-groups")
    if args.group and args.all_groups:
        parser.error("--group and --all-groups cannot be used together")
    if args.list and (args.group or args.all_groups or args.offsets or args.members or args.verbose):
        parser.error("--list takes no --group, --all-groups, --offsets, --members or --verbose")
    if args.describe and args.state:
        parser.error("--state takes no value with --describe")
    if args.verbose and not args.members:
        parser.error("--verbose only goes with --describe --members")
    if args.timeout <= 0:
        parser.error("--timeout must be positive")


def run(args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    _check_args(args, args.parser)
    try:
        with AdminClient(args.bootstrap_server, timeout=args.timeout / 1000, security=command_config(args)) as admin:
            if args.list:
                return list_groups(admin, args.state, out)
            if args.reset_offsets:
                return group_reset.reset_offsets(admin, args, out, err)
            if args.delete_offsets:
                return group_reset.delete_offsets(admin, args.group[0], args.topic, out, err)
            groups = args.group
            if args.all_groups:
                groups = [g.group_id for g in admin.list_groups() if _is_consumer_group(g.protocol_type)]
            status = 0
            for group_id in sorted(set(groups)):
                if args.members:
                    ok = describe_members(admin, group_id, args.verbose, out, err)
                elif args.state is not None:
                    ok = describe_state(admin, group_id, out, err)
                else:
                    ok = describe_offsets(admin, group_id, out, err)
                status = status or (0 if ok else 1)
            return status
    except ClientError as exc:
        out.flush()
        print(f"Error: Executing consumer group command failed due to {exc}", file=err)
        return 1


def _is_consumer_group(protocol_type: str) -> bool:
    return protocol_type in (CONSUMER_PROTOCOL, "")


def list_groups(admin: AdminClient, states: str | None, out: TextIO) -> int:
    groups = [g for g in admin.list_groups() if _is_consumer_group(g.protocol_type)]
    if states is None:
        for g in groups:
            print(g.group_id, file=out)
        return 0
    wanted = {s.strip().lower() for s in states.split(",") if s.strip()}
    rows = [(g.group_id, g.group_state or "Unknown") for g in groups
            if not wanted or (g.group_state or "").lower() in wanted]
    width = max([15] + [len(g) for g, _ in rows])
    print(f"{'GROUP':<{width}} STATE", file=out)
    for group_id, state in rows:
        print(f"{group_id:<{width}} {state}", file=out)
    return 0


def _note_state(group_id: str, state: str, err: TextIO) -> bool:
    """Kafka's remarks on a group's state; False if the group does not exist."""
    if state == "Dead":
        print(f"Error: Consumer group '{group_id}' does not exist.", file=err)
        return False
    if state == "Empty":
        print(f"\nConsumer group '{group_id}' has no active members.", file=err)
    elif state in REBALANCING:
        print(f"\nWarning: Consumer group '{group_id}' is rebalancing.", file=err)
    return True


def _assignments(group: Any) -> list[tuple[Any, list[TopicPartition]]]:
    """(member, partitions) per member; only consumer-protocol assignments can be read."""
    readable = _is_consumer_group(group.protocol_type)
    return [(m, decode_consumer_assignment(m.member_assignment) if readable else []) for m in group.members]


@dataclass
class OffsetRow:
    group: str
    tp: TopicPartition
    current: int | None
    log_end: int | None
    consumer_id: str
    host: str
    client_id: str

    @property
    def lag(self) -> int | None:
        if self.current is None or self.log_end is None:
            return None
        return self.log_end - self.current

    def cells(self) -> list[str]:
        def show(v: int | None) -> str:
            return MISSING if v is None else str(v)
        return [self.group, self.tp.topic, str(self.tp.partition), show(self.current), show(self.log_end),
                show(self.lag), self.consumer_id, self.host, self.client_id]


def collect_offsets(admin: AdminClient, group_id: str) -> tuple[str, list[OffsetRow]]:
    """The group's state and its offsets table, in Kafka's row order."""
    group = admin.describe_group(group_id)
    if group.group_state == "Dead":
        return group.group_state, []
    committed = {tp: off for tp, off in admin.fetch_offsets(group_id).items()}
    members = [(m, tps) for m, tps in _assignments(group) if tps]
    members.sort(key=lambda mt: len(mt[1]), reverse=True)  # stable: ties keep the broker's order
    assigned = {tp for _, tps in members for tp in tps}
    unassigned = sorted(set(committed) - assigned)
    log_end = admin.list_offsets(sorted(assigned | set(committed)))

    def row(tp: TopicPartition, consumer_id: str, host: str, client_id: str) -> OffsetRow:
        current = committed.get(tp)
        end = log_end.get(tp)
        return OffsetRow(group_id, tp, current if current is not None and current >= 0 else None,
                         end if isinstance(end, int) else None, consumer_id, host, client_id)

    rows = [row(tp, m.member_id, m.client_host, m.client_id)
            for m, tps in members for tp in sorted(set(tps))]
    rows += [row(tp, MISSING, MISSING, MISSING) for tp in unassigned]
    return group.group_state, rows


def describe_offsets(admin: AdminClient, group_id: str, out: TextIO, err: TextIO) -> bool:
    state, rows = collect_offsets(admin, group_id)
    out.flush()
    if not _note_state(group_id, state, err):
        return False
    err.flush()
    if not rows:
        return True
    widths = [max([15] + [len(r.group) for r in rows]), max([15] + [len(r.tp.topic) for r in rows]), 10, 15, 15, 15,
              max([15] + [len(r.consumer_id) for r in rows]), max([15] + [len(r.host) for r in rows])]
    header = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
              "CLIENT-ID"]
    print("\n" + _line(header, widths), file=out)
    for r in rows:
        print(_line(r.cells(), widths), file=out)
    return True


def _line(cells: list[str], widths: list[int]) -> str:
    """Kafka's "%-Ns %-Ns ... %s": every column but the last padded to its width."""
    return " ".join(f"{c:<{w}}" for c, w in zip(cells, widths)) + " " + cells[-1]


def describe_members(admin: AdminClient, group_id: str, verbose: bool, out: TextIO, err: TextIO) -> bool:
    group = admin.describe_group(group_id)
    out.flush()
    if not _note_state(group_id, group.group_state, err):
        return False
    err.flush()
    members = _assignments(group)
    if not members:
        return True
    with_instance = any(m.group_instance_id for m, _ in members)

    def cells(m: Any, tps: list[TopicPartition]) -> list[str]:
        row = [group_id, m.member_id] + ([m.group_instance_id or ""] if with_instance else [])
        return row + [m.client_host, m.client_id, str(len(tps))]

    header = ["GROUP", "CONSUMER-ID"] + (["GROUP-INSTANCE-ID"] if with_instance else []) + \
        ["HOST", "CLIENT-ID", "#PARTITIONS"]
    table = [cells(m, tps) for m, tps in members]
    widths = [max([15] + [len(row[i]) for row in table]) for i in range(len(header) - 1)] + [15]
    print("\n" + " ".join(f"{c:<{w}}" for c, w in zip(header, widths)) + " " + ("ASSIGNMENT" if verbose else ""),
          file=out)
    for (_member, tps), row in zip(members, table):
        line = " ".join(f"{c:<{w}}" for c, w in zip(row, widths)) + " "
        if verbose:
            by_topic: dict[str, list[int]] = {}
            for tp in tps:
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            line += ", ".join(sorted(f"{t}({','.join(map(str, sorted(ps)))})" for t, ps in by_topic.items())) \
                or MISSING
        print(line, file=out)
    return True


def describe_state(admin: AdminClient, group_id: str, out: TextIO, err: TextIO) -> bool:
    group = admin.describe_group(group_id)
    if not _note_state(group_id, group.group_state, err):
        return False
    node = admin.coordinator_node(group_id)
    where = f"{node.host}:{node.port} ({node.node_id})"
    width = max(25, len(where))
    fmt = f"{{:<{width}}} {{:<25}} {{:<20}} {{:<15}} {{}}"
    print("\n" + fmt.format("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"), file=out)
    print(fmt.format(group_id, where, group.protocol_data, group.group_state, len(group.members)), file=out)
    return True


__all__ = ["OffsetRow", "add_parser", "collect_offsets", "run"]
