"""Kafka's line between request handling and the replica manager, checked over the source.

In Kafka, KafkaApis owns what the wire says (request versions, fetch sessions, client quotas, down-conversion)
and hands ReplicaManager.appendRecords / fetchMessages records per partition and fetch parameters
(apache/kafka core/src/main/scala/kafka/server/KafkaApis.scala, ReplicaManager.scala). Here the same line runs
between ``kbroker/handlers`` and the packages below it: no module of ``kbroker/topics``, ``kbroker/replicas``,
``kbroker/replication`` or ``kbroker/log`` reads a request's API version, the server's fetch-session cache or a
client quota. Replication throttles (KIP-73) stay below, as in Kafka's ReplicaManager."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BELOW_THE_HANDLERS = ("kbroker/topics", "kbroker/replicas", "kbroker/replication", "kbroker/log")

# Modules that stand for the wire's request side: their import below the handlers is the leak itself.
FORBIDDEN_MODULES = ("kbroker.handlers", "kbroker.protocol.header", "kbroker.security.quotas")
# Names of the request version, the server's fetch sessions and the client quotas (as identifiers, attributes,
# parameters). A follower's own session with its leader is the client side of KIP-227 and keeps its names.
FORBIDDEN_NAMES = frozenset({
    "api_version",
    "fetch_sessions", "FetchSession", "FetchSessionCache", "incremental",
    "fetch_quota", "FetchQuota", "quota_bytes", "throttled_response", "ClientQuotas",
})
# A request's version always came down as a parameter named so; file formats and ZooKeeper's stat keep their
# ``version`` locals and attributes.
FORBIDDEN_PARAMETERS = FORBIDDEN_NAMES | {"version"}


def leaks(source: str) -> list[str]:
    """Where ``source`` (one module) reads what only the handlers may: 'line: what'."""
    found = []
    for node in ast.walk(ast.parse(source)):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
            found += [f"{line}: imports {a.name}" for a in node.names if a.name in FORBIDDEN_NAMES]
        else:
            names = []
        found += [f"{line}: imports {n}" for n in names
                  if any(n == m or n.startswith(m + ".") for m in FORBIDDEN_MODULES)]
        if isinstance(node, ast.Name) and node.id in FORBIDDEN_NAMES:
            found.append(f"{line}: name {node.id}")
        elif isinstance(node, ast.Attribute) and node.attr in FORBIDDEN_NAMES:
            found.append(f"{line}: attribute .{node.attr}")
        elif isinstance(node, ast.arg) and node.arg in FORBIDDEN_PARAMETERS:
            found.append(f"{line}: parameter {node.arg}")
    return sorted(set(found))


def modules() -> list[Path]:
    return sorted(p for d in BELOW_THE_HANDLERS for p in (REPO / d).rglob("*.py"))


def test_nothing_below_the_handlers_reads_versions_sessions_or_client_quotas() -> None:
    assert len(modules()) > 30, "the layers moved: point BELOW_THE_HANDLERS at them"
    found = {str(p.relative_to(REPO)): leaks(p.read_text()) for p in modules()}
    assert {path: where for path, where in found.items() if where} == {}


@pytest.mark.parametrize("code", [
    "def append(records, version):\n    return version >= 3\n",
    "def read(header):\n    return header.api_version\n",
    "from kbroker.handlers.fetch_sessions import FetchSession\n",
    "import kbroker.security.quotas\n",
    "def answer(cache):\n    return cache.fetch_sessions\n",
    "def cap(quota_bytes):\n    return quota_bytes\n",
])
def test_the_check_finds_each_kind_of_leak(code: str) -> None:
    assert leaks(code), code


def test_the_check_leaves_zookeeper_versions_and_replication_throttles_alone() -> None:
    code = ("from kbroker.replication.throttle import ReplicationQuotas\n"
            "def write(partition, stat):\n    partition.zk_version = stat.zk_version\n"
            "    return ReplicationQuotas\n")
    assert leaks(code) == []
