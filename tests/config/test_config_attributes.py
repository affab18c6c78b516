"""BrokerConfig's typed attributes (issue 23 item 4): every key of the registry (DEFS) is declared on
BrokerValues with the type its parser gives, so that mypy checks each ``config.<attr>`` use instead of seeing
``__getattr__``'s Any; the declarations are annotations only, never dataclass fields."""
from __future__ import annotations

import dataclasses
import typing

from kbroker.config.broker import DEFS, BrokerConfig, BrokerValues, load_config

# BrokerConfig's own fields hold these keys parsed (Listener objects, Paths): their string values stay in ``values``
PARSED_FIELDS = {"listeners", "advertised_listeners", "log_dirs"}


def _declared() -> dict[str, object]:
    return typing.get_type_hints(BrokerValues)


def _matches(value: object, hint: object) -> bool:
    origin = typing.get_origin(hint)
    if origin is list:
        (item,) = typing.get_args(hint)
        return isinstance(value, list) and all(isinstance(v, item) for v in value)
    assert isinstance(hint, type)
    return type(value) is hint  # exact: a bool is no int here


def test_every_registry_key_is_declared_with_the_type_of_its_value():
    declared = _declared()
    keys = {d.attr for d in DEFS} - PARSED_FIELDS
    assert set(declared) == keys, (sorted(keys - set(declared)), sorted(set(declared) - keys))
    config = load_config()
    for d in DEFS:
        if d.attr in PARSED_FIELDS:
            continue
        assert _matches(d.default, declared[d.attr]), (d.key, d.default, declared[d.attr])
        assert _matches(getattr(config, d.attr), declared[d.attr]), d.key


def test_parsed_values_have_the_declared_type():
    samples = {int: "7", bool: "false", str: "x", float: "2.5"}
    declared = _declared()
    overrides = []
    for d in DEFS:
        hint = declared.get(d.attr)
        if hint is None or typing.get_origin(hint) is list or d.attr == "status_listener":
            continue
        text = samples[typing.cast(type, hint)]
        if d.check(d.parse(text)):
            overrides.append(f"{d.key}={text}")
    config = load_config(None, overrides)
    for line in overrides:
        key = line.split("=", 1)[0]
        attr = key.replace(".", "_")
        assert _matches(getattr(config, attr), declared[attr]), line


def test_the_declarations_are_not_dataclass_fields():
    assert {f.name for f in dataclasses.fields(BrokerConfig)} == {
        "values", "log", "log_dirs", "listeners", "advertised_listeners", "unknown_keys", "raw"}
    assert not vars(BrokerValues).keys() & _declared().keys()  # no class attribute shadows __getattr__
