"""``kbroker configs``: kafka-configs.sh --bootstrap-server for users and client ids (client quotas
and SCRAM credentials), topics and brokers (dynamic broker configs, KIP-226).

    kbroker configs --bootstrap-server HOST:PORT --alter --entity-type clients --entity-name C
                    --add-config 'producer_byte_rate=1048576,consumer_byte_rate=2097152'
    kbroker configs --bootstrap-server HOST:PORT --alter --entity-type users --entity-name U
                    [--entity-type clients --entity-name C | --entity-default]
                    --add-config 'request_percentage=50' | --delete-config producer_byte_rate
    kbroker configs --bootstrap-server HOST:PORT --alter --entity-type users --entity-name alice
                    --add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=x]'
    kbroker configs --bootstrap-server HOST:PORT --alter --entity-type users --entity-name alice
                    --delete-config SCRAM-SHA-512
    kbroker configs --bootstrap-server HOST:PORT --describe --entity-type users [--entity-name U | --entity-default]
                    [--entity-type clients [--entity-name C | --entity-default]]
    kbroker configs --bootstrap-server HOST:PORT --alter --entity-type topics --entity-name T
                    --add-config retention.ms=60000 | --delete-config retention.ms
    kbroker configs --bootstrap-server HOST:PORT --describe --entity-type topics [--entity-name T]
    kbroker configs --bootstrap-server HOST:PORT --alter --entity-type brokers (--entity-name ID | --entity-default)
                    --add-config log.retention.ms=60000,max.connections=100 | --delete-config log.retention.ms
    kbroker configs --bootstrap-server HOST:PORT --describe --entity-type brokers [--entity-name ID | --entity-default]

As kafka-configs.sh does: --entity-default stands for the default entity (``<default>``) in the
place it is given; quota keys go through AlterClientQuotas / DescribeClientQuotas (describing is
strict: only entities of exactly the types given, any name where none is given); SCRAM keys go
through AlterUserScramCredentials with a salt made here and the salted password
(PBKDF2-HMAC of the password, never the password itself) and DescribeUserScramCredentials, which
shows the mechanism and iterations only. ``--command-config FILE`` takes Kafka's client properties
to reach a TLS or SASL listener. Output is Kafka's ("Completed updating config for user
alice.", "Quota configs for client-id 'c1' are producer_byte_rate=1048576.0", "SCRAM credential
configs for user-principal 'alice' are SCRAM-SHA-256=iterations=8192"). Brokers go as kafka-configs.sh 2.8
sends them: the entity's dynamic layer is read with DescribeConfigs, and AlterConfigs writes it back whole with the
keys added and deleted (to that broker; the cluster default to any). Exit status: 0 done, 1 an error from the
broker or the network (one line on stderr), 2 bad arguments.
"""
from __future__ import annotations

import argparse
import hashlib
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from kbroker.config.broker import parse_properties
from kbroker.protocol import API_KEYS
from kbroker.tools.client import (
    AdminClient,
    ClientError,
    Connection,
    KafkaApiError,
    add_timeout_option,
    add_tool_parser,
)
from kbroker.tools.security import SecurityConfigError, load_command_config
from zk_compat.jvm import java_double, random_base36

ERROR_PREFIX = "Error while executing config command : "
QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate")
SCRAM_MECHANISMS = {"SCRAM-SHA-256": (1, "sha256"), "SCRAM-SHA-512": (2, "sha512")}
MECHANISM_NAMES = {code: name for name, (code, _) in SCRAM_MECHANISMS.items()}
DEFAULT_ITERATIONS = 4096
MIN_ITERATIONS = 4096
RESOURCE_NOT_FOUND = 91
QUOTA_ENTITY = {"users": "user", "clients": "client-id"}
DESCRIBED_AS = {"user": "user-principal", "client-id": "client-id"}
MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2
# kafka-configs.sh's split of --add-config: commas and '=' outside [...] separate
_OUTSIDE_BRACKETS = r"(?=[^\]]*(?:\[|$))"
_SCRAM_VALUE = re.compile(r"(?:iterations=(-?[0-9]*),)?password=(.*)", re.DOTALL)


