"""``kbroker groups --reset-offsets`` and ``--delete-offsets``: kafka-consumer-groups.sh's rules.

Reset: only a group that is Empty or Dead (unknown) may be reset; any other state is refused with
"Assignments can only be reset if the group 'G' is inactive, but the current state is S." The
plan is computed per partition of the scope (--all-topics: the partitions the group has offsets
for; --topic T: all of T's partitions; --topic T:0,2: those), then printed as

    GROUP                          TOPIC                          PARTITION  NEW-OFFSET

and written with OffsetCommit (generation -1, no member, as Kafka's admin client does) only with
--execute. Like Kafka, --to-offset, --shift-by and --from-file are clamped to [log start, log end];
--to-datetime and --by-duration take the first offset whose timestamp is at or after the time
(the log end when there is none); --to-current keeps the committed offset (log end without one).

Delete: OffsetDelete at the coordinator for the named partitions (a bare topic means all of its
partitions), then Kafka's summary line and TOPIC / PARTITION / STATUS table.
"""
from __future__ import annotations

import argparse
import calendar
import re
import time
from collections.abc import Iterable
from typing import Any, TextIO

from kbroker.protocol import API_KEYS
from kbroker.tools.client import AdminClient, ClientError, KafkaApiError, TopicPartition

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
INACTIVE_STATES = ("Empty", "Dead")
SPECS = ("to_earliest", "to_latest", "to_current", "to_offset", "to_datetime", "shift_by", "by_duration",
         "from_file")

# The texts Kafka's exceptions carry (Errors' default messages) for what OffsetDelete answers.
_MESSAGES = {
    3: "This server does not host this topic-partition.",
    29: "Topic authorization failed.",
    30: "Group authorization failed.",
    68: "The group is not empty.",
    69: "The group id does not exist.",
    86: "The consumer group is actively subscribed to the topic",
}


def add_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topic", action="append", default=[], metavar="TOPIC[:P,P...]",
                   help="with --reset-offsets / --delete-offsets: a topic, or some of its partitions (repeatable)")
    p.add_argument("--all-topics", action="store_true",
                   help="with --reset-offsets: every partition the group has an offset for")
    spec = p.add_mutually_exclusive_group()
    spec.add_argument("--to-earliest", action="store_true", help="reset to the log start offset")
    spec.add_argument("--to-latest", action="store_true", help="reset to the log end offset")
    spec.add_argument("--to-current", action="store_true", help="reset to the committed offset")
    spec.add_argument("--to-offset", type=int, metavar="N", help="reset to offset N")
    spec.add_argument("--shift-by", type=int, metavar="N", help="move the committed offset by N (may be negative)")
    spec.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss",
                      help="reset to the first offset at or after this time (UTC unless a zone follows)")
    spec.add_argument("--by-duration", metavar="PnDTnHnMnS", help="reset to the first offset this long ago")
    spec.add_argument("--from-file", metavar="CSV", help="reset to the offsets of a CSV file (topic,partition,offset "
                                                         "or group,topic,partition,offset)")
    run = p.add_mutually_exclusive_group()
    run.add_argument("--dry-run", action="store_true", help="only print the plan (the default)")
    run.add_argument("--execute", action="store_true", help="commit the planned offsets")
    p.add_argument("--export", action="store_true", help="with --reset-offsets: print the plan as CSV")


