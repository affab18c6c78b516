"""``kbroker ui``: a read-only web page for a whole cluster (issue 32), with Kafka's tools' options.

    kbroker ui --bootstrap-server HOST:PORT [--zookeeper HOST:PORT[/CHROOT]] [--command-config FILE]
               [--broker-metrics URL[,URL...]] [--listen HOST:PORT] [--interval SECONDS]
               [--history FILE] [--history-cap-mb MB] [--basic-auth-file FILE]

Listens on 127.0.0.1:9021 unless ``--listen`` says otherwise, and prints its address once it does. The history
(lag and throughput over time) is a SQLite file kept under ``--history-cap-mb``; it survives a restart.
``--basic-auth-file`` names a file whose first line (blank lines and ``#`` comments aside) is ``user:password``:
every page, JSON answer and ``/metrics`` then asks for it (HTTP basic auth: put TLS in front of it when the UI
listens beyond this host). Exit status: 0 stopped by Ctrl-C or SIGTERM, 1 cannot listen or open the history,
2 bad arguments.
"""
from __future__ import annotations

import argparse
import ipaddress
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from kbroker.ui.collector import add_collector_options

if TYPE_CHECKING:
    from kbroker.ui.history import History
    from kbroker.ui.sampler import Sampler

DEFAULT_LISTEN = "127.0.0.1:9021"
DEFAULT_HISTORY = "kbroker-ui.sqlite"
DEFAULT_CAP_MB = 256


def listen_address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT")
    if host != "localhost":
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{host!r} is not an IP address or localhost") from None
    return host, int(port)


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return value


def positive_int(text: str) -> int:
    if not text.isdigit() or int(text) == 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return int(text)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = sub.add_parser("ui", help="serve a read-only web page of a cluster: consumer lag over time, group status, "
                                  "health and disks",
                       description="Watch a cluster in a browser: every consumer group (ZooKeeper- or "
                                   "Kafka-stored) with its lag over time and status, brokers, partitions and disks.")
    add_collector_options(p)
    p.add_argument("--listen", type=listen_address, default=DEFAULT_LISTEN, metavar="HOST:PORT",
                   help=f"where the page is served (default {DEFAULT_LISTEN}: this host only)")
    p.add_argument("--interval", type=positive_seconds, default=10.0, metavar="SECONDS",
                   help="how often to sample the cluster (default 10)")
    p.add_argument("--history", default=DEFAULT_HISTORY, metavar="FILE",
                   help=f"the SQLite file keeping lag and throughput over time (default ./{DEFAULT_HISTORY})")
    p.add_argument("--history-cap-mb", type=positive_int, default=DEFAULT_CAP_MB, metavar="MB",
                   help=f"the history file's size cap; the oldest samples go first (default {DEFAULT_CAP_MB})")
    p.add_argument("--basic-auth-file", metavar="FILE",
                   help="require HTTP basic auth: the file's first line is user:password")
    p.set_defaults(run=run, parser=p)
    return p


def run(args: argparse.Namespace) -> int:
    # imported here, not above: every `kbroker` command builds this parser, and only this one needs aiohttp
    import asyncio
    import logging
    import os
    import signal
    import sqlite3

    from kbroker.tools.client import ClientError
    from kbroker.ui.app import Credentials, Ui, serve
    from kbroker.ui.collector import collector_from_args
    from kbroker.ui.history import History
    from kbroker.ui.sampler import Sampler

    logging.basicConfig(level=os.environ.get("KBROKER_LOG_LEVEL", "INFO"),
                        format="[%(asctime)s] %(levelname)s %(message)s (%(name)s)")
    history_path = Path(args.history)
    if not history_path.parent.is_dir():
        print(f"kbroker ui: --history {args.history}: no such directory", file=sys.stderr)
        return 2
    try:
        credentials = Credentials.read(args.basic_auth_file) if args.basic_auth_file else None
        collector = collector_from_args(args)
    except (OSError, ValueError, ClientError) as exc:
        print(f"kbroker ui: {exc}", file=sys.stderr)
        return 2
    cap = args.history_cap_mb * 1024 * 1024

    opened: list[History] = []

    def make_sampler() -> Sampler:  # on the history thread, as every later call into it
        history = History(history_path, cap_bytes=cap)
        opened.append(history)
        return Sampler(history)

    def close_history() -> None:
        for history in opened:
            history.close()

    ui = Ui(collector, make_sampler, interval=args.interval, credentials=credentials, close_history=close_history)
    host, port = args.listen

    def announce(url: str) -> None:
        print(f"kbroker ui: watching {args.bootstrap_server} on {url}", flush=True)

    async def main() -> None:
        task = asyncio.current_task()
        assert task is not None
        for stop in (signal.SIGTERM, signal.SIGINT):  # SIGINT too: a shell may start it with SIGINT ignored
            asyncio.get_running_loop().add_signal_handler(stop, task.cancel)
        try:
            try:
                await ui.open_history()
            except (sqlite3.Error, OSError) as exc:
                raise _Fatal(f"cannot open the history {args.history}: {exc}") from exc
            try:
                await serve(ui, host, port, announce)
            except OSError as exc:
                raise _Fatal(f"cannot listen on {host}:{port}: {exc}") from exc
        finally:
            await collector.close()

    try:
        asyncio.run(main())
    except (KeyboardInterrupt, asyncio.CancelledError):
        return 0
    except _Fatal as exc:
        print(f"kbroker ui: {exc}", file=sys.stderr)
        return 1
    return 0


class _Fatal(Exception):
    """What stops the UI before it serves: one line on stderr, exit status 1."""