class ConfigCommandError(Exception):
    """A failure to report as "Error while executing config command : <message>"."""


class _EntityName(argparse.Action):
    """--entity-name N and --entity-default, kept in command-line order ("" = the default entity)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[Any] | None, option_string: str | None = None) -> None:
        names = list(getattr(namespace, "entity_names", None) or [])
        names.append("" if option_string == "--entity-default" else str(values))
        namespace.entity_names = names


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = add_tool_parser(sub, "configs", run,
                        help="alter and describe client quotas and SCRAM credentials (kafka-configs.sh)",
                        description="Alter and describe the quotas of users and client ids and the SCRAM "
                                    "credentials of users, like kafka-configs.sh --bootstrap-server.",
                        actions={"--alter": "change the entity's configs", "--describe": "show the entity's configs"})
    p.add_argument("--entity-type", action="append", default=[], choices=("users", "clients", "topics", "brokers"),
                   help="users or clients; both (users first or clients first) for a user's client id; "
                        "or topics (their config overrides); or brokers (dynamic broker configs)")
    p.add_argument("--entity-name", action=_EntityName, metavar="NAME", dest="entity_names",
                   help="the user or client id, in the order of --entity-type")
    p.add_argument("--entity-default", action=_EntityName, nargs=0, dest="entity_names",
                   help="the default user or client id (<default>), in place of --entity-name")
    p.add_argument("--add-config", metavar="K=V,...",
                   help="configs to set: quota keys (producer_byte_rate=1048576,...) or, for a user, "
                        "SCRAM-SHA-256=[iterations=8192,password=...] / SCRAM-SHA-512=[password=...]")
    p.add_argument("--add-config-file", metavar="FILE",
                   help="a properties file of configs to add (keeps SCRAM passwords off the command line)")
    p.add_argument("--delete-config", metavar="K,...", help="config keys to remove")
    p.add_argument("--command-config", metavar="FILE",
                   help="Kafka client properties for a TLS or SASL listener (security.protocol, sasl.mechanism, "
                        "sasl.jaas.config, ssl.truststore.location, ...)")
    add_timeout_option(p, 30000, "how long to wait for each answer")
    p.set_defaults(entity_names=[])
    return p


def parse_add_config(text: str) -> dict[str, str]:
    """kafka-configs.sh's --add-config: 'k1=v1,k2=[a,b],k3=v3' -> {k1: v1, k2: "a,b", k3: v3}."""
    out: dict[str, str] = {}
    for item in re.split("," + _OUTSIDE_BRACKETS, text):
        pair = re.split(r"\s*=\s*" + _OUTSIDE_BRACKETS, item)
        if len(pair) != 2 or not pair[0].strip():
            raise ValueError('Invalid entity config: all configs to be added must be in the format "key=val".')
        out[pair[0].strip()] = re.sub(r"[\[\]]", "", pair[1]).strip()
    return out


