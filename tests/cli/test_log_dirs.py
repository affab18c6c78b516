"""``kbroker log-dirs`` (kafka-log-dirs.sh): arguments, Kafka's output against the shared CLI broker,
and the ERROR line for a broker not in the cluster. A future replica and an offline dir in the output
are covered by tests/integration/test_alter_replica_log_dirs.py."""
from __future__ import annotations

import argparse
import io
import json

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.tools import log_dirs


def log_dirs_cli(bootstrap: str, *argv: str) -> tuple[int, str, str]:
    """Run the tool in-process: (exit status, stdout, stderr)."""
    parser = argparse.ArgumentParser()
    log_dirs.add_parser(parser.add_subparsers())
    args = parser.parse_args(["log-dirs", "--bootstrap-server", bootstrap, *argv])
    out, err = io.StringIO(), io.StringIO()
    return args.run(args, out, err), out.getvalue(), err.getvalue()


def test_describe_is_required(kbroker):
    done = kbroker("log-dirs", "--bootstrap-server", "127.0.0.1:1")
    assert done.returncode == 2 and "one of the arguments --describe is required" in done.stderr


def test_describe_prints_kafkas_lines(broker, unique):
    topic, other = unique("t"), unique("o")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic(topic, 2, 1), NewTopic(other, 1, 1)]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(10):
        producer.produce(topic, value=b"v" * 100, partition=i % 2)
    assert producer.flush(30) == 0
    code, out, err = log_dirs_cli(broker.bootstrap, "--describe", "--topic-list", topic)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[:2] == ["Querying brokers for log directories information",
                         "Received log directory information from brokers 0"]
    assert len(lines) == 3 and " " not in lines[2].replace("log directories", "")
    answer = json.loads(lines[2])
    assert answer["version"] == 1 and [b["broker"] for b in answer["brokers"]] == [0]
    (log_dir,) = answer["brokers"][0]["logDirs"]
    assert log_dir["logDir"] == str(broker.log_dir.resolve()) and log_dir["error"] is None
    parts = sorted(log_dir["partitions"], key=lambda p: p["partition"])
    assert [p["partition"] for p in parts] == [f"{topic}-0", f"{topic}-1"]  # --topic-list leaves the other out
    assert all(p["size"] > 0 and p["offsetLag"] == 0 and p["isFuture"] is False for p in parts)
    code, out, _ = log_dirs_cli(broker.bootstrap, "--describe", "--broker-list", "0")
    assert code == 0 and f'"{other}-0"' in out.splitlines()[2]


@pytest.mark.parametrize("brokers, line", [
    ("0,7", "ERROR: The given brokers do not exist from --broker-list: 7. Current existent brokers: 0"),
])
def test_unknown_broker_is_kafkas_error_line(broker, brokers, line):
    code, out, _ = log_dirs_cli(broker.bootstrap, "--describe", "--broker-list", brokers)
    assert (code, out) == (1, line + "\n")


def test_bad_broker_list_is_one_line(broker):
    code, out, err = log_dirs_cli(broker.bootstrap, "--describe", "--broker-list", "0,x")
    assert (code, out) == (1, "")
    assert err == "Error: --broker-list '0,x' is not a comma-separated list of broker ids\n"