def check_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    spec = [name for name in SPECS if getattr(args, name) not in (None, False)]
    if not args.reset_offsets and (spec or args.all_topics or args.dry_run or args.execute or args.export):
        parser.error("--all-topics, --dry-run, --execute, --export and the reset specs only go with --reset-offsets")
    if args.topic and not (args.reset_offsets or args.delete_offsets):
        parser.error("--topic only goes with --reset-offsets or --delete-offsets")
    if args.delete_offsets:
        if len(args.group) != 1 or args.all_groups:
            parser.error("Option --delete-offsets takes the --group option with exactly one group")
        if not args.topic:
            parser.error("Option --delete-offsets takes the --topic option")
    if args.reset_offsets:
        if not args.group and not args.all_groups:
            parser.error("Option --reset-offsets takes one of these options: --all-groups, --group")
        if not spec:
            parser.error("Option --reset-offsets takes one of these options: --to-datetime, --by-duration, "
                         "--to-earliest, --to-latest, --shift-by, --from-file, --to-current, --to-offset")
        if args.all_topics and args.topic:
            parser.error("Option --reset-offsets takes either --all-topics or --topic, not both")
        if not args.all_topics and not args.topic and not args.from_file:
            parser.error("One of the reset scopes should be defined: --all-topics, --topic.")
        try:
            if args.to_datetime is not None:
                parse_datetime(args.to_datetime)
            if args.by_duration is not None:
                parse_duration(args.by_duration)
        except ValueError as exc:
            parser.error(str(exc))
    for topic in args.topic:
        try:
            parse_topic(topic)
        except ValueError as exc:
            parser.error(str(exc))


# --- parsing -------------------------------------------------------------------------------

def parse_topic(value: str) -> tuple[str, list[int] | None]:
    """"t" -> ("t", None: every partition); "t:0,2" -> ("t", [0, 2])."""
    topic, sep, rest = value.partition(":")
    if not topic:
        raise ValueError(f"{value!r}: no topic name")
    if not sep:
        return topic, None
    try:
        partitions = [int(p) for p in rest.split(",") if p.strip()]
    except ValueError:
        raise ValueError(f"{value!r}: partitions must be numbers, as in topic:0,1") from None
    if not partitions or min(partitions) < 0:
        raise ValueError(f"{value!r}: name at least one partition, as in topic:0,1")
    return topic, partitions


_DATETIME = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})\.(\d+)(Z|[+-]\d{2}(?::?\d{2})?)")


def parse_datetime(value: str) -> int:
    """Kafka's Utils.getDateTime: 'yyyy-MM-ddTHH:mm:ss.SSS' then a zone (Z, +hh, +hhmm or +hh:mm);
    without a zone (no '+', '-' or 'Z' after the 'T') the time is UTC. Epoch milliseconds. As
    Java's strict SimpleDateFormat, the fraction is read as a number of milliseconds (so at most
    999) and every field must be in range."""
    date, sep, rest = value.partition("T")
    if not sep:
        raise ValueError("Error parsing timestamp. It does not contain a 'T' according to ISO8601 format")
    text = value if any(c in rest for c in "+-Z") else value + "Z"
    m = _DATETIME.fullmatch(text)
    if m is None:
        raise ValueError(f'Unparseable date: "{text}"')
    year, month, day, hour, minute, second, millis = (int(g) for g in m.groups()[:7])
    zone = m.group(8)
    days = calendar.monthrange(year, month)[1] if 1 <= month <= 12 else 0
    if not (1 <= day <= days and hour < 24 and minute < 60 and second < 60 and millis < 1000):
        raise ValueError(f'Unparseable date: "{text}"')
    offset_min = 0
    if zone != "Z":
        digits = zone[1:].replace(":", "")
        zh, zm = int(digits[:2]), int(digits[2:] or 0)
        if zh > 23 or zm > 59:
            raise ValueError(f'Unparseable date: "{text}"')
        offset_min = (zh * 60 + zm) * (1 if zone[0] == "+" else -1)
    epoch_s = calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0))
    return epoch_s * 1000 + millis - offset_min * 60_000


_DURATION = re.compile(r"([-+]?)P(?:([-+]?\d+)D)?(?:T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?"
                       r"(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?", re.IGNORECASE)


def parse_duration(value: str) -> int:
    """java.time.Duration.parse (PnDTnHnMn.nS, signs allowed): milliseconds."""
    m = _DURATION.fullmatch(value)
    if m is None or not any(m.group(i) for i in (2, 3, 4, 5)) or value.upper().endswith("T"):
        raise ValueError(f"Text cannot be parsed to a Duration: {value}")
    sign, days, hours, minutes, seconds, fraction = m.groups()
    secs = int(seconds or 0)
    nanos = int((fraction or "").ljust(9, "0")) if fraction else 0
    if secs < 0 or (seconds or "").startswith("-"):
        nanos = -nanos
    total_ms = ((int(days or 0) * 24 + int(hours or 0)) * 60 + int(minutes or 0)) * 60_000 + secs * 1000 \
        + nanos // 1_000_000
    return -total_ms if sign == "-" else total_ms


