#!/usr/bin/python
"""SCRAM users and ACLs on a running kbroker cluster, idempotently, through the kbroker CLI.

Describes first (``kbroker configs --describe``, ``kbroker acls --list``) and changes only what
differs; ``changed`` says whether anything was changed. Passwords are no_log options: Ansible masks
them in every result, and this module never puts a command line into a result or an error.
"""
from __future__ import annotations

import os
import re
import subprocess
import tempfile

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: kbroker_access
short_description: SCRAM users and ACLs on a kbroker cluster, through the kbroker CLI
description:
  - Runs C(kbroker configs) and C(kbroker acls) with C(--bootstrap-server) and C(--command-config).
  - Describes first and alters only what differs.
options:
  kbroker: {description: the kbroker executable, type: path, required: true}
  bootstrap_server: {description: host:port of a broker, type: str, required: true}
  command_config: {description: client properties file for the admin connection, type: path}
  timeout: {description: seconds per CLI call, type: int, default: 60}
  scram_users:
    description: >-
      name, password, mechanism (SCRAM-SHA-256|SCRAM-SHA-512), iterations, update_password
      (on_create|always), state
    type: list
    elements: dict
    default: []
  acls:
    description: >-
      principal, operations (list) or operation, one of topic/group/transactional_id/cluster, pattern_type
      (literal|prefixed), permission (allow|deny), host, state
    type: list
    elements: dict
    default: []
"""

RESOURCE_KINDS = {"topic": "TOPIC", "group": "GROUP", "transactional_id": "TRANSACTIONAL_ID", "cluster": "CLUSTER"}
CLI_RESOURCE_FLAGS = {"TOPIC": "--topic", "GROUP": "--group", "TRANSACTIONAL_ID": "--transactional-id",
                      "CLUSTER": "--cluster"}
OPERATIONS = ("ALL", "READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS",
              "ALTER_CONFIGS", "IDEMPOTENT_WRITE")
HEADER = re.compile(r"ResourcePattern\(resourceType=(\w+), name=(.*?), patternType=(\w+)\)")
ENTRY = re.compile(r"\(principal=(.+?), host=(.+?), operation=(\w+), permissionType=(\w+)\)")


class CliError(Exception):
    pass


def snake(operation: str) -> str:
    """Read -> READ, DescribeConfigs -> DESCRIBE_CONFIGS, describe_configs -> DESCRIBE_CONFIGS."""
    if "_" in operation or operation.isupper() or operation.islower():
        return operation.upper()
    return re.sub(r"(?<!^)(?=[A-Z])", "_", operation).upper()


def camel(operation: str) -> str:
    """DESCRIBE_CONFIGS -> DescribeConfigs (the spelling kafka-acls.sh documents)."""
    return "".join(part.capitalize() for part in operation.split("_"))


class Cli:
    def __init__(self, module: AnsibleModule) -> None:
        p = module.params
        self.base = [p["kbroker"]]
        self.connect = ["--bootstrap-server", p["bootstrap_server"]]
        if p["command_config"]:
            self.connect += ["--command-config", p["command_config"]]
        self.timeout = p["timeout"]
        self.options: dict[tuple[str, str], bool] = {}

    def takes(self, tool: str, option: str) -> bool:
        """Whether `kbroker <tool> --help` lists `option`."""
        key = (tool, option)
        if key not in self.options:
            proc = subprocess.run(self.base + [tool, "--help"], capture_output=True, text=True, timeout=self.timeout,
                                  stdin=subprocess.DEVNULL)
            self.options[key] = re.search(re.escape(option) + r"\b", proc.stdout) is not None
        return self.options[key]

    def run(self, tool: str, args: list[str], *, what: str, ok_missing: bool = False) -> tuple[int, str]:
        try:
            proc = subprocess.run(self.base + [tool] + self.connect + args, capture_output=True, text=True,
                                  timeout=self.timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise CliError(f"{what}: kbroker {tool} did not answer within {self.timeout} s") from None
        except OSError as exc:
            raise CliError(f"{what}: cannot run kbroker {tool}: {exc.strerror}") from None
        out = proc.stdout + proc.stderr
        if proc.returncode == 2 and "--command-config" in out and "unrecognized" in out:
            raise CliError(f"{what}: this kbroker {tool} takes no --command-config (no TLS/SASL login): set "
                           "kbroker_local_admin_listener: true, or install a kbroker whose tools take it")
        if proc.returncode != 0 and not (ok_missing and re.search(r"RESOURCE_NOT_FOUND|not found|no credential", out,
                                                                    re.I)):
            raise CliError(f"{what}: kbroker {tool} exited {proc.returncode}: {out.strip()[-2000:]}")
        return proc.returncode, out


# ---------------------------------------------------------------------------------------- SCRAM users

def scram_iterations(cli: Cli, name: str, mechanism: str) -> int | None:
    """The iterations of the user's credential for `mechanism`, None if it has none."""
    rc, out = cli.run("configs", ["--describe", "--entity-type", "users", "--entity-name", name],
                      what=f"describe user {name}", ok_missing=True)
    if rc != 0:
        return None
    match = re.search(re.escape(mechanism) + r"=\[?iterations=(\d+)", out)
    return int(match.group(1)) if match else None


