"""message.format.version / log.message.format.version: Kafka 2.8's ApiVersion names, the magic each
stores, the broker's check against inter.broker.protocol.version, and the default DescribeConfigs shows."""
from __future__ import annotations

import pytest

from kbroker.config.broker import load_config
from kbroker.config.errors import ConfigError
from kbroker.config.topic import LogConfig


@pytest.mark.parametrize("version, magic", [
    ("0.8.0", 0), ("0.8.2", 0), ("0.9.0", 0), ("0.9.0.1", 0), ("0.10.0", 1), ("0.10.0-IV0", 1), ("0.10.1-IV2", 1),
    ("0.10.2", 1), ("0.10.2.1", 1), ("0.11.0", 2), ("0.11.0-IV0", 2), ("1.0", 2), ("2.1-IV2", 2), ("2.8", 2),
    ("2.8.0", 2), ("2.8-IV1", 2)])
def test_versions_name_their_record_format(version, magic):
    assert LogConfig().with_overrides({"message.format.version": version}).record_magic == magic


@pytest.mark.parametrize("version", ["0.12.0", "2.9", "3.0", "0.10", "abc", ""])
def test_unknown_versions_are_refused_in_kafkas_words(version):
    with pytest.raises(ConfigError) as refused:
        LogConfig().with_overrides({"message.format.version": version})
    assert str(refused.value) == (f"Invalid value {version} for configuration message.format.version: "
                                  f"Version `{version}` is not a valid version")


def test_default_and_broker_synonym():
    assert LogConfig().topic_values()["message.format.version"] == "2.8-IV1"
    assert LogConfig().record_magic == 2
    assert load_config(None, ["log.message.format.version=0.10.1"]).log.record_magic == 1


def test_broker_format_above_the_inter_broker_protocol_is_refused():
    with pytest.raises(ConfigError, match="log.message.format.version 0.11.0 can only be used when "
                                          "inter.broker.protocol.version is set to version 0.11.0 or higher"):
        load_config(None, ["log.message.format.version=0.11.0", "inter.broker.protocol.version=0.10.2"])
    # the same record format is fine, whatever the versions (KAFKA-6238)
    assert load_config(None, ["log.message.format.version=0.10.2", "inter.broker.protocol.version=0.10.0"]) \
        .log.record_magic == 1
