"""server.properties parsing, --override, and how bad config is reported."""
from __future__ import annotations

import subprocess
import sys

import pytest

from kbroker.config.broker import load_config, parse_properties
from kbroker.config.errors import ConfigError


def test_properties_file_and_overrides(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text(
        "# a comment\n"
        "broker.id=3\n"
        "listeners = PLAINTEXT://127.0.0.1:9093\n"
        "log.dirs=/d1,/d2\n"
        "log.segment.bytes: 1048576\n"
        "log.retention.hours=2\n"
        "num.partitions=2\n"
        "log.cleaner.enable=true\n"  # a Kafka key we accept without using it
        "long.key=a\\\n"
        "  b\n"
    )
    config = load_config(str(path), ["num.partitions=5", "auto.create.topics.enable=false"])
    assert config.broker_id == 3
    assert [(listener.host, listener.port) for listener in config.listeners] == [("127.0.0.1", 9093)]
    assert config.advertised_listeners == config.listeners
    assert [str(d) for d in config.log_dirs] == ["/d1", "/d2"]
    assert config.log.segment_bytes == 1048576
    assert config.log.retention_ms == 2 * 3600_000
    assert config.num_partitions == 5  # the override wins
    assert config.auto_create_topics_enable is False
    assert config.unknown_keys == [f"{path}:9: unknown config 'long.key'"]


def test_defaults_are_kafkas():
    config = load_config()
    assert (config.listeners[0].host, config.listeners[0].port) == ("127.0.0.1", 9092)
    assert [str(d) for d in config.log_dirs] == ["data"]
    assert config.socket_request_max_bytes == 104857600
    assert config.log.segment_bytes == 1 << 30
    assert config.log.index_interval_bytes == 4096
    assert config.offsets_topic_num_partitions == 50


def test_unknown_key_gets_a_suggestion():
    config = load_config(None, ["num.partiton=3"])
    assert config.unknown_keys == ["--override: unknown config 'num.partiton' (did you mean 'num.partitions'?)"]


@pytest.mark.parametrize("override, message", [
    ("log.segment.bytes=abc", "log.segment.bytes: expected an int >= 14, got 'abc'"),
    ("log.segment.bytes=10", "log.segment.bytes: expected an int >= 14, got '10'"),
    ("num.partitions=0", "num.partitions: expected an int >= 1, got '0'"),
    ("auto.create.topics.enable=yes", "auto.create.topics.enable: expected true or false, got 'yes'"),
    ("listeners=localhost", "listeners: expected NAME://host:port"),
    ("log.message.timestamp.type=Now", "log.message.timestamp.type: expected CreateTime or LogAppendTime"),
    ("novalue", "--override: expected key=value"),
])
def test_malformed_values_are_errors_with_their_source(override, message):
    with pytest.raises(ConfigError) as exc:
        load_config(None, [override])
    assert message in str(exc.value)


def test_malformed_line_names_file_and_line(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text("broker.id=1\nthis line has no separator\n")
    with pytest.raises(ConfigError, match=rf"{path}:2: expected key=value"):
        parse_properties(path.read_text(), str(path))


def test_serve_with_bad_config_exits_2_with_one_clear_line():
    result = subprocess.run([sys.executable, "-m", "kbroker.cli", "serve", "--override", "num.partitions=-4"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip() == "kbroker: --override: num.partitions: expected an int >= 1, got '-4'"
