"""``kbroker acls``: kafka-acls.sh over the Kafka protocol (CreateAcls, DescribeAcls, DeleteAcls).

    kbroker acls --bootstrap-server HOST:PORT --add --allow-principal User:alice [--allow-host H]
                 --operation Read [--operation ...] --topic T [--group G] [--cluster]
                 [--transactional-id X] [--resource-pattern-type literal|prefixed]
    kbroker acls --bootstrap-server HOST:PORT --add --allow-principal User:alice --producer --topic T
                 [--idempotent] [--transactional-id X]
    kbroker acls --bootstrap-server HOST:PORT --add --allow-principal User:bob --consumer --topic T --group G
    kbroker acls --bootstrap-server HOST:PORT --list [--topic T ...] [--resource-pattern-type any|match|...]
    kbroker acls --bootstrap-server HOST:PORT --remove [--force] [principals, operations] --topic T

As kafka-acls.sh: --operation defaults to All, --allow-host / --deny-host to ``*`` for the
principals given; --producer is Write, Describe and Create on the topics (IdempotentWrite on the
cluster with --idempotent, Write and Describe on the transactional ids); --consumer is Read and
Describe on the topics and Read on the groups. --remove without principals or operations removes
every ACL of the resources. The output is Kafka's: "Adding ACLs for resource `...`:",
"Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL)`:"
with one tab-indented ``(principal=..., host=..., operation=..., permissionType=...)`` per ACL.
--command-config FILE takes Kafka's client properties to reach a TLS or SASL listener
(``kbroker.tools.security``). Exit status: 0 done, 1 an error from the broker or the network, 2 bad
arguments.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any, TextIO

from kbroker.protocol import API_KEYS
from kbroker.protocol.messages.acls import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    AclOperation,
    PatternType,
    PermissionType,
    ResourceType,
)
from kbroker.tools.client import AdminClient, ClientError, KafkaApiError, add_timeout_option, add_tool_parser
from kbroker.tools.security import SecurityConfigError, load_command_config

ERROR_PREFIX = "Error while executing ACL command: "
NL = "\n"

Resource = tuple[ResourceType, str, PatternType]
Entry = tuple[str, str, AclOperation, PermissionType]   # principal, host, operation, permission


class AclCommandError(Exception):
    pass


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = add_tool_parser(sub, "acls", run, help="add, list and remove ACLs (kafka-acls.sh)",
                        description="Add, list and remove ACLs, like kafka-acls.sh.",
                        actions={"--add": "add ACLs", "--list": "list ACLs", "--remove": "remove ACLs"})
    p.add_argument("--allow-principal", action="append", default=[], metavar="TYPE:NAME",
                   help="a principal to allow (User:alice; User:* for everyone), repeatable")
    p.add_argument("--deny-principal", action="append", default=[], metavar="TYPE:NAME",
                   help="a principal to deny, repeatable")
    p.add_argument("--principal", action="append", default=[], metavar="TYPE:NAME",
                   help="with --list: only the ACLs of this principal")
    p.add_argument("--allow-host", action="append", default=[], metavar="HOST",
                   help="a host (IP) the allowed principals may connect from (default *)")
    p.add_argument("--deny-host", action="append", default=[], metavar="HOST",
                   help="a host (IP) the denied principals are denied from (default *)")
    p.add_argument("--operation", action="append", default=[], metavar="OP",
                   help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, AlterConfigs, "
                        "DescribeConfigs, IdempotentWrite or All (default All), repeatable")
    p.add_argument("--topic", action="append", default=[], metavar="TOPIC", help="a topic (* for all), repeatable")
    p.add_argument("--group", action="append", default=[], metavar="GROUP", help="a consumer group, repeatable")
    p.add_argument("--cluster", action="store_true", help="the cluster resource")
    p.add_argument("--transactional-id", action="append", default=[], metavar="ID",
                   help="a transactional id, repeatable")
    p.add_argument("--resource-pattern-type", default="literal", metavar="TYPE",
                   choices=("literal", "prefixed", "match", "any"),
                   help="literal or prefixed when adding; also any or match when listing or removing "
                        "(default literal)")
    p.add_argument("--producer", action="store_true", help="the ACLs a producer needs on the topics")
    p.add_argument("--consumer", action="store_true", help="the ACLs a consumer needs on the topics and groups")
    p.add_argument("--idempotent", action="store_true", help="with --producer: IdempotentWrite on the cluster")
    p.add_argument("--force", action="store_true", help="with --remove: do not ask for confirmation")
    p.add_argument("--command-config", metavar="FILE",
                   help="Kafka client properties for a TLS or SASL listener (security.protocol, sasl.mechanism, "
                        "sasl.jaas.config, ssl.truststore.location, ...)")
    add_timeout_option(p, 30000, "how long to wait for each answer")
    return p


def parse_operation(text: str) -> AclOperation:
    key = text.replace("_", "").replace("-", "").upper()
    for op in AclOperation:
        if op.name.replace("_", "") == key and op not in (AclOperation.UNKNOWN, AclOperation.ANY):
            return op
    raise ValueError(f"invalid operation {text!r}")


def pascal(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def pattern_text(rtype: int, name: str | None, ptype: int) -> str:
    """Kafka's ResourcePattern(Filter).toString() (both print "ResourcePattern(...)")."""
    return (f"ResourcePattern(resourceType={ResourceType(rtype).name}, name={'<any>' if name is None else name}, "
            f"patternType={PatternType(ptype).name})")