def parse_reset_file(text: str, groups: list[str]) -> dict[str, dict[TopicPartition, int]]:
    """Kafka's reset plan CSV: "topic,partition,offset" lines for a single --group, otherwise
    "group,topic,partition,offset"."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    single = len(groups) == 1 and bool(lines) and len(lines[0].split(",")) == 3
    plan: dict[str, dict[TopicPartition, int]] = {}
    for line in lines:
        cells = line.split(",")
        try:
            if single:
                group, (topic, partition, offset) = groups[0], cells
            else:
                group, topic, partition, offset = cells
            plan.setdefault(group, {})[TopicPartition(topic, int(partition))] = int(offset)
        except ValueError:
            raise ClientError(f"the reset plan line {line!r} is not "
                              f"{'topic,partition,offset' if single else 'group,topic,partition,offset'}") from None
    return plan


# --- reset ---------------------------------------------------------------------------------

def _offsets(admin: AdminClient, partitions: Iterable[TopicPartition], timestamp: int, what: str
             ) -> dict[TopicPartition, int]:
    out: dict[TopicPartition, int] = {}
    for tp, value in admin.list_offsets(sorted(set(partitions)), timestamp).items():
        if not isinstance(value, int):
            raise ClientError(f"Error getting {what} offset of topic partition: {tp.topic}-{tp.partition} ({value})")
        out[tp] = value
    return out


def _clamped(admin: AdminClient, wanted: dict[TopicPartition, int], err: TextIO) -> dict[TopicPartition, int]:
    """Kafka's checkOffsetsRange: above the log end -> log end, below the log start -> log start."""
    ends = _offsets(admin, wanted, LATEST_TIMESTAMP, "ending")
    starts = _offsets(admin, wanted, EARLIEST_TIMESTAMP, "starting")
    out = {}
    for tp, offset in wanted.items():
        if offset > ends[tp]:
            print(f"WARN: New offset ({offset}) is higher than latest offset for topic partition "
                  f"{tp.topic}-{tp.partition}. Value will be set to {ends[tp]}", file=err)
            offset = ends[tp]
        elif offset < starts[tp]:
            print(f"WARN: New offset ({offset}) is lower than earliest offset for topic partition "
                  f"{tp.topic}-{tp.partition}. Value will be set to {starts[tp]}", file=err)
            offset = starts[tp]
        out[tp] = offset
    return out


def _scope(admin: AdminClient, group_id: str, args: argparse.Namespace) -> list[TopicPartition]:
    if args.all_topics:
        return sorted(tp for tp, offset in admin.fetch_offsets(group_id).items() if offset >= 0)
    out, bare = _split_topics(args.topic)
    if bare:
        for t in admin.metadata(bare).topics:
            if t.error_code:
                raise KafkaApiError(t.error_code, context=f"topic '{t.name}'")
            out += [TopicPartition(t.name, p.partition_index) for p in t.partitions]
    return sorted(set(out))


def _split_topics(values: list[str]) -> tuple[list[TopicPartition], list[str]]:
    """``--topic`` values (``topic`` or ``topic:0,2``): the partitions they name, and the topics named whole."""
    named: list[TopicPartition] = []
    whole: list[str] = []
    for value in values:
        topic, partitions = parse_topic(value)
        if partitions is None:
            whole.append(topic)
        else:
            named += [TopicPartition(topic, p) for p in partitions]
    return named, whole