def apply_scram_user(module: AnsibleModule, cli: Cli, user: dict, report: list[str]) -> bool:
    name, mechanism = user["name"], user["mechanism"]
    current = scram_iterations(cli, name, mechanism)
    if user["state"] == "absent":
        if current is None:
            return False
        if not module.check_mode:
            cli.run("configs", ["--alter", "--entity-type", "users", "--entity-name", name,
                                "--delete-config", mechanism], what=f"delete {mechanism} credential of {name}")
        report.append(f"removed {mechanism} credential of {name}")
        return True
    if current == user["iterations"] and user["update_password"] == "on_create":
        return False
    if not module.check_mode:
        config = f"{mechanism}=[iterations={user['iterations']},password={user['password']}]"
        alter = ["--alter", "--entity-type", "users", "--entity-name", name]
        if cli.takes("configs", "--add-config-file"):
            # the password in a private file for the moment, not on a command line other users can read
            fd, path = tempfile.mkstemp(prefix="kbroker-scram-", suffix=".properties")
            try:
                with os.fdopen(fd, "w") as f:
                    f.write(config + "\n")
                cli.run("configs", alter + ["--add-config-file", path], what=f"set {mechanism} credential of {name}")
            finally:
                os.unlink(path)
        else:
            cli.run("configs", alter + ["--add-config", config], what=f"set {mechanism} credential of {name}")
        after = scram_iterations(cli, name, mechanism)
        if after != user["iterations"]:
            raise CliError(f"set {mechanism} credential of {name}: describe shows iterations={after} afterwards")
    report.append(f"{'set' if current is None else 'updated'} {mechanism} credential of {name} "
                  f"(iterations={user['iterations']})")
    return True


# ---------------------------------------------------------------------------------------------- ACLs

def acl_resource(acl: dict) -> tuple[str, str, str]:
    kinds = [k for k in RESOURCE_KINDS if acl.get(k) not in (None, False, "")]
    if len(kinds) != 1:
        raise CliError(f"ACL for {acl.get('principal')}: give exactly one of topic, group, transactional_id, cluster")
    kind = RESOURCE_KINDS[kinds[0]]
    name = "kafka-cluster" if kind == "CLUSTER" else str(acl[kinds[0]])
    pattern = str(acl.get("pattern_type") or "literal").upper()
    if pattern not in ("LITERAL", "PREFIXED"):
        raise CliError(f"ACL on {name}: pattern_type must be literal or prefixed")
    return kind, name, pattern


def acl_entries(acl: dict) -> list[tuple[str, str, str, str]]:
    principal = acl.get("principal")
    if not principal or ":" not in str(principal):
        raise CliError(f"ACL {acl}: principal must be Type:name, e.g. User:alice")
    operations = acl.get("operations") or ([acl["operation"]] if acl.get("operation") else [])
    if not operations:
        raise CliError(f"ACL for {principal}: no operations")
    permission = str(acl.get("permission") or "allow").upper()
    if permission not in ("ALLOW", "DENY"):
        raise CliError(f"ACL for {principal}: permission must be allow or deny")
    out = []
    for operation in operations:
        op = snake(str(operation))
        if op not in OPERATIONS:
            raise CliError(f"ACL for {principal}: unknown operation {operation}")
        out.append((str(principal), str(acl.get("host") or "*"), op, permission))
    return out


