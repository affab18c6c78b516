"""AlterConfigs (33) and IncrementalAlterConfigs (44): one answer per resource; one bad resource never fails
the others."""
from __future__ import annotations

from kbroker import errors
from kbroker.log.config import list_operation
from kbroker.protocol.messages.acls import AclOperation

from .admin import APPEND, DELETE, SET, SUBTRACT, TOPIC_RESOURCE, _each, _require_config_resource
from .context import BrokerContext
from .registry import handles


@handles(33)
def alter_configs(ctx: BrokerContext, header, request, conn):
    # AlterConfigs replaces the whole set of a topic's overrides.
    return _alter_each(ctx, request, conn, lambda info, resource: {c.name: c.value for c in resource.configs
                                                                if c.value is not None})


@handles(44)
def incremental_alter_configs(ctx: BrokerContext, header, request, conn):
    return _alter_each(ctx, request, conn, _apply_operations)


def _apply_operations(info, resource) -> dict[str, str]:
    new = dict(info.configs)
    for c in resource.configs:
        if c.config_operation == SET:
            new[c.name] = c.value
        elif c.config_operation == DELETE:
            new.pop(c.name, None)
        elif c.config_operation in (APPEND, SUBTRACT):
            new[c.name] = list_operation(c.name, new.get(c.name), c.value or "", c.config_operation == APPEND)
        else:
            raise errors.InvalidRequestError(f"unknown config operation {c.config_operation}")
    return new


async def _alter_each(ctx: BrokerContext, request, conn, new_overrides) -> dict:
    """One response per resource: topic resources only; ``new_overrides(topic info, resource)``
    computes the topic's new override set."""
    async def alter(resource, out: dict) -> None:
        _require_config_resource(ctx, conn, AclOperation.ALTER_CONFIGS, resource.resource_type,
                                 resource.resource_name)
        if resource.resource_type != TOPIC_RESOURCE:
            raise errors.InvalidRequestError("only topic configs can be altered (broker configs are static here)")
        info = ctx.topics.topics.get(resource.resource_name)
        if info is None:
            raise errors.UnknownTopicOrPartitionError(f"topic {resource.resource_name!r} does not exist")
        await ctx.topics.alter_configs(resource.resource_name, new_overrides(info, resource),
                                       validate_only=request.validate_only)

    def first(resource) -> dict:
        return {"error_code": 0, "error_message": None, "resource_type": resource.resource_type,
                "resource_name": resource.resource_name}

    return {"throttle_time_ms": 0, "responses": await _each(request.resources, first, alter)}