def _by_time(admin: AdminClient, partitions: list[TopicPartition], timestamp: int,
             out: TextIO) -> dict[TopicPartition, int]:
    found = _offsets(admin, partitions, timestamp, "timestamp")
    empty = [tp for tp, offset in found.items() if offset < 0]
    for tp in empty:
        print(f"\nWarn: Partition {tp.partition} from topic {tp.topic} is empty. Falling back to latest known offset.",
              file=out)
    found.update(_offsets(admin, empty, LATEST_TIMESTAMP, "ending"))
    return found


def plan_reset(admin: AdminClient, group_id: str, args: argparse.Namespace, file_plan: dict[TopicPartition, int],
               out: TextIO, err: TextIO) -> dict[TopicPartition, int]:
    """The new offset of every partition in scope (Kafka's prepareOffsetsToReset)."""
    if args.from_file:
        return _clamped(admin, file_plan, err) if file_plan else {}
    partitions = _scope(admin, group_id, args)
    if not partitions:
        return {}
    if args.to_earliest:
        return _offsets(admin, partitions, EARLIEST_TIMESTAMP, "starting")
    if args.to_latest:
        return _offsets(admin, partitions, LATEST_TIMESTAMP, "ending")
    if args.to_offset is not None:
        return _clamped(admin, dict.fromkeys(partitions, args.to_offset), err)
    if args.to_datetime is not None:
        return _by_time(admin, partitions, parse_datetime(args.to_datetime), out)
    if args.by_duration is not None:
        return _by_time(admin, partitions, int(time.time() * 1000) - parse_duration(args.by_duration), out)
    committed = {tp: o for tp, o in admin.fetch_offsets(group_id).items() if o >= 0}
    if args.shift_by is not None:
        missing = [tp for tp in partitions if tp not in committed]
        if missing:
            tp = missing[0]
            raise ClientError(f"Cannot shift offset for partition {tp.topic}-{tp.partition} since there is no "
                              f"current committed offset")
        return _clamped(admin, {tp: committed[tp] + args.shift_by for tp in partitions}, err)
    # --to-current: the committed offset, the log end where there is none
    plan = {tp: committed[tp] for tp in partitions if tp in committed}
    plan.update(_offsets(admin, [tp for tp in partitions if tp not in committed], LATEST_TIMESTAMP, "ending"))
    return plan


