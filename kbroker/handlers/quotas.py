"""DescribeClientQuotas (48) and AlterClientQuotas (49), as Kafka 2.8's ZkAdminManager answers them.

Quotas live in the entity znodes (``/config/users/<u>``, ``/config/clients/<c>``,
``/config/users/<u>/clients/<c>``, ``<default>`` for a default entity, names sanitized), beside
the SCRAM credentials of a user: an alteration reads the znode, changes only the quota keys it
names, writes it back whole and leaves a ``/config/changes`` notice, so every broker re-reads it.
Describing needs DESCRIBE_CONFIGS on the cluster, altering ALTER_CONFIGS (CLUSTER_AUTHORIZATION_FAILED).
"""
from __future__ import annotations

import logging
import math
from typing import Any

from kbroker import errors
from kbroker.handlers.authorize import Op, cluster_allowed
from kbroker.handlers.context import BrokerContext
from kbroker.handlers.registry import ClientConnection, handles
from kbroker.protocol import message_types as msg
from kbroker.protocol.header import RequestHeader
from kbroker.protocol.messages.quotas import MATCH_ANY, MATCH_DEFAULT, MATCH_EXACT
from kbroker.security.entity_configs import DEFAULT
from kbroker.security.quotas import QUOTA_KEYS
from zk_compat import layout
from zk_compat.jvm import java_double
from zk_compat.store import MetadataStore, NoNodeError
from zk_compat.znodes import (
    ConfigEntityChangeNotificationSequenceZNode as ChangeSeq,
    ConfigEntityZNode,
    desanitize_entity_name,
)

log = logging.getLogger(__name__)

USER, CLIENT_ID = "user", "client-id"
CLUSTER_DENIED = "Cluster authorization failed."
_MISSING = object()  # an entity without this part (a user-only entity has no client id)


def _name(part: str) -> str | None:
    return None if part == DEFAULT else desanitize_entity_name(part)


def _read_all(store: MetadataStore) -> list[tuple[Any, Any, dict[str, str]]]:
    """Every user, client and user+client entity as (user, client, configs); a part absent is
    _MISSING, a default None."""
    def children(path: str) -> list[str]:
        try:
            return store.get_children(path)
        except NoNodeError:
            return []

    def configs(kind: str, name: str) -> dict[str, str]:
        try:
            data, _ = store.get(ConfigEntityZNode.path(kind, name))
            return ConfigEntityZNode.decode(kind, name, data)
        except NoNodeError:
            return {}
        except ValueError as exc:
            log.error("unreadable configs of %s/%s left out of DescribeClientQuotas: %s", kind, name, exc)
            return {}

    out: list[tuple[Any, Any, dict[str, str]]] = []
    for user in children("/config/users"):
        out.append((_name(user), _MISSING, configs("users", user)))
        for client in children(f"/config/users/{user}/clients"):
            out.append((_name(user), _name(client), configs("users", f"{user}/clients/{client}")))
    for client in children("/config/clients"):
        out.append((_MISSING, _name(client), configs("clients", client)))
    return out


def _matches(component: Any, name: Any, strict: bool) -> bool:
    if component is None:
        return name is _MISSING or not strict
    if component.match_type == MATCH_EXACT:
        return name is not _MISSING and name is not None and name == component.match
    if component.match_type == MATCH_DEFAULT:
        return name is None
    return name is not _MISSING  # MATCH_ANY: any name, the default included


def _describe_filter(request: Any) -> tuple[Any, Any]:
    user = client = None
    for c in request.components:
        if c.entity_type == USER:
            if user is not None:
                raise errors.InvalidRequestError("Duplicate user filter component entity type")
            user = c
        elif c.entity_type == CLIENT_ID:
            if client is not None:
                raise errors.InvalidRequestError("Duplicate client filter component entity type")
            client = c
        elif c.entity_type == "":
            raise errors.InvalidRequestError("Unexpected empty filter component entity type")
        else:
            raise errors.UnsupportedVersionError(f"Custom entity type '{c.entity_type}' not supported")
        if c.match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY):
            raise errors.InvalidRequestError(f"Unexpected match type: {c.match_type}")
        if c.match_type == MATCH_EXACT and c.match is None:
            raise errors.InvalidRequestError(f"An exact {c.entity_type} match needs a name")
    return user, client


def _entity(user: Any, client: Any) -> list[msg.DescribeClientQuotasResponse_Entity]:
    out: list[msg.DescribeClientQuotasResponse_Entity] = []
    if user is not _MISSING:
        out.append({"entity_type": USER, "entity_name": user})
    if client is not _MISSING:
        out.append({"entity_type": CLIENT_ID, "entity_name": client})
    return out


@handles(msg.DESCRIBE_CLIENT_QUOTAS)
async def describe_client_quotas(ctx: BrokerContext, header: RequestHeader, request: msg.DescribeClientQuotasRequest,
                                 conn: ClientConnection) -> msg.DescribeClientQuotasResponse:
    if not cluster_allowed(ctx, conn, Op.DESCRIBE_CONFIGS):
        return {"throttle_time_ms": 0, "error_code": errors.ClusterAuthorizationFailedError.code,
                "error_message": CLUSTER_DENIED, "entries": None}
    try:
        user_filter, client_filter = _describe_filter(request)
    except errors.KafkaError as exc:
        return {"throttle_time_ms": 0, "error_code": exc.code, "error_message": exc.message, "entries": None}
    entities = await ctx.run_blocking(lambda: _read_all(ctx.store))
    entries: list[msg.DescribeClientQuotasResponse_Entry] = []
    for user, client, configs in entities:
        values: list[msg.DescribeClientQuotasResponse_Value] = []
        for key, text in configs.items():
            if key not in QUOTA_KEYS:
                continue
            try:
                values.append({"key": key, "value": float(text)})
            except ValueError:
                log.error("quota %s=%r of user %s client %s is not a number: left out", key, text, user, client)
        if (values and _matches(user_filter, user, request.strict)
                and _matches(client_filter, client, request.strict)):
            entries.append({"entity": _entity(user, client), "values": values})
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "entries": entries}