def _check_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> tuple[dict[str, str], list[str]]:
    types, names = args.entity_type, args.entity_names
    if not types:
        parser.error("at least one --entity-type must be given (users or clients)")
    if len(types) > 2 or (len(types) == 2 and set(types) != {"users", "clients"}):
        parser.error("only 'users' and 'clients' entity types may be given together")
    if types == ["topics"] and "" in names:
        parser.error("--entity-default is not allowed with --entity-type topics")
    if "brokers" in types and len(types) > 1:
        parser.error("--entity-type brokers may not be given with another entity type")
    for name in names if types == ["brokers"] else ():
        if name and not re.fullmatch(r"-?[0-9]+", name.strip()):
            parser.error(f"The entity name for brokers must be a valid integer broker id, but it is: {name}")
    if len(names) > len(types):
        parser.error("more entity names than entity types given")
    if args.alter and len(names) != len(types):
        parser.error(f"an entity name (--entity-name or --entity-default) must be given with --alter of "
                     f"{','.join(types)}")
    adding = args.add_config or args.add_config_file
    if args.describe and (adding or args.delete_config):
        parser.error("--add-config, --add-config-file and --delete-config can only be used with --alter")
    if args.alter and not (adding or args.delete_config):
        parser.error("at least one of --add-config, --add-config-file or --delete-config must be given with --alter")
    if args.timeout <= 0:
        parser.error("--timeout must be positive")
    try:
        add = parse_add_config(args.add_config) if args.add_config else {}
    except ValueError as exc:
        parser.error(str(exc))
    if args.add_config_file:
        try:
            text = Path(args.add_config_file).read_text(encoding="utf-8")
            from_file = parse_properties(text, args.add_config_file)
        except OSError as exc:
            parser.error(f"cannot read --add-config-file {args.add_config_file}: {exc.strerror}")
        except ValueError as exc:  # kbroker.config.broker's ConfigError: file and line
            parser.error(str(exc))
        for key, (value, _) in from_file.items():
            if key in add:
                parser.error(f"{key} is given both in --add-config and in --add-config-file")
            add[key] = re.sub(r"^\[(.*)\]$", r"\1", value)  # SCRAM-SHA-256=[password=...] or without brackets
    delete = [k.strip() for k in args.delete_config.split(",")] if args.delete_config else []
    return add, delete