def commit_offsets(admin: AdminClient, group_id: str, offsets: dict[TopicPartition, int]) -> None:
    """OffsetCommit at the coordinator as a standalone client (generation -1, no member id)."""
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for tp, offset in sorted(offsets.items()):
        by_topic.setdefault(tp.topic, []).append({"partition_index": tp.partition, "committed_offset": offset,
                                                   "committed_leader_epoch": -1, "committed_metadata": ""})
    body = {"group_id": group_id, "generation_id": -1, "member_id": "", "group_instance_id": None,
            "retention_time_ms": -1, "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}

    def call() -> None:
        conn = admin.find_coordinator(group_id)
        response = conn.send(API_KEYS["OffsetCommit"], body, min_version=2)
        for t in response.topics:
            for p in t.partitions:
                if p.error_code:
                    raise KafkaApiError(p.error_code, context=f"OffsetCommit for group '{group_id}', "
                                                              f"{t.name}-{p.partition_index}")
    admin._retry(call)


def reset_offsets(admin: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if not args.dry_run and not args.execute:
        print("WARN: No action will be performed as the --execute option is missing. In a future major release, "
              "the default behavior of this command will be to prompt the user before executing the reset rather "
              "than doing a dry run. You should add the --dry-run option explicitly if you are scripting this "
              "command and want to keep the current default behavior without prompting.", file=err)
    groups = sorted(set(args.group)) if args.group else [
        g.group_id for g in admin.list_groups() if g.protocol_type in ("consumer", "")]
    file_plans: dict[str, dict[TopicPartition, int]] = {}
    if args.from_file:
        try:
            with open(args.from_file, encoding="utf-8") as f:
                file_plans = parse_reset_file(f.read(), groups)
        except OSError as exc:
            raise ClientError(f"cannot read {args.from_file}: {exc.strerror or exc}") from None
    plans: dict[str, dict[TopicPartition, int]] = {}
    status = 0
    for group_id in groups:
        state = admin.describe_group(group_id).group_state
        if state not in INACTIVE_STATES:
            out.flush()
            print(f"Error: Assignments can only be reset if the group '{group_id}' is inactive, but the current "
                  f"state is {state}.", file=err)
            err.flush()
            plans[group_id] = {}
            status = 1
            continue
        plan = plan_reset(admin, group_id, args, file_plans.get(group_id, {}), out, err)
        if args.execute and plan:
            commit_offsets(admin, group_id, plan)
        plans[group_id] = plan
    if args.export:
        single = len(groups) == 1
        for group_id, plan in plans.items():
            for tp, offset in sorted(plan.items()):
                print(("" if single else f"{group_id},") + f"{tp.topic},{tp.partition},{offset}", file=out)
    elif plans:
        fmt = "{:<30} {:<30} {:<10} {:<15}"
        print("\n" + fmt.format("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"), file=out)
        for group_id, plan in plans.items():
            for tp, offset in sorted(plan.items()):
                print(fmt.format(group_id, tp.topic, tp.partition, offset), file=out)
    return status


# --- delete --------------------------------------------------------------------------------

def delete_offsets(admin: AdminClient, group_id: str, topics: list[str], out: TextIO, err: TextIO) -> int:
    results: dict[TopicPartition, int] = {}
    partitions, bare = _split_topics(topics)
    if bare:
        for t in admin.metadata(bare).topics:
            if t.error_code:
                results[TopicPartition(t.name, -1)] = t.error_code
            else:
                partitions += [TopicPartition(t.name, p.partition_index) for p in t.partitions]
    partitions = sorted(set(partitions))
    top = 0
    if partitions:
        top, answered = _send_offset_delete(admin, group_id, partitions)
        for tp in partitions:
            results[tp] = top or answered.get(tp, 0)
        if not top:
            top = next((c for c in answered.values() if c), 0)  # the admin client's all() fails on the first
    if top == 0:
        print(f"Request succeed for deleting offsets with topic {', '.join(topics)} group {group_id}", file=out)
    else:
        out.flush()
        print("Error: " + _top_level_text(top, group_id), file=err)
        err.flush()
    fmt = "{:<30} {:<15} {:<15}"
    print("\n" + fmt.format("TOPIC", "PARTITION", "STATUS"), file=out)
    for tp, code in sorted(results.items(), key=lambda item: item[0].topic + str(item[0].partition)):
        status = "Successful" if code == 0 else f"Error: {_MESSAGES.get(code, KafkaApiError(code).name)}"
        print(fmt.format(tp.topic, tp.partition, status), file=out)
    return 0 if top == 0 else 1


def _top_level_text(code: int, group_id: str) -> str:
    texts = {24: f"'{group_id}' is not valid.", 69: f"'{group_id}' does not exist.",
             30: f"Access to '{group_id}' is not authorized.",
             68: f"Deleting offsets of a consumer group '{group_id}' is forbidden if the group is not empty."}
    if code in (86, 29, 3):
        return "Encounter some partition level error, see the follow-up details:"
    return texts.get(code, f"Encounter some unknown error: {KafkaApiError(code).name}")


def _send_offset_delete(admin: AdminClient, group_id: str,
                        partitions: list[TopicPartition]) -> tuple[int, dict[TopicPartition, int]]:
    by_topic: dict[str, list[dict[str, int]]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append({"partition_index": tp.partition})
    body = {"group_id": group_id, "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}

    def call() -> Any:
        conn = admin.find_coordinator(group_id)
        response = conn.send(API_KEYS["OffsetDelete"], body)
        if response.error_code in (14, 15, 16):  # loading, moved, not available: find it again
            raise KafkaApiError(response.error_code, context=f"OffsetDelete for group '{group_id}'")
        return response

    try:
        response = admin._retry(call)
    except KafkaApiError as exc:
        return exc.code, {}
    answered = {TopicPartition(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}
    return response.error_code, answered


__all__ = ["add_options", "check_args", "delete_offsets", "parse_datetime", "parse_duration", "reset_offsets"]
