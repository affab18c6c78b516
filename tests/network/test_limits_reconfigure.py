"""ConnectionLimits under dynamic broker configs (Kafka's SocketServer.reconfigure): new limits apply to the next
connection, a listener paused on max.connections resumes once the limit rises above the count, the open
connections stay, and a malformed max.connections.per.ip.overrides is refused before it is written."""
from __future__ import annotations

import pytest

from kbroker.config.broker import load_config
from kbroker.network.limits import ConnectionLimits

KEYS = frozenset({"max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides"})


def test_new_limits_apply_and_paused_listeners_resume():
    limits = ConnectionLimits.from_config(load_config(None, ["max.connections=1"]))
    assert limits.admit("127.0.0.1")
    assert limits.full()
    resumed: list[str] = []
    limits.wait_for_slot(lambda: resumed.append("listener"))

    limits.apply_config(load_config(None, ["max.connections=3", "max.connections.per.ip=2",
                                           "max.connections.per.ip.overrides=127.0.0.2:0"]), KEYS)
    assert resumed == ["listener"]  # room again: the paused listener accepts
    assert limits.admit("127.0.0.1") and not limits.admit("127.0.0.1")  # two per address now
    assert not limits.admit("127.0.0.2")  # its override: none

    limits.apply_config(load_config(None, ["max.connections=1"]), KEYS)
    assert limits.total == 2 and limits.full()  # lowered: the open ones stay, new ones wait


def test_malformed_overrides_refused_before_written():
    limits = ConnectionLimits()
    with pytest.raises(ValueError, match="is not host:count"):
        limits.check_config(load_config(None, ["max.connections.per.ip.overrides=nohost"]), KEYS)
    limits.check_config(load_config(None, ["max.connections.per.ip.overrides=127.0.0.1:5"]), KEYS)