def run(args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    add, delete = _check_args(args, args.parser)
    try:
        security = load_command_config(args.command_config) if args.command_config else None
        with AdminClient(args.bootstrap_server, timeout=args.timeout / 1000, security=security) as admin:
            if args.entity_type == ["brokers"]:
                if args.alter:
                    alter_broker(admin, args.entity_names[0], add, delete, out)
                else:
                    describe_brokers(admin, args.entity_names[0] if args.entity_names else None, out)
            elif args.entity_type == ["topics"]:
                if args.alter:
                    alter_topic(admin, args.entity_names[0], add, delete, out)
                else:
                    describe_topics(admin, args.entity_names[0] if args.entity_names else None, out)
            elif args.alter:
                alter(admin, args.entity_type, args.entity_names, add, delete, out)
            else:
                describe(admin, args.entity_type, args.entity_names, out)
    except (ConfigCommandError, ClientError, SecurityConfigError) as exc:
        out.flush()
        print(ERROR_PREFIX + str(exc), file=err)
        return 1
    return 0


# -- alter ----------------------------------------------------------------------------------

def alter(admin: AdminClient, types: list[str], names: list[str], add: dict[str, str], delete: list[str],
          out: TextIO) -> None:
    quota_add = {k: v for k, v in add.items() if k in QUOTA_KEYS}
    scram_add = {k: v for k, v in add.items() if k in SCRAM_MECHANISMS}
    unknown_add = [k for k in add if k not in QUOTA_KEYS and k not in SCRAM_MECHANISMS]
    quota_delete = [k for k in delete if k in QUOTA_KEYS]
    scram_delete = [k for k in delete if k in SCRAM_MECHANISMS]
    unknown_delete = [k for k in delete if k not in QUOTA_KEYS and k not in SCRAM_MECHANISMS]
    if types[0] == "clients" or len(types) == 2:
        if unknown_add or scram_add:
            raise ConfigCommandError(f"Only quota configs can be added for 'clients' using --bootstrap-server. "
                                     f"Unexpected config names: {', '.join(unknown_add + list(scram_add))}")
        if unknown_delete or scram_delete:
            raise ConfigCommandError(f"Only quota configs can be deleted for 'clients' using --bootstrap-server. "
                                     f"Unexpected config names: {', '.join(unknown_delete + scram_delete)}")
    else:
        if unknown_add:
            raise ConfigCommandError(f"Only quota and SCRAM credential configs can be added for 'users' using "
                                     f"--bootstrap-server. Unexpected config names: {', '.join(unknown_add)}")
        if unknown_delete:
            raise ConfigCommandError(f"Only quota and SCRAM credential configs can be deleted for 'users' using "
                                     f"--bootstrap-server. Unexpected config names: {', '.join(unknown_delete)}")
        if scram_add or scram_delete:
            if "" in names:
                raise ConfigCommandError("The use of --entity-default is not allowed with User SCRAM Credentials "
                                         "using --bootstrap-server.")
            if quota_add or quota_delete:
                raise ConfigCommandError("Cannot alter both quota and SCRAM credential configs simultaneously "
                                         "for 'users' using --bootstrap-server.")
    if quota_add or quota_delete:
        alter_quotas(admin, types, names, quota_add, quota_delete)
    else:
        alter_scram(admin, names[0], scram_add, scram_delete)
    if names[0]:
        print(f"Completed updating config for {types[0][:-1]} {names[0]}.", file=out)
    else:
        print(f"Completed updating default config for {types[0]} in the cluster.", file=out)


def alter_quotas(admin: AdminClient, types: list[str], names: list[str], add: dict[str, str],
                 delete: list[str]) -> None:
    ops = []
    for key, text in add.items():
        try:
            value = float(text)
        except ValueError:
            raise ConfigCommandError(f"Cannot parse quota configuration value for {key}: {text}") from None
        ops.append({"key": key, "value": value, "remove": False})
    ops += [{"key": key, "value": 0.0, "remove": True} for key in delete]
    entity = [{"entity_type": QUOTA_ENTITY[t], "entity_name": n or None} for t, n in zip(types, names)]
    conn = admin.connection()
    response = conn.send(API_KEYS["AlterClientQuotas"], {"entries": [{"entity": entity, "ops": ops}],
                                                         "validate_only": False})
    for entry in response.entries:
        if entry.error_code:
            raise KafkaApiError(entry.error_code, entry.error_message, context="AlterClientQuotas")


def scram_salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """SCRAM's SaltedPassword: PBKDF2-HMAC over the UTF-8 password (no SASLprep, as Kafka)."""
    return hashlib.pbkdf2_hmac(SCRAM_MECHANISMS[mechanism][1], password.encode("utf-8"), salt, iterations)


def alter_scram(admin: AdminClient, user: str, add: dict[str, str], delete: list[str]) -> None:
    upsertions = []
    for mechanism, text in add.items():
        m = _SCRAM_VALUE.fullmatch(text)
        if m is None:
            # never the value itself: it holds the password
            raise ConfigCommandError(f"Invalid credential property {mechanism}: expected "
                                     f"[iterations=N,]password=PASSWORD")
        iterations = int(m.group(1)) if m.group(1) not in (None, "", "-1") else DEFAULT_ITERATIONS
        if iterations < MIN_ITERATIONS:
            raise ConfigCommandError(f"Iterations {iterations} is less than the minimum {MIN_ITERATIONS} required "
                                     f"for {mechanism}")
        salt = random_base36().encode()  # what Kafka's tools use: base-36 text of 130 random bits
        upsertions.append({"name": user, "mechanism": SCRAM_MECHANISMS[mechanism][0], "iterations": iterations,
                           "salt": salt, "salted_password": scram_salted_password(mechanism, m.group(2), salt,
                                                                                  iterations)})
    deletions = [{"name": user, "mechanism": SCRAM_MECHANISMS[m][0]} for m in delete]
    conn = admin.controller()
    response = conn.send(API_KEYS["AlterUserScramCredentials"], {"deletions": deletions, "upsertions": upsertions})
    for result in response.results:
        if result.error_code:
            raise KafkaApiError(result.error_code, result.error_message,
                                context=f"AlterUserScramCredentials for user '{result.user}'")


# -- describe -------------------------------------------------------------------------------

def describe(admin: AdminClient, types: list[str], names: list[str], out: TextIO) -> None:
    components = []
    for i, t in enumerate(types):
        if i >= len(names):
            components.append({"entity_type": QUOTA_ENTITY[t], "match_type": MATCH_ANY, "match": None})
        elif names[i] == "":
            components.append({"entity_type": QUOTA_ENTITY[t], "match_type": MATCH_DEFAULT, "match": None})
        else:
            components.append({"entity_type": QUOTA_ENTITY[t], "match_type": MATCH_EXACT, "match": names[i]})
    conn = admin.connection()
    response = conn.send(API_KEYS["DescribeClientQuotas"], {"components": components, "strict": True})
    if response.error_code:
        raise KafkaApiError(response.error_code, response.error_message, context="DescribeClientQuotas")
    lines = []
    for entry in response.entries or []:
        parts = {e.entity_type: e.entity_name for e in entry.entity}
        where = []
        for kind in ("user", "client-id"):
            if kind in parts:
                name = parts[kind]
                described = DESCRIBED_AS[kind]
                where.append(f"{described} '{name}'" if name is not None else f"the default {described}")
        values = ", ".join(f"{v.key}={java_double(v.value)}" for v in entry.values)
        lines.append(f"Quota configs for {', '.join(where)} are {values}")
    for line in sorted(lines):
        print(line, file=out)
    if "clients" in types or "" in names:
        return  # as kafka-configs.sh: SCRAM credentials only for users alone, never the default one
    conn = admin.connection()
    users = [{"name": n} for n in names]
    response = conn.send(API_KEYS["DescribeUserScramCredentials"], {"users": users or None})
    if response.error_code:
        raise KafkaApiError(response.error_code, response.error_message, context="DescribeUserScramCredentials")
    for result in response.results:
        if result.error_code == RESOURCE_NOT_FOUND:
            continue  # a user without credentials: nothing to show
        if result.error_code:
            error = KafkaApiError(result.error_code, result.error_message)
            print(f"Error retrieving SCRAM credential configs for user-principal '{result.user}': {error}", file=out)
            continue
        infos = ", ".join(f"{MECHANISM_NAMES.get(i.mechanism, 'UNKNOWN')}=iterations={i.iterations}"
                          for i in result.credential_infos)
        print(f"SCRAM credential configs for user-principal '{result.user}' are {infos}", file=out)


# -- topics ---------------------------------------------------------------------------------

TOPIC_RESOURCE = 2
DYNAMIC_TOPIC_CONFIG = 1
SET, DELETE = 0, 1
CONFIG_SOURCES = {0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG",
                  3: "DYNAMIC_DEFAULT_BROKER_CONFIG", 4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG",
                  6: "DYNAMIC_BROKER_LOGGER_CONFIG"}


def _topic_overrides(admin: AdminClient, topic: str) -> list[Any]:
    conn = admin.connection()
    response = conn.send(API_KEYS["DescribeConfigs"], {
        "resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": topic, "configuration_keys": None}],
        "include_synonyms": True}, min_version=1)
    result = response.results[0]
    if result.error_code:
        raise KafkaApiError(result.error_code, result.error_message, context=f"DescribeConfigs of topic '{topic}'")
    return [c for c in result.configs if c.config_source == DYNAMIC_TOPIC_CONFIG]


