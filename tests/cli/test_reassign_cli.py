"""``kbroker reassign`` argument and file checks that need no broker: they fail before any
connection (the bootstrap address points at a closed port, so a request would fail differently)."""
from __future__ import annotations

import json

import pytest

from kbroker.tools import reassign

from .conftest import run_cli

NOWHERE = "127.0.0.1:1"


def reassign_cli(*args: str):
    return run_cli("reassign", "--bootstrap-server", NOWHERE, *args)


def one_error_line(result) -> str:
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    return lines[0]


@pytest.mark.parametrize("args, message", [
    ([], "one of the arguments --generate --execute --verify --list --cancel is required"),
    (["--list", "--verify"], "not allowed with argument"),
    (["--execute"], "--execute needs --reassignment-json-file"),
    (["--verify"], "--verify needs --reassignment-json-file"),
    (["--cancel"], "--cancel needs --reassignment-json-file"),
    (["--generate", "--broker-list", "1"], "--generate needs --topics-to-move-json-file"),
    (["--list", "--broker-list", "1,2"], "--broker-list can't be used with --list"),
    (["--verify", "--reassignment-json-file", "f", "--throttle", "10"], "--throttle can't be used with --verify"),
    (["--execute", "--reassignment-json-file", "f", "--timeout", "0"], "--timeout must be positive"),
])
def test_bad_arguments_exit_2(args, message):
    result = reassign_cli(*args)
    assert result.returncode == 2, result
    assert message in result.stderr


def test_missing_bootstrap_server_exits_2():
    result = run_cli("reassign", "--list")
    assert result.returncode == 2 and "--bootstrap-server" in result.stderr


def _file(tmp_path, content) -> str:
    path = tmp_path / "plan.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(path)


@pytest.mark.parametrize("content, message", [
    ("{not json", "not valid JSON"),
    ([1, 2], "must be a JSON object"),
    ({"version": 2, "partitions": []}, "Not supported version field value 2"),
    ({"version": 1}, 'needs "partitions"'),
    ({"version": 1, "partitions": []}, "Partition reassignment list cannot be empty"),
    ({"partitions": [{"topic": "t", "partition": 0, "replicas": []}]}, "Partition replica list cannot be empty"),
    ({"partitions": [{"topic": "t", "partition": "0", "replicas": [1]}]}, 'no "partition" number'),
    ({"partitions": [{"topic": "t", "partition": 0, "replicas": [1, "2"]}]}, "must be a list of broker ids"),
    ({"partitions": [{"topic": "t", "partition": 0, "replicas": [1, 1, 2]}]},
     "Partition replica lists may not contain duplicate entries: t-0 contains multiple entries for 1"),
    ({"partitions": [{"topic": "t", "partition": 0, "replicas": [1]},
                     {"topic": "t", "partition": 0, "replicas": [2]}]},
     "Partition reassignment contains duplicate topic partitions: t-0"),
    ({"partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2], "log_dirs": ["any"]}]},
     "Size of replicas list [1, 2] is different from size of log dirs list ['any'] for partition t-0"),
    ({"partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2], "log_dirs": ["any", 7]}]},
     '"log_dirs" must be a list of strings'),
])
def test_execute_refuses_bad_files(tmp_path, content, message):
    line = one_error_line(reassign_cli("--execute", "--reassignment-json-file", _file(tmp_path, content)))
    assert message in line


def test_unreadable_file(tmp_path):
    line = one_error_line(reassign_cli("--verify", "--reassignment-json-file", str(tmp_path / "missing.json")))
    assert "cannot read" in line and "No such file or directory" in line


@pytest.mark.parametrize("brokers, content, message", [
    ("1,x", {"topics": [{"topic": "t"}]}, "is not a comma-separated list of broker ids"),
    ("1,2,1", {"topics": [{"topic": "t"}]}, "Broker list contains duplicate entries: 1"),
    ("1,2", {"topics": [{"topic": "t"}, {"topic": "t"}]}, "List of topics to reassign contains duplicate entries: t"),
    ("1,2", {"topics": []}, "names no topic"),
    ("1,2", {"topics": [{"name": "t"}]}, 'not {"topic": NAME}'),
])
def test_generate_refuses_bad_input(tmp_path, brokers, content, message):
    line = one_error_line(reassign_cli("--generate", "--broker-list", brokers,
                                       "--topics-to-move-json-file", _file(tmp_path, content)))
    assert message in line


def test_no_broker_is_one_line(tmp_path):
    line = one_error_line(reassign_cli("--list"))
    assert "cannot connect to 127.0.0.1:1" in line


def test_formats_are_kafkas():
    assert reassign.format_json({("b", 0): [2, 3], ("a", 1): [1, 2], ("a", 0): [3]}) == (
        '{"version":1,"partitions":[{"topic":"a","partition":0,"replicas":[3],"log_dirs":["any"]},'
        '{"topic":"a","partition":1,"replicas":[1,2],"log_dirs":["any","any"]},'
        '{"topic":"b","partition":0,"replicas":[2,3],"log_dirs":["any","any"]}]}')
    assert reassign.list_text({}) == "No partition reassignments found."
    assert reassign.list_text({("foo", 1): ([1, 2, 3, 4], [4], [1]), ("bar", 0): ([2, 3], [3], []),
                               ("foo", 0): ([1, 2], [], [])}).splitlines() == [
        "Current partition reassignments:",
        "bar-0: replicas: 2,3. adding: 3.",
        "foo-0: replicas: 1,2.",
        "foo-1: replicas: 1,2,3,4. adding: 4. removing: 1.",
    ]
