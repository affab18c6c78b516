"""DescribeConfigs (32): a topic's or a broker's configs, with Kafka's sources and synonyms."""
from __future__ import annotations

from typing import Any

from kbroker import errors
from kbroker.config import is_sensitive
from kbroker.protocol.messages.acls import AclOperation

from .admin import (
    BROKER_RESOURCE,
    SOURCE_DEFAULT,
    SOURCE_DYNAMIC_TOPIC,
    SOURCE_STATIC_BROKER,
    TOPIC_RESOURCE,
    _error,
    _require_config_resource,
)
from .context import BrokerContext
from .registry import handles


@handles(32)
def describe_configs(ctx: BrokerContext, header, request, conn):
    results = []
    for resource in request.resources:
        out = {"error_code": 0, "error_message": None, "resource_type": resource.resource_type,
               "resource_name": resource.resource_name, "configs": []}
        try:
            _require_config_resource(ctx, conn, AclOperation.DESCRIBE_CONFIGS, resource.resource_type,
                                     resource.resource_name)
            entries = _config_entries(ctx, resource.resource_type, resource.resource_name)
            wanted = resource.configuration_keys
            for name, value, source, read_only in entries:
                if wanted is not None and name not in wanted:
                    continue
                sensitive = resource.resource_type == BROKER_RESOURCE and is_sensitive(name)
                if sensitive:
                    value = None  # passwords, keys and JAAS options are never shown
                entry: dict[str, Any] = {
                    "name": name, "value": value, "read_only": read_only, "is_default": source == SOURCE_DEFAULT,
                    "config_source": source, "is_sensitive": sensitive, "synonyms": []}
                if request.include_synonyms:
                    entry["synonyms"] = [{"name": name, "value": value, "source": source}]
                out["configs"].append(entry)
        except Exception as exc:
            out["error_code"], out["error_message"] = _error(exc)
        results.append(out)
    return {"throttle_time_ms": 0, "results": results}


def _config_entries(ctx: BrokerContext, resource_type: int, name: str) -> list[tuple[str, str | None, int, bool]]:
    if resource_type == TOPIC_RESOURCE:
        info = ctx.topics.topics.get(name)
        if info is None:
            raise errors.UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        effective = ctx.config.log.with_overrides(info.configs).topic_values()
        defaults = ctx.config.log.topic_values()
        return [(k, v, SOURCE_DYNAMIC_TOPIC if k in info.configs else
                 (SOURCE_DEFAULT if v == defaults[k] else SOURCE_STATIC_BROKER), False)
                for k, v in sorted(effective.items())]
    if resource_type == BROKER_RESOURCE:
        if name not in ("", str(ctx.broker_id)):
            raise errors.InvalidRequestError(f"this is broker {ctx.broker_id}, not {name}")
        return [(k, v, SOURCE_STATIC_BROKER, True) for k, v in sorted(ctx.broker_config_strings().items())]
    raise errors.InvalidRequestError(f"unsupported config resource type {resource_type}")