def list_acls(cli: Cli, kind: str, name: str, pattern: str) -> set[tuple[str, str, str, str]]:
    args = ["--list", CLI_RESOURCE_FLAGS[kind]] + ([] if kind == "CLUSTER" else [name])
    args += ["--resource-pattern-type", pattern.lower()]
    _, out = cli.run("acls", args, what=f"list ACLs of {kind} {name}")
    found: set[tuple[str, str, str, str]] = set()
    inside = False
    for line in out.splitlines():
        header = HEADER.search(line)
        if header:
            inside = (header.group(1).upper(), header.group(2), header.group(3).upper()) == (kind, name, pattern)
            continue
        entry = ENTRY.search(line)
        if entry and inside:
            found.add((entry.group(1), entry.group(2), snake(entry.group(3)), entry.group(4).upper()))
    return found


def change_acl(cli: Cli, action: str, kind: str, name: str, pattern: str,
               entry: tuple[str, str, str, str]) -> None:
    principal, host, operation, permission = entry
    side = "allow" if permission == "ALLOW" else "deny"
    args = [action] + (["--force"] if action == "--remove" else [])
    args += [f"--{side}-principal", principal, f"--{side}-host", host, "--operation", camel(operation),
             CLI_RESOURCE_FLAGS[kind]] + ([] if kind == "CLUSTER" else [name])
    args += ["--resource-pattern-type", pattern.lower()]
    cli.run("acls", args, what=f"{action[2:]} ACL {side} {principal} {camel(operation)} on {kind} {name}")


def apply_acls(module: AnsibleModule, cli: Cli, acls: list[dict], report: list[str]) -> bool:
    wanted: dict[tuple[str, str, str], dict[tuple[str, str, str, str], bool]] = {}
    for acl in acls:
        resource = acl_resource(acl)
        present = str(acl.get("state") or "present") == "present"
        for entry in acl_entries(acl):
            wanted.setdefault(resource, {})[entry] = present
    changed = False
    for (kind, name, pattern), entries in wanted.items():
        current = list_acls(cli, kind, name, pattern)
        for entry, present in entries.items():
            if present == (entry in current):
                continue
            if not module.check_mode:
                change_acl(cli, "--add" if present else "--remove", kind, name, pattern, entry)
            report.append(f"{'added' if present else 'removed'} {entry[3].lower()} {entry[0]} from {entry[1]} "
                          f"{camel(entry[2])} on {kind} {name} ({pattern.lower()})")
            changed = True
        if changed and not module.check_mode:
            after = list_acls(cli, kind, name, pattern)
            wrong = [e for e, present in entries.items() if present != (e in after)]
            if wrong:
                raise CliError(f"ACLs on {kind} {name}: still not as wanted after the change: {wrong}")
    return changed


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "kbroker": {"type": "path", "required": True},
            "bootstrap_server": {"type": "str", "required": True},
            "command_config": {"type": "path", "default": None},
            "timeout": {"type": "int", "default": 60},
            "scram_users": {"type": "list", "elements": "dict", "default": [], "options": {
                "name": {"type": "str", "required": True},
                "password": {"type": "str", "no_log": True},
                "mechanism": {"type": "str", "default": "SCRAM-SHA-512",
                              "choices": ["SCRAM-SHA-256", "SCRAM-SHA-512"]},
                "iterations": {"type": "int", "default": 8192},
                "update_password": {"type": "str", "default": "on_create", "choices": ["on_create", "always"]},
                "state": {"type": "str", "default": "present", "choices": ["present", "absent"]},
            }},
            "acls": {"type": "list", "elements": "dict", "default": []},
        },
        supports_check_mode=True,
    )
    cli = Cli(module)
    report: list[str] = []
    changed = False
    try:
        for user in module.params["scram_users"]:
            if user["state"] == "present" and not user["password"]:
                raise CliError(f"SCRAM user {user['name']}: no password")
            if user["state"] == "present" and re.search(r"[,\]\s]", user["password"]):
                raise CliError(f"SCRAM user {user['name']}: the password may hold no comma, ']' or white space "
                               "(kafka-configs syntax)")
            changed |= apply_scram_user(module, cli, user, report)
        if module.params["acls"]:
            changed |= apply_acls(module, cli, module.params["acls"], report)
    except CliError as exc:
        module.fail_json(msg=str(exc), changes=report)
    module.exit_json(changed=changed, changes=report)


if __name__ == "__main__":
    main()
