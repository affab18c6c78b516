"""The role's kbroker_access module (ansible/roles/kbroker/library) without a cluster: operation names,
the parsing of `kbroker acls --list` and `kbroker configs --describe` output, and that only what differs
is changed (a stand-in CLI records the calls). The real CLI against real brokers: test_ansible_security.py."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

MODULE = Path(__file__).resolve().parents[2] / "ansible" / "roles" / "kbroker" / "library" / "kbroker_access.py"
spec = importlib.util.spec_from_file_location("kbroker_access", MODULE)
assert spec and spec.loader
access = importlib.util.module_from_spec(spec)
spec.loader.exec_module(access)

LISTING = """Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=PREFIXED)`:\x20
 \t(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)
\t(principal=User:alice, host=10.0.0.1, operation=DESCRIBE_CONFIGS, permissionType=DENY)\x20

Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`:\x20
 \t(principal=User:bob, host=*, operation=READ, permissionType=ALLOW)\x20
"""


class FakeCli:
    def __init__(self, outputs: dict[str, str]) -> None:
        self.outputs = outputs
        self.calls: list[list[str]] = []

    def run(self, tool: str, args: list[str], *, what: str, ok_missing: bool = False) -> tuple[int, str]:
        self.calls.append([tool, *args])
        return 0, self.outputs.get(args[0], "")

    def takes(self, tool: str, option: str) -> bool:
        return False


class FakeModule:
    check_mode = False


@pytest.mark.parametrize("given, snake, camel", [
    ("Read", "READ", "Read"), ("DescribeConfigs", "DESCRIBE_CONFIGS", "DescribeConfigs"),
    ("IDEMPOTENT_WRITE", "IDEMPOTENT_WRITE", "IdempotentWrite"), ("cluster_action", "CLUSTER_ACTION", "ClusterAction"),
    ("ALL", "ALL", "All"),
])
def test_operation_names(given: str, snake: str, camel: str) -> None:
    assert access.snake(given) == snake
    assert access.camel(access.snake(given)) == camel


def test_list_keeps_only_the_exact_pattern() -> None:
    cli = FakeCli({"--list": LISTING})
    assert access.list_acls(cli, "TOPIC", "orders", "PREFIXED") == {
        ("User:alice", "*", "WRITE", "ALLOW"), ("User:alice", "10.0.0.1", "DESCRIBE_CONFIGS", "DENY")}
    assert access.list_acls(cli, "TOPIC", "orders", "LITERAL") == {("User:bob", "*", "READ", "ALLOW")}
    assert cli.calls[0] == ["acls", "--list", "--topic", "orders", "--resource-pattern-type", "prefixed"]


def test_acls_change_only_what_differs() -> None:
    cli = FakeCli({"--list": LISTING})
    report: list[str] = []
    acls = [{"principal": "User:alice", "operations": ["Write", "Read"], "topic": "orders", "pattern_type": "prefixed"},
            {"principal": "User:alice", "operation": "DescribeConfigs", "topic": "orders", "pattern_type": "prefixed",
             "permission": "deny", "host": "10.0.0.1", "state": "absent"},
            {"principal": "User:bob", "operations": ["Read"], "topic": "orders"}]
    with pytest.raises(access.CliError, match="still not as wanted"):   # the stand-in never changes its listing
        access.apply_acls(FakeModule(), cli, acls, report)
    changes = [c for c in cli.calls if c[1] in ("--add", "--remove")]
    assert changes == [
        ["acls", "--add", "--allow-principal", "User:alice", "--allow-host", "*", "--operation", "Read",
         "--topic", "orders", "--resource-pattern-type", "prefixed"],
        ["acls", "--remove", "--force", "--deny-principal", "User:alice", "--deny-host", "10.0.0.1", "--operation",
         "DescribeConfigs", "--topic", "orders", "--resource-pattern-type", "prefixed"],
    ]
    assert len(report) == 2


def test_acls_already_there_change_nothing() -> None:
    cli = FakeCli({"--list": LISTING})
    report: list[str] = []
    acls = [{"principal": "User:alice", "operations": ["Write"], "topic": "orders", "pattern_type": "prefixed"},
            {"principal": "User:bob", "operations": ["Read"], "topic": "orders"}]
    assert access.apply_acls(FakeModule(), cli, acls, report) is False
    assert report == [] and all(c[1] == "--list" for c in cli.calls)


@pytest.mark.parametrize("acl, error", [
    ({"principal": "alice", "operation": "Read", "topic": "t"}, "Type:name"),
    ({"principal": "User:a", "operation": "Reed", "topic": "t"}, "unknown operation"),
    ({"principal": "User:a", "operation": "Read"}, "exactly one of"),
    ({"principal": "User:a", "operation": "Read", "topic": "t", "group": "g"}, "exactly one of"),
    ({"principal": "User:a", "operation": "Read", "topic": "t", "pattern_type": "match"}, "literal or prefixed"),
])
def test_bad_acls_are_refused(acl: dict, error: str) -> None:
    with pytest.raises(access.CliError, match=error):
        access.apply_acls(FakeModule(), FakeCli({}), [acl], [])


def test_scram_user_set_only_when_missing_or_iterations_differ() -> None:
    described = "SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-512=iterations=8192\n"
    user = {"name": "alice", "password": "pw", "mechanism": "SCRAM-SHA-512", "iterations": 8192,
            "update_password": "on_create", "state": "present"}
    cli = FakeCli({"--describe": described})
    assert access.apply_scram_user(FakeModule(), cli, user, []) is False
    assert [c[1] for c in cli.calls] == ["--describe"]
    cli = FakeCli({"--describe": described.replace("8192", "4096")})   # the stand-in never changes it
    with pytest.raises(access.CliError, match="iterations=4096 afterwards"):
        access.apply_scram_user(FakeModule(), cli, user, [])
    alter = [c for c in cli.calls if c[1] == "--alter"][0]
    assert alter[-2:] == ["--add-config", "SCRAM-SHA-512=[iterations=8192,password=pw]"]
    cli = FakeCli({"--describe": ""})
    report: list[str] = []
    assert access.apply_scram_user(FakeModule(), cli, {**user, "state": "absent"}, report) is False and not report