def alter_topic(admin: AdminClient, topic: str, add: dict[str, str], delete: list[str], out: TextIO) -> None:
    """IncrementalAlterConfigs: SET each added key, DELETE each deleted one (which must be set now)."""
    present = {c.name for c in _topic_overrides(admin, topic)}
    invalid = [k for k in delete if k not in present]
    if invalid:
        raise ConfigCommandError(f"Invalid config(s): {','.join(invalid)}")
    configs = [{"name": k, "config_operation": SET, "value": v} for k, v in add.items()]
    configs += [{"name": k, "config_operation": DELETE, "value": None} for k in delete]
    response = admin.connection().send(API_KEYS["IncrementalAlterConfigs"], {
        "resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": topic, "configs": configs}],
        "validate_only": False})
    for r in response.responses:
        if r.error_code:
            raise KafkaApiError(r.error_code, r.error_message, context=f"IncrementalAlterConfigs of topic '{topic}'")
    print(f"Completed updating config for topic {topic}.", file=out)


def describe_topics(admin: AdminClient, topic: str | None, out: TextIO) -> None:
    """kafka-configs.sh's "Dynamic configs for topic T are:" and one line per override."""
    names = [topic] if topic is not None else sorted(t.name for t in admin.list_topics())
    for name in names:
        overrides = _topic_overrides(admin, name)
        print(f"Dynamic configs for topic {name} are:", file=out)
        for c in overrides:
            value = "null" if c.is_sensitive or c.value is None else c.value
            synonyms = ", ".join(f"{CONFIG_SOURCES.get(s.source, s.source)}:{s.name}="
                                 f"{'null' if c.is_sensitive or s.value is None else s.value}" for s in c.synonyms)
            print(f"  {c.name}={value} sensitive={str(c.is_sensitive).lower()} synonyms={{{synonyms}}}", file=out)


