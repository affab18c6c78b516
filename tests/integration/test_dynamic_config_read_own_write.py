"""The broker that takes a dynamic broker config applies it before it answers (every other broker applies it when it
follows the /config/changes notice): a client's next request to it already runs under the new value, as
`kbroker reassign --replica-alter-log-dirs-throttle` needs (it sets the log-dir throttle, then starts the move on the
same broker). Raw IncrementalAlterConfigs then DescribeConfigs on one connection, many rounds: no round reads an older
value."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from kbroker.tools.client import Connection
from tests.integration.conftest import _make_broker

ROUNDS = 100


@pytest.fixture
def broker(tmp_path) -> Iterator:
    yield from _make_broker(tmp_path, {"broker.id": "7"})


def test_a_broker_config_set_on_this_broker_is_in_force_when_it_answers(broker):
    conn = Connection(broker.host, broker.port)
    stale = []
    try:
        for i in range(ROUNDS):
            value = str(3_600_000 + i)
            altered = conn.send(44, {"validate_only": False, "resources": [{
                "resource_type": 4, "resource_name": "7", "configs": [
                    {"name": "log.retention.ms", "config_operation": 0, "value": value}]}]})
            assert [(r.error_code, r.error_message) for r in altered.responses] == [(0, None)]
            described = conn.send(32, {"resources": [{"resource_type": 4, "resource_name": "7",
                                                      "configuration_keys": ["log.retention.ms"]}],
                                       "include_synonyms": False})
            [entry] = described.results[0].configs
            if (entry.value, entry.config_source) != (value, 2):  # 2: DYNAMIC_BROKER_CONFIG
                stale.append((i, entry.value, entry.config_source))
    finally:
        conn.close()
    assert stale == [], f"answers older than the write: {stale[:5]} ({len(stale)} of {ROUNDS})"
