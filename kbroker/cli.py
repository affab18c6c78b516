"""The ``kbroker`` command line, in the habits of Kafka's tools.

    kbroker serve [server.properties] [--override key=value ...]      (kafka-server-start.sh)
    kbroker host-plan [server.properties] [--override key=value ...] [--json [--with-properties]]
                                       (host mode: the brokers broker.processes=auto|N would run, started by none)
    kbroker dump-log --files 00000000000000000000.log [--files ...]   (kafka-dump-log.sh)
    kbroker topics --bootstrap-server HOST:PORT --create|--list|--describe|--alter|--delete ...
                                                                       (kafka-topics.sh)
    kbroker groups --bootstrap-server HOST:PORT --list|--describe ...   (kafka-consumer-groups.sh)
    kbroker reassign --bootstrap-server HOST:PORT --generate|--execute|--verify|--list|--cancel ...
                                                                       (kafka-reassign-partitions.sh)
    kbroker acls --bootstrap-server HOST:PORT --add|--list|--remove ...   (kafka-acls.sh)
    kbroker configs --bootstrap-server HOST:PORT --alter|--describe --entity-type users|clients ...
                                                                       (kafka-configs.sh)
    kbroker leader-election --bootstrap-server HOST:PORT --election-type preferred|unclean ...
                                                                       (kafka-leader-election.sh)
    kbroker log-dirs --bootstrap-server HOST:PORT --describe [--broker-list 1,2] [--topic-list a,b]
                                                                       (kafka-log-dirs.sh)
    kbroker ui --bootstrap-server HOST:PORT [--zookeeper HOST:PORT/CHROOT] [--listen 127.0.0.1:9021] ...
                                       (a read-only web page of the cluster: lag over time, group status, health)

Exit status: 0 success, 1 failure (one line on stderr), 2 bad arguments.
"""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kbroker.config.broker import BrokerConfig

def serve(args: argparse.Namespace) -> int:
    import logging

    from kbroker.config.broker import build_config, read_properties
    from kbroker.config.errors import ConfigError
    from kbroker.host.plan import uses_host_mode

    logging.basicConfig(level=os.environ.get("KBROKER_LOG_LEVEL", "INFO"),
                        format="[%(asctime)s] %(levelname)s %(message)s (%(name)s)")
    try:
        raw = read_properties(args.config, args.override)
        if uses_host_mode({key: value for key, (value, _) in raw.items()}):
            return serve_host(raw)
        config = build_config(raw)
    except (ConfigError, OSError) as exc:
        print(f"kbroker: {exc}", file=sys.stderr)
        return 2
    return run_broker(config)


def serve_host(raw: dict[str, tuple[str, str]]) -> int:
    """``broker.processes`` set (issue 24, kbroker/host): plan the server's brokers and check each one's
    configuration, then run the only one here as without host mode, or supervise N as child processes."""
    from kbroker.config.broker import build_config
    from kbroker.host.plan import HOST_KEYS, HostPlanError, Topology, plan_host
    from kbroker.host.supervisor import Supervisor

    try:
        plan = plan_host({key: value for key, (value, _) in raw.items()}, Topology.of_this_host())
    except HostPlanError as exc:
        print(f"kbroker: {exc}", file=sys.stderr)
        return 2
    for process in plan.processes:  # a ConfigError (to serve()) before any broker starts
        build_config({key: raw[key] if raw.get(key, ("", ""))[0] == value else (value, f"broker {process.broker_id}")
                      for key, value in plan.process_properties(process.index).items()})
    if len(plan.processes) == 1:
        own = {key: value for key, value in raw.items() if key not in HOST_KEYS}
        own.setdefault("broker.rack", (plan.processes[0].rack, "host mode: the server's host name"))
        return run_broker(build_config(own))
    return Supervisor(plan).run()


def host_plan(args: argparse.Namespace) -> int:
    """``kbroker host-plan``: what ``kbroker serve`` would start on this server, as text or JSON."""
    import json

    from kbroker.config.broker import read_properties
    from kbroker.config.errors import ConfigError
    from kbroker.host.plan import HostPlanError, Topology, plan_host

    try:
        raw = read_properties(args.config, args.override)
        plan = plan_host({key: value for key, (value, _) in raw.items()}, Topology.of_this_host())
    except (ConfigError, HostPlanError, OSError) as exc:
        print(f"kbroker: {exc}", file=sys.stderr)
        return 2
    if not (args.json or args.with_properties):
        print(plan.describe(), end="")
        return 0
    out = plan.to_json()
    if args.with_properties:  # the deployment installs exactly what kbroker serve would hand each broker
        for process in out["processes"]:
            process["server.properties"] = plan.render(process["index"])
    print(json.dumps(out, indent=2))
    return 0


def run_broker(config: BrokerConfig) -> int:
    """One broker in this process until SIGTERM/SIGINT."""
    import asyncio
    import logging

    from kbroker.broker import serve as run
    from kbroker.config.errors import ConfigError

    for line in config.unknown_keys:
        logging.getLogger("kbroker.config.broker").warning("%s: ignored", line)
    try:
        asyncio.run(run(config))
    except ConfigError as exc:  # listeners, TLS and SASL settings are checked as the broker starts
        print(f"kbroker: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"kbroker: cannot start: {exc}", file=sys.stderr)
        return 1
    except RuntimeError as exc:
        print(f"kbroker: {exc}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kbroker", description="A Kafka-compatible broker")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("serve", help="run a broker (Ctrl-C or SIGTERM stops it cleanly)")
    run.add_argument("config", nargs="?", help="a Kafka-style server.properties (default: built-in defaults)")
    run.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                     help="set a property, overriding the file (repeatable)")
    plan = sub.add_parser("host-plan", help="print the brokers, ports, log dirs and cpus broker.processes plans for "
                          "this server, starting nothing")
    plan.add_argument("config", nargs="?", help="the server's server.properties")
    plan.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                      help="set a property, overriding the file (repeatable)")
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan.add_argument("--with-properties", action="store_true",
                      help="print the plan as JSON with each broker's rendered server.properties (for a "
                      "deployment to install)")
    dump = sub.add_parser("dump-log", help="print the batches of segment files and the entries of index files")
    dump.add_argument("--files", action="append", required=True, help="a .log, .index or .timeindex file")
    from kbroker.tools import acls, configs, groups, leader_election, log_dirs, reassign, topics
    topics.add_parser(sub)
    groups.add_parser(sub)
    reassign.add_parser(sub)
    acls.add_parser(sub)
    configs.add_parser(sub)
    leader_election.add_parser(sub)
    log_dirs.add_parser(sub)
    from kbroker.ui import command as ui
    ui.add_parser(sub)
    args = parser.parse_args(argv)
    if args.command == "serve":
        return serve(args)
    if args.command == "host-plan":
        return host_plan(args)
    if args.command == "dump-log":
        missing = [f for f in args.files if not os.path.exists(f)]
        if missing:
            parser.error(f"no such file: {', '.join(missing)}")
        from kbroker.log.dump import dump_log
        return dump_log(args.files)
    if args.command in ("topics", "groups", "reassign", "acls", "configs", "leader-election", "log-dirs", "ui"):
        try:
            tool: Callable[[argparse.Namespace], int] = args.run
            return tool(args)
        except KeyboardInterrupt:
            return 130
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