def entry_text(principal: str, host: str, operation: int, permission: int) -> str:
    """Kafka's AccessControlEntry.toString()."""
    return (f"(principal={principal}, host={host}, operation={AclOperation(operation).name}, "
            f"permissionType={PermissionType(permission).name})")


def _resources(args: argparse.Namespace, ptype: PatternType) -> list[Resource]:
    out: list[Resource] = [(ResourceType.TOPIC, t, ptype) for t in args.topic]
    out += [(ResourceType.GROUP, g, ptype) for g in args.group]
    out += [(ResourceType.TRANSACTIONAL_ID, t, ptype) for t in args.transactional_id]
    if args.cluster:
        out.append((ResourceType.CLUSTER, CLUSTER_NAME, ptype))
    return out


def _entries(args: argparse.Namespace, operations: list[AclOperation]) -> list[Entry]:
    out: list[Entry] = []
    for principals, hosts, permission in ((args.allow_principal, args.allow_host, PermissionType.ALLOW),
                                          (args.deny_principal, args.deny_host, PermissionType.DENY)):
        for principal in principals:
            for host in hosts or ["*"]:
                out += [(principal, host, op, permission) for op in operations]
    return out


def _plan(args: argparse.Namespace, parser: argparse.ArgumentParser) -> dict[Resource, list[Entry]]:
    """What --add or --remove means, per resource (Kafka's AclCommand option rules)."""
    ptype = PatternType[args.resource_pattern_type.upper()]
    for principal in args.allow_principal + args.deny_principal + args.principal:
        kind, sep, _ = principal.partition(":")
        if not sep or not kind:
            parser.error(f"{principal!r} is not a principal (Type:name, such as User:alice)")
    try:
        operations = [parse_operation(o) for o in args.operation]
    except ValueError as exc:
        parser.error(str(exc))
    if (args.producer or args.consumer) and args.operation:
        parser.error("--operation cannot be used with --producer or --consumer")
    if args.add and ptype not in (PatternType.LITERAL, PatternType.PREFIXED):
        parser.error("A '--resource-pattern-type' value of 'literal' or 'prefixed' is needed with --add")
    if args.idempotent and not args.producer:
        parser.error("--idempotent needs --producer")
    if args.producer and not args.topic:
        parser.error("--producer needs --topic")
    if args.consumer and (not args.topic or not args.group):
        parser.error("--consumer needs --topic and --group")
    if args.add and not (args.allow_principal or args.deny_principal):
        parser.error("--add needs --allow-principal or --deny-principal")
    plan: dict[Resource, list[Entry]] = {}
    if args.producer or args.consumer:
        if args.producer:
            for t in args.topic:
                plan.setdefault((ResourceType.TOPIC, t, ptype), []).extend(
                    _entries(args, [AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE]))
            for x in args.transactional_id:
                plan.setdefault((ResourceType.TRANSACTIONAL_ID, x, ptype), []).extend(
                    _entries(args, [AclOperation.WRITE, AclOperation.DESCRIBE]))
            if args.idempotent:
                plan.setdefault((ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL), []).extend(
                    _entries(args, [AclOperation.IDEMPOTENT_WRITE]))
        if args.consumer:
            for t in args.topic:
                plan.setdefault((ResourceType.TOPIC, t, ptype), []).extend(
                    _entries(args, [AclOperation.READ, AclOperation.DESCRIBE]))
            for g in args.group:
                plan.setdefault((ResourceType.GROUP, g, ptype), []).extend(_entries(args, [AclOperation.READ]))
        return plan
    resources = _resources(args, ptype)
    if not resources and not args.list:
        parser.error("You must provide at least one resource: --topic <topic> or --cluster or --group <group> "
                     "or --transactional-id <id>")
    if args.remove and not (args.allow_principal or args.deny_principal) and not args.operation:
        return {r: [] for r in resources}  # every ACL of the resources
    operations = operations or [AclOperation.ALL]
    for r in resources:
        supported = SUPPORTED_OPERATIONS[r[0]] | {AclOperation.ALL}
        bad = [op for op in operations if op not in supported]
        if bad and args.add:
            parser.error(f"ResourceType {pascal(r[0].name)} only supports operations "
                         f"{','.join(sorted(pascal(o.name) for o in supported))}")
        plan[r] = _entries(args, operations)
    return plan


