"""kbroker.security.entity_configs over every store: users and clients configs are read at start and
followed through /config/changes, as Kafka's ZkConfigManager does; a corrupt znode is skipped."""
from __future__ import annotations

import time

from kbroker.security.entity_configs import EntityConfigs, parse_entity_path
from zk_compat import layout
from zk_compat.znodes import ConfigEntityZNode


def wait_for(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def test_reads_at_start_then_follows_changes(store):
    layout.ensure_persistent_paths(store)
    layout.change_entity_config(store, "users", "alice", {"producer_byte_rate": "1024"})
    layout.change_entity_config(store, "users", "alice/clients/c1", {"consumer_byte_rate": "7"})
    configs = EntityConfigs(store)
    configs.start()
    try:
        assert configs.configs == {"users/alice": {"producer_byte_rate": "1024"},
                                   "users/alice/clients/c1": {"consumer_byte_rate": "7"}}
        seen = []
        configs.subscribe(lambda path, cfg: seen.append((path, dict(cfg))))
        assert sorted(seen) == sorted(configs.configs.items())  # the known entities, replayed
        seen.clear()
        # a client id with a space is sanitized in the path ("c%202") and desanitized by parse_entity_path
        layout.change_entity_config(store, "clients", "c 2", {"request_percentage": "50.0"})
        assert wait_for(lambda: ("clients/c%202", {"request_percentage": "50.0"}) in seen), seen
        assert parse_entity_path("clients/c%202") == (None, "c 2")
        layout.change_entity_config(store, "users", "alice", {})  # emptied: the entity is gone
        assert wait_for(lambda: ("users/alice", {}) in seen), seen
        assert "users/alice" not in configs.configs
        # a topic notice is not ours
        layout.change_entity_config(store, "topics", "t", {"retention.ms": "1"})
        time.sleep(0.2)
        assert not [p for p, _ in seen if p.startswith("topics")]
    finally:
        configs.stop()


def test_a_corrupt_entity_is_skipped_and_the_rest_still_follow(store):
    layout.ensure_persistent_paths(store)
    layout.change_entity_config(store, "users", "bob", {"producer_byte_rate": "1"})
    configs = EntityConfigs(store)
    configs.start()
    try:
        store.set(ConfigEntityZNode.path("users", "bob"), b"{not json")
        layout.create_config_change_notification(store, "users/bob")
        layout.change_entity_config(store, "users", "carol", {"producer_byte_rate": "2"})
        assert wait_for(lambda: "users/carol" in configs.configs)
        assert configs.configs["users/bob"] == {"producer_byte_rate": "1"}  # kept what it had
    finally:
        configs.stop()


def test_parse_entity_path_shapes():
    assert parse_entity_path("users/<default>") == ("<default>", None)
    assert parse_entity_path("users/a%2Ab/clients/<default>") == ("a*b", "<default>")
    for bad in ("topics/t", "users", "users/a/clients", "users/a/topics/b"):
        try:
            parse_entity_path(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} accepted")
