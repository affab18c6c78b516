"""AlterConfigs (33) and IncrementalAlterConfigs (44): one answer per resource; one bad resource never fails
the others.

Topics: their overrides in ``/config/topics/<t>``. Brokers (KIP-226, Kafka 2.8's ZkAdminManager): resource name
"" is the cluster default (``/config/brokers/<default>``), a broker id that broker's own layer, which only that
broker takes (the admin client sends it there); the new layer is checked as Kafka checks it
(``DynamicBrokerConfig.validate``), written whole with a change notice, and every broker applies it when the notice
comes back. A refused config answers INVALID_REQUEST "Invalid config value for resource ConfigResource(...): ...",
as Kafka does.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import cast

from kbroker import errors
from kbroker.config.dynamic import LIST_KEYS, DynamicConfigError, base_name, default_text, is_listener_keystore, usable
from kbroker.config.topic import list_operation
from kbroker.handlers.admin import (
    APPEND,
    BROKER_RESOURCE,
    DELETE,
    SET,
    SUBTRACT,
    TOPIC_RESOURCE,
    _each,
    _require_config_resource,
)
from kbroker.handlers.context import BrokerContext
from kbroker.handlers.registry import Answer, ClientConnection, handles
from kbroker.protocol import message_types as msg
from kbroker.protocol.header import RequestHeader
from kbroker.protocol.messages.acls import AclOperation
from zk_compat import layout

OPERATIONS = {SET: "SET", DELETE: "DELETE", APPEND: "APPEND", SUBTRACT: "SUBTRACT"}
RESOURCE_TYPES = {TOPIC_RESOURCE: "TOPIC", BROKER_RESOURCE: "BROKER", 8: "BROKER_LOGGER"}

Request = msg.AlterConfigsRequest | msg.IncrementalAlterConfigsRequest
Incremental = msg.IncrementalAlterConfigsRequest.Resource  # a resource of IncrementalAlterConfigs: operations
Resource = msg.AlterConfigsRequest.Resource | Incremental


@handles(msg.ALTER_CONFIGS)
def alter_configs(ctx: BrokerContext, header: RequestHeader, request: msg.AlterConfigsRequest,
                  conn: ClientConnection) -> Answer[msg.AlterConfigsResponse]:
    return _alter_each(ctx, request, conn)


@handles(msg.INCREMENTAL_ALTER_CONFIGS)
def incremental_alter_configs(ctx: BrokerContext, header: RequestHeader, request: msg.IncrementalAlterConfigsRequest,
                              conn: ClientConnection) -> Answer[msg.IncrementalAlterConfigsResponse]:
    return _alter_each(ctx, request, conn)


def _apply_operations(current: Mapping[str, str], resource: Incremental) -> dict[str, str]:
    """A topic's overrides after IncrementalAlterConfigs' operations."""
    new = dict(current)
    for c in resource.configs:
        if c.config_operation == SET:
            new[c.name] = cast(str, c.value)  # a null SET is passed on as it always was (only brokers refuse it)
        elif c.config_operation == DELETE:
            new.pop(c.name, None)
        elif c.config_operation in (APPEND, SUBTRACT):
            new[c.name] = list_operation(c.name, new.get(c.name), c.value or "", c.config_operation == APPEND)
        else:
            raise errors.InvalidRequestError(f"unknown config operation {c.config_operation}")
    return new


async def _alter_each(ctx: BrokerContext, request: Request, conn: ClientConnection) -> msg.AlterConfigsResponse:
    async def alter(resource: Resource, out: msg.AlterConfigsResponse_ResourceResponse) -> None:
        _require_config_resource(ctx, conn, AclOperation.ALTER_CONFIGS, resource.resource_type,
                                 resource.resource_name)
        if resource.resource_type == TOPIC_RESOURCE:
            await _alter_topic(ctx, request, resource)
        elif resource.resource_type == BROKER_RESOURCE:
            await _alter_broker(ctx, request, resource)
        else:
            kind = RESOURCE_TYPES.get(resource.resource_type, str(resource.resource_type))
            raise errors.InvalidRequestError(
                f"AlterConfigs is only supported for topics and brokers, but resource type is {kind}")

    def first(resource: Resource) -> msg.AlterConfigsResponse_ResourceResponse:
        return {"error_code": 0, "error_message": None, "resource_type": resource.resource_type,
                "resource_name": resource.resource_name}

    resources: Sequence[Resource] = request.resources
    return {"throttle_time_ms": 0, "responses": await _each(resources, first, alter)}


async def _alter_topic(ctx: BrokerContext, request: Request, resource: Resource) -> None:
    """AlterConfigs replaces the whole set of a topic's overrides; IncrementalAlterConfigs edits it."""
    info = ctx.topics.topics.get(resource.resource_name)
    if info is None:
        raise errors.UnknownTopicOrPartitionError(f"topic {resource.resource_name!r} does not exist")
    new = (_apply_operations(info.configs, resource) if isinstance(resource, Incremental)
           else {c.name: c.value for c in resource.configs if c.value is not None})
    await ctx.topics.alter_configs(resource.resource_name, new, validate_only=request.validate_only)