def _binding_filter(rtype: int, name: str | None, ptype: int, principal: str | None = None, host: str | None = None,
                    operation: int = AclOperation.ANY, permission: int = PermissionType.ANY) -> dict[str, Any]:
    return {"resource_type_filter": rtype, "resource_name_filter": name, "pattern_type_filter": ptype,
            "principal_filter": principal, "host_filter": host, "operation": operation,
            "permission_type": permission}


def describe(admin: AdminClient, flt: dict[str, Any]) -> list[tuple[tuple[int, str, int], list[Entry]]]:
    conn = admin.connection()
    v = conn.version(API_KEYS["DescribeAcls"])
    if v == 0 and flt["pattern_type_filter"] not in (PatternType.LITERAL, PatternType.ANY):
        raise AclCommandError("the broker's DescribeAcls v0 knows only literal patterns")
    response = conn.send(API_KEYS["DescribeAcls"], flt, version=v)
    if response.error_code:
        raise KafkaApiError(response.error_code, response.error_message, context="cannot list ACLs")
    return [((r.resource_type, r.resource_name, getattr(r, "pattern_type", PatternType.LITERAL)),
             [(a.principal, a.host, a.operation, a.permission_type) for a in r.acls]) for r in response.resources]


def list_acls(admin: AdminClient, args: argparse.Namespace, out: TextIO) -> None:
    ptype = PatternType[args.resource_pattern_type.upper()]
    resources = _resources(args, ptype)
    filters = [_binding_filter(r[0], r[1], r[2]) for r in resources] or [
        _binding_filter(ResourceType.ANY, None, PatternType.ANY)]
    found = [item for flt in filters for item in describe(admin, flt)]
    if not args.principal:
        _print_current(found, out)
        return
    for principal in dict.fromkeys(args.principal):  # as kafka-acls.sh --list --principal
        print(f"ACLs for principal `{principal}`", file=out)
        _print_current([(r, [e for e in entries if e[0] == principal]) for r, entries in found], out)