# -- brokers (dynamic broker configs) -------------------------------------------------------

BROKER_RESOURCE = 4
DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG = 2, 3


def _broker_connection(admin: AdminClient, name: str) -> Connection:
    """A broker's own configs are asked of that broker (as Kafka's admin client routes them); the default of any."""
    return admin.node(int(name)) if name else admin.connection()


def _broker_layer(admin: AdminClient, name: str) -> list[Any]:
    """The entries of a broker's dynamic layer (``name``), or of the cluster default (""), with synonyms."""
    what = f"broker {name}" if name else "the default broker configs"
    response = _broker_connection(admin, name).send(API_KEYS["DescribeConfigs"], {
        "resources": [{"resource_type": BROKER_RESOURCE, "resource_name": name, "configuration_keys": None}],
        "include_synonyms": True}, min_version=1)
    result = response.results[0]
    if result.error_code:
        raise KafkaApiError(result.error_code, result.error_message, context=f"DescribeConfigs of {what}")
    source = DYNAMIC_BROKER_CONFIG if name else DYNAMIC_DEFAULT_BROKER_CONFIG
    return [c for c in result.configs if c.config_source == source]


def alter_broker(admin: AdminClient, name: str, add: dict[str, str], delete: list[str], out: TextIO) -> None:
    """kafka-configs.sh 2.8: the layer as DescribeConfigs shows it, plus the added keys, less the deleted ones
    (which must be set), written whole with AlterConfigs; a sensitive key (shown as null) must be given again."""
    old = {c.name: c.value for c in _broker_layer(admin, name)}
    invalid = [k for k in delete if k not in old]
    if invalid:
        raise ConfigCommandError(f"Invalid config(s): {','.join(invalid)}")
    new = {**old, **add}
    for key in delete:
        new.pop(key, None)
    missing = [k for k, v in new.items() if v is None]
    if missing:
        raise ConfigCommandError("All sensitive broker config entries must be specified for --alter, missing "
                                 f"entries: Set({', '.join(missing)})")
    response = _broker_connection(admin, name).send(API_KEYS["AlterConfigs"], {
        "resources": [{"resource_type": BROKER_RESOURCE, "resource_name": name,
                       "configs": [{"name": k, "value": v} for k, v in new.items()]}],
        "validate_only": False})
    for r in response.responses:
        if r.error_code:
            raise KafkaApiError(r.error_code, r.error_message,
                                context=f"AlterConfigs of {'broker ' + name if name else 'the default broker configs'}")
    if name:
        print(f"Completed updating config for broker {name}.", file=out)
    else:
        print("Completed updating default config for brokers in the cluster.", file=out)


def describe_brokers(admin: AdminClient, name: str | None, out: TextIO) -> None:
    """kafka-configs.sh's "Dynamic configs for broker 1 are:" / "Default configs for brokers in the cluster are:";
    without a name every live broker, then the default."""
    names = [name] if name is not None else [str(b.node_id) for b in admin.metadata([]).brokers] + [""]
    for entity in names:
        if entity:
            print(f"Dynamic configs for broker {entity} are:", file=out)
        else:
            print("Default configs for brokers in the cluster are:", file=out)
        for c in _broker_layer(admin, entity):
            value = "null" if c.is_sensitive or c.value is None else c.value
            synonyms = ", ".join(f"{CONFIG_SOURCES.get(s.source, s.source)}:{s.name}="
                                 f"{'null' if c.is_sensitive or s.value is None else s.value}" for s in c.synonyms)
            print(f"  {c.name}={value} sensitive={str(c.is_sensitive).lower()} synonyms={{{synonyms}}}", file=out)


__all__ = ["add_parser", "parse_add_config", "run", "scram_salted_password"]