# -- brokers ---------------------------------------------------------------------------------------------------

def _target(ctx: BrokerContext, name: str | None) -> int | None:
    """ZkAdminManager.getBrokerId: "" is the cluster default; an id must be this broker's."""
    if not name:
        return None
    try:
        broker_id = int(name)
    except ValueError:
        raise errors.InvalidRequestError(f"Broker id must be an integer, but it is: {name}") from None
    if broker_id != ctx.broker_id:
        raise errors.InvalidRequestError(f"Unexpected broker id, expected {ctx.broker_id}, but received {name}")
    return broker_id


def _checked_entries(resource: Resource) -> None:
    names = [c.name for c in resource.configs]
    if isinstance(resource, Incremental):
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise errors.InvalidRequestError(f"Error due to duplicate config keys : {','.join(duplicates)}")
        nulls = [f"{OPERATIONS.get(c.config_operation, c.config_operation)}:{c.name}" for c in resource.configs
                 if c.value is None and c.config_operation != DELETE]
    else:
        nulls = [c.name for c in resource.configs if c.value is None]
    if nulls:
        raise errors.InvalidRequestError(f"Null value not supported for : {','.join(nulls)}")


def _broker_operations(layer: dict[str, str], resource: Incremental) -> dict[str, str]:
    """ZkAdminManager.prepareIncrementalConfigs on a broker layer: APPEND and SUBTRACT only on LIST keys, from
    the layer's value or else the key's default."""
    for c in resource.configs:
        if c.config_operation == DELETE:
            layer.pop(c.name, None)
            continue
        assert c.value is not None, "_checked_entries refused a null value"
        if c.config_operation == SET:
            layer[c.name] = c.value
        elif c.config_operation in (APPEND, SUBTRACT):
            verb = "append" if c.config_operation == APPEND else "subtract"
            if base_name(c.name) not in LIST_KEYS:
                raise errors.InvalidRequestError(f"Config value {verb} is not allowed for config key: {c.name}")
            old = layer.get(c.name, default_text(c.name))
            items = [v for v in old.split(",") if v] if old else []
            given = c.value.split(",")
            kept = items + given if c.config_operation == APPEND else [v for v in items if v not in given]
            layer[c.name] = ",".join(kept)
        else:
            raise errors.InvalidRequestError(f"unknown config operation {c.config_operation}")
    return layer


async def _alter_broker(ctx: BrokerContext, request: Request, resource: Resource) -> None:
    name = resource.resource_name or ""
    where = f"ConfigResource(type=BROKER, name='{name}')"
    _checked_entries(resource)
    broker_id = _target(ctx, name)
    per_broker = broker_id is not None
    dynamic = ctx.dynamic_config
    if isinstance(resource, Incremental):
        stored = await ctx.run_blocking(lambda: layout.get_broker_config(ctx.store, broker_id))
        layer = _broker_operations(usable(stored, per_broker, where), resource)
    else:
        layer = {c.name: c.value for c in resource.configs if c.value is not None}  # nulls refused above
    # the same keystore file named again is read again (reloadUpdatedFilesWithoutConfigChange)
    same = [k for k, v in layer.items() if per_broker and is_listener_keystore(k) and dynamic.per_broker.get(k) == v]
    try:
        dynamic.validate(layer, per_broker, reloaded=same)
        if request.validate_only:
            return
        persistent = dynamic.persistent(layer, per_broker)
    except DynamicConfigError as exc:
        raise errors.InvalidRequestError(f"Invalid config value for resource {where}: {exc}") from None
    dynamic.reload_files(same)
    entity = f"brokers/{layout.broker_config_entity(broker_id)}"

    def write_and_apply() -> None:
        layout.change_broker_config(ctx.store, broker_id, persistent)
        # Every broker applies the layer when it follows the change notice; the one that wrote it does so before it
        # answers, so that what its client does next (reassign --replica-alter-log-dirs-throttle, then
        # AlterReplicaLogDirs on this broker) already runs under the new value.
        ctx.security.entity_configs.reload(entity)
    await ctx.run_blocking(write_and_apply)