def _print_current(found: list[tuple[tuple[int, str, int], list[Entry]]], out: TextIO) -> None:
    for (rtype, name, pt), entries in found:
        if entries:
            print(f"Current ACLs for resource `{pattern_text(rtype, name, pt)}`: {NL} "
                  f"{NL.join(chr(9) + entry_text(*e) for e in entries)} {NL}", file=out)


def add(admin: AdminClient, plan: dict[Resource, list[Entry]], out: TextIO) -> None:
    conn = admin.connection()
    v = conn.version(API_KEYS["CreateAcls"])
    for (rtype, name, ptype), entries in plan.items():
        if v == 0 and ptype != PatternType.LITERAL:
            raise AclCommandError("the broker's CreateAcls v0 knows only literal patterns")
        print(f"Adding ACLs for resource `{pattern_text(rtype, name, ptype)}`: {NL} "
              f"{NL.join(chr(9) + entry_text(*e) for e in entries)} {NL}", file=out)
        response = conn.send(API_KEYS["CreateAcls"], {"creations": [
            {"resource_type": rtype, "resource_name": name, "resource_pattern_type": ptype, "principal": p,
             "host": h, "operation": op, "permission_type": perm} for p, h, op, perm in entries]}, version=v)
        for r in response.results:
            if r.error_code:
                raise KafkaApiError(r.error_code, r.error_message, context="cannot add ACLs")


def remove(admin: AdminClient, plan: dict[Resource, list[Entry]], force: bool, out: TextIO,
           answer: Callable[[], str] = input) -> None:
    conn = admin.connection()
    v = conn.version(API_KEYS["DeleteAcls"])
    for (rtype, name, ptype), entries in plan.items():
        flt_text = pattern_text(rtype, name, ptype)
        if entries:
            question = (f"Are you sure you want to remove ACLs: {NL} "
                        f"{NL.join(chr(9) + entry_text(*e) for e in entries)} {NL} from resource filter "
                        f"`{flt_text}`? (y/n)")
            filters = [_binding_filter(rtype, name, ptype, p, h, op, perm) for p, h, op, perm in entries]
        else:
            question = f"Are you sure you want to delete all ACLs for resource filter `{flt_text}`? (y/n)"
            filters = [_binding_filter(rtype, name, ptype)]
        if not force:
            print(question, file=out)
            out.flush()
            if answer().strip().lower() not in ("y", "yes"):
                continue
        response = conn.send(API_KEYS["DeleteAcls"], {"filters": filters}, version=v)
        for r in response.filter_results:
            if r.error_code:
                raise KafkaApiError(r.error_code, r.error_message, context="cannot remove ACLs")


def run(args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    parser = args.parser
    plan = _plan(args, parser) if not args.list else {}
    if args.list and (args.producer or args.consumer or args.allow_principal or args.deny_principal):
        parser.error("--list takes resources and --principal only")
    try:
        security = load_command_config(args.command_config) if args.command_config else None
        with AdminClient(args.bootstrap_server, timeout=args.timeout / 1000, security=security) as admin:
            if args.add:
                add(admin, plan, out)
            elif args.remove:
                remove(admin, plan, args.force, out)
            if args.list:
                list_acls(admin, args, out)
            else:  # after --add or --remove, as Kafka: the resources' ACLs now
                list_after(admin, plan, out)
    except (AclCommandError, ClientError, SecurityConfigError) as exc:
        out.flush()
        print(ERROR_PREFIX + str(exc), file=err)
        return 1
    return 0


def list_after(admin: AdminClient, plan: dict[Resource, list[Entry]], out: TextIO) -> None:
    for rtype, name, ptype in plan:
        _print_current(describe(admin, _binding_filter(rtype, name, ptype)), out)
