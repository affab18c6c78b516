"""DescribeConfigs (32): a topic's or a broker's configs, with Kafka 2.8's sources, synonyms, types and docs
(the entries are built in ``config_entries``)."""
from __future__ import annotations

from kbroker import errors
from kbroker.handlers.admin import BROKER_RESOURCE, TOPIC_RESOURCE, _error, _require_config_resource
from kbroker.handlers.config_entries import ConfigEntry, broker_entries, topic_entries, wanted
from kbroker.handlers.context import BrokerContext
from kbroker.handlers.registry import ClientConnection, handles
from kbroker.protocol import message_types as msg
from kbroker.protocol.header import RequestHeader
from kbroker.protocol.messages.acls import AclOperation
from zk_compat.layout import get_entity_config


@handles(msg.DESCRIBE_CONFIGS)
async def describe_configs(ctx: BrokerContext, header: RequestHeader, request: msg.DescribeConfigsRequest,
                           conn: ClientConnection) -> msg.DescribeConfigsResponse:
    include_documentation = bool(getattr(request, "include_documentation", False))
    results: list[msg.DescribeConfigsResponse_Result] = []
    for resource in request.resources:
        out: msg.DescribeConfigsResponse_Result = {
            "error_code": 0, "error_message": None, "resource_type": resource.resource_type,
            "resource_name": resource.resource_name, "configs": []}
        try:
            _require_config_resource(ctx, conn, AclOperation.DESCRIBE_CONFIGS, resource.resource_type,
                                     resource.resource_name)
            entries = await _entries(ctx, resource.resource_type, resource.resource_name)
            out["configs"] = [e.wire(bool(request.include_synonyms), include_documentation)
                              for e in wanted(entries, resource.configuration_keys)]
        except Exception as exc:
            out["error_code"], out["error_message"] = _error(exc)
        results.append(out)
    return {"throttle_time_ms": 0, "results": results}


async def _entries(ctx: BrokerContext, resource_type: int, name: str) -> list[ConfigEntry]:
    if resource_type == TOPIC_RESOURCE:
        info = ctx.topics.topics.get(name)
        if info is None:
            raise errors.UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        overrides = info.configs
        if ctx.zookeeper is not None:
            # As Kafka (adminZkClient.fetchEntityConfig): ZooKeeper, not this broker's view, which follows
            # /config/changes a moment later, so that a client reads at once what it just altered on another broker.
            with errors.translate_zk():
                overrides = await ctx.run_blocking(lambda: get_entity_config(ctx.store, "topics", name))
        return topic_entries(ctx.dynamic_config, overrides)
    if resource_type == BROKER_RESOURCE:
        if name == "":
            return broker_entries(ctx.dynamic_config, per_broker=False)
        if not name.lstrip("-").isdigit():
            raise errors.InvalidRequestError(f"Broker id must be an integer, but it is: {name}")
        if int(name) != ctx.broker_id:
            raise errors.InvalidRequestError(
                f"Unexpected broker id, expected {ctx.broker_id} or empty string, but received {name}")
        return broker_entries(ctx.dynamic_config, per_broker=True)
    raise errors.InvalidRequestError(f"Unsupported resource type: {resource_type}")