def _entity_path(entity: list[Any]) -> tuple[str, str]:
    """A request's entity -> (entity type, name) of its znode (``users``, ``alice/clients/c1``),
    names unsanitized, ``<default>`` for a default. Kafka's checks and messages."""
    if not entity:
        raise errors.InvalidRequestError("Invalid empty client quota entity")
    user: Any = _MISSING
    client: Any = _MISSING
    for e in entity:
        name = DEFAULT if e.entity_name is None else e.entity_name
        if e.entity_type == USER:
            user = name
        elif e.entity_type == CLIENT_ID:
            client = name
        else:
            raise errors.InvalidRequestError(f"Unhandled client quota entity type: {e.entity_type}")
        if e.entity_name is not None and e.entity_name == "":
            raise errors.InvalidRequestError(f"Empty {e.entity_type} not supported")
    if user is not _MISSING and client is not _MISSING:
        return "users", f"{user}/clients/{client}"
    if user is not _MISSING:
        return "users", user
    return "clients", client


def _apply(ops: list[Any]) -> tuple[dict[str, str], list[str]]:
    """The ops checked (unknown key, fractional value of a LONG key: INVALID_REQUEST, as Kafka):
    (keys to set to these strings, keys to remove), in request order."""
    changes: list[tuple[str, str | None]] = []
    for op in ops:
        if op.remove:
            changes.append((op.key, None))
            continue
        kind = QUOTA_KEYS.get(op.key)
        if kind is None:
            raise errors.InvalidRequestError(f"Invalid configuration key {op.key}")
        value = float(op.value)
        if kind == "LONG":
            epsilon = 1e-6
            if not math.isfinite(value):
                raise errors.InvalidRequestError(f"Configuration {op.key} must be a Long value")
            whole = int(value + epsilon)
            if abs(whole - value) > epsilon:
                raise errors.InvalidRequestError(f"Configuration {op.key} must be a Long value")
            changes.append((op.key, str(whole)))
        else:
            changes.append((op.key, java_double(value)))
    sets: dict[str, str] = {}
    removes: list[str] = []
    for key, text in changes:
        if text is None:
            sets.pop(key, None)
            removes.append(key)
        else:
            if key in removes:
                removes.remove(key)
            sets[key] = text
    return sets, removes


def _write(store: MetadataStore, kind: str, name: str, sets: dict[str, str], removes: list[str]) -> str:
    """Merge into the entity's znode (its other keys, SCRAM credentials among them, kept) and
    leave the change notice. Returns the entity path (``users/alice``) EntityConfigs knows it by."""
    configs = layout.get_entity_config(store, kind, name)
    for key in removes:
        configs.pop(key, None)
    configs.update(sets)
    notice = layout.change_entity_config(store, kind, name, configs)
    data, _ = store.get(notice)
    return ChangeSeq.decode(data)


@handles(msg.ALTER_CLIENT_QUOTAS)
async def alter_client_quotas(ctx: BrokerContext, header: RequestHeader, request: msg.AlterClientQuotasRequest,
                              conn: ClientConnection) -> msg.AlterClientQuotasResponse:
    def result(entry: msg.AlterClientQuotasRequest.Entry, code: int = 0,
               message: str | None = None) -> msg.AlterClientQuotasResponse_Entry:
        return {"error_code": code, "error_message": message,
                "entity": [{"entity_type": e.entity_type, "entity_name": e.entity_name} for e in entry.entity]}

    if not cluster_allowed(ctx, conn, Op.ALTER_CONFIGS):
        code = errors.ClusterAuthorizationFailedError.code
        return {"throttle_time_ms": 0, "entries": [result(e, code, CLUSTER_DENIED) for e in request.entries]}
    out: list[msg.AlterClientQuotasResponse_Entry] = []
    for entry in request.entries:
        try:
            kind, name = _entity_path(entry.entity)
            sets, removes = _apply(entry.ops)
            if not request.validate_only:
                def write(kind: str = kind, name: str = name, sets: dict[str, str] = sets,
                          removes: list[str] = removes) -> str:
                    path = _write(ctx.store, kind, name, sets, removes)
                    ctx.security.entity_configs.reload(path)  # this broker at once; the others by the notice
                    return path
                path = await ctx.run_blocking(write)
                log.info("client quotas of %s altered: set %s, removed %s", path, sets, removes)
            out.append(result(entry))
        except errors.KafkaError as exc:
            log.info("AlterClientQuotas entry refused: %s", exc.message)
            out.append(result(entry, exc.code, exc.message))
        except Exception as exc:
            log.exception("AlterClientQuotas entry failed")
            out.append(result(entry, errors.UnknownServerError.code, str(exc)))
    return {"throttle_time_ms": 0, "entries": out}
