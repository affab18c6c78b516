"""The ACL APIs: DescribeAcls (29), CreateAcls (30), DeleteAcls (31). (The check every handler makes is
``kbroker.handlers.authorize``.)

Without an authorizer (``authorizer.class.name`` empty) they answer SECURITY_DISABLED (54). They need DESCRIBE
(DescribeAcls) or ALTER (Create/DeleteAcls) on the cluster, else CLUSTER_AUTHORIZATION_FAILED (31); Create and
Delete answer after the store writes are done, as Kafka does.
"""
from __future__ import annotations

import logging
from functools import partial

from kbroker import errors
from kbroker.handlers.authorize import Op, Res
from kbroker.handlers.context import BrokerContext
from kbroker.handlers.registry import Answer, ClientConnection, handles
from kbroker.protocol import message_types as msg
from kbroker.protocol.header import RequestHeader
from kbroker.protocol.messages.acls import (
    CLUSTER_NAME,
    AclOperation,
    PatternType,
    PermissionType,
    ResourceType,
)
from kbroker.security.authorizer import AclFilter, Authorizer, Binding
from kbroker.security.principal import KafkaPrincipal
from zk_compat.acls import AclEntry, ResourcePattern

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------
# the ACL APIs

def _authorizer_or_error(ctx: BrokerContext, conn: ClientConnection,
                         operation: AclOperation) -> tuple[Authorizer | None, int, str]:
    authorizer = ctx.security.authorizer
    if authorizer is None:
        return None, errors.SecurityDisabledError.code, "No Authorizer is configured on the broker"
    if not authorizer.authorize(conn.session, operation, ResourceType.CLUSTER, CLUSTER_NAME):
        return None, errors.ClusterAuthorizationFailedError.code, "Cluster authorization failed."
    return authorizer, 0, ""


def _filter(f: msg.DescribeAclsRequest | msg.DeleteAclsRequest.Filter, version: int) -> AclFilter:
    ptype = f.pattern_type_filter if version >= 1 else PatternType.LITERAL
    return AclFilter(f.resource_type_filter, f.resource_name_filter, ptype, f.principal_filter, f.host_filter,
                     f.operation, f.permission_type)


def _filter_problem(f: AclFilter) -> str | None:
    for value, enum_cls, what in ((f.resource_type, ResourceType, "resource type"),
                                  (f.pattern_type, PatternType, "pattern type"),
                                  (f.operation, AclOperation, "operation"),
                                  (f.permission, PermissionType, "permission type")):
        if value not in enum_cls._value2member_map_ or value == 0:
            return f"Filter contains UNKNOWN or invalid {what} {value}"
    return None


@handles(msg.DESCRIBE_ACLS)
def describe_acls(ctx: BrokerContext, header: RequestHeader, request: msg.DescribeAclsRequest,
                  conn: ClientConnection) -> Answer[msg.DescribeAclsResponse]:
    out: msg.DescribeAclsResponse = {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "resources": []}
    authorizer, code, message = _authorizer_or_error(ctx, conn, AclOperation.DESCRIBE)
    if authorizer is None:
        out["error_code"], out["error_message"] = code, message
        return out
    flt = _filter(request, header.api_version)
    problem = _filter_problem(flt)
    if problem:
        out["error_code"], out["error_message"] = errors.InvalidRequestError.code, problem
        return out
    by_pattern: dict[ResourcePattern, list[AclEntry]] = {}
    for pattern, entry in authorizer.describe(flt):
        if header.api_version == 0 and pattern.pattern_type != "LITERAL":
            continue
        by_pattern.setdefault(pattern, []).append(entry)
    out["resources"] = [
        {"resource_type": int(ResourceType[p.resource_type]), "resource_name": p.name,
         "pattern_type": int(PatternType[p.pattern_type]),
         "acls": [{"principal": e.principal, "host": e.host, "operation": int(AclOperation[e.operation]),
                   "permission_type": int(PermissionType[e.permission])} for e in entries
                  if e.operation != "UNKNOWN" and e.permission != "UNKNOWN"]}
        for p, entries in sorted(by_pattern.items(), key=lambda kv: (kv[0].resource_type, kv[0].pattern_type,
                                                                     kv[0].name))]
    return out


def _creation(c: msg.CreateAclsRequest.Creation, version: int) -> Binding:
    """A creation as a binding to store; raises InvalidRequestError as Kafka answers it."""
    ptype = c.resource_pattern_type if version >= 1 else PatternType.LITERAL
    try:
        rtype = ResourceType(c.resource_type)
        pattern_type = PatternType(ptype)
        operation = AclOperation(c.operation)
        permission = PermissionType(c.permission_type)
    except ValueError:
        raise errors.InvalidRequestError("ACL binding contains unknown elements") from None
    if (rtype in (Res.UNKNOWN, Res.ANY) or pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED)
            or operation in (Op.UNKNOWN, Op.ANY) or permission in (PermissionType.UNKNOWN, PermissionType.ANY)):
        raise errors.InvalidRequestError("ACL binding contains unknown elements")
    if not c.resource_name:
        raise errors.InvalidRequestError("Invalid empty resource name specified.")
    if rtype == Res.CLUSTER and c.resource_name != CLUSTER_NAME:
        raise errors.InvalidRequestError(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if "/" in c.resource_name:
        raise errors.InvalidRequestError("Failed to create ACL")
    try:
        KafkaPrincipal.parse(c.principal)
    except ValueError:
        raise errors.InvalidRequestError(f"Failed to create ACL: invalid principal {c.principal!r}") from None
    if not c.host:
        raise errors.InvalidRequestError("Failed to create ACL: empty host")
    return (ResourcePattern(rtype.name, c.resource_name, pattern_type.name),
            AclEntry(c.principal, permission.name, operation.name, c.host))


@handles(msg.CREATE_ACLS)
def create_acls(ctx: BrokerContext, header: RequestHeader, request: msg.CreateAclsRequest,
                conn: ClientConnection) -> Answer[msg.CreateAclsResponse]:
    authorizer, code, message = _authorizer_or_error(ctx, conn, AclOperation.ALTER)
    if authorizer is None:
        return {"throttle_time_ms": 0,
                "results": [{"error_code": code, "error_message": message} for _ in request.creations]}
    return _create_acls(ctx, authorizer, header.api_version, request)


async def _create_acls(ctx: BrokerContext, authorizer: Authorizer, version: int,
                      request: msg.CreateAclsRequest) -> msg.CreateAclsResponse:
    results: list[msg.CreateAclsResponse_Result] = []
    valid: list[tuple[int, Binding]] = []
    for i, c in enumerate(request.creations):
        results.append({"error_code": 0, "error_message": None})
        try:
            valid.append((i, _creation(c, version)))
        except errors.KafkaError as exc:
            results[i] = {"error_code": exc.code, "error_message": exc.message}
    for i, binding in valid:
        try:
            await ctx.run_blocking(partial(authorizer.create, [binding]))
        except Exception as exc:
            log.error("creating ACL %s %s failed: %s", binding[0], binding[1], exc)
            results[i] = {"error_code": errors.UnknownServerError.code, "error_message": f"Failed to create ACL: {exc}"}
    return {"throttle_time_ms": 0, "results": results}


@handles(msg.DELETE_ACLS)
def delete_acls(ctx: BrokerContext, header: RequestHeader, request: msg.DeleteAclsRequest,
                conn: ClientConnection) -> Answer[msg.DeleteAclsResponse]:
    authorizer, code, message = _authorizer_or_error(ctx, conn, AclOperation.ALTER)
    if authorizer is None:
        return {"throttle_time_ms": 0, "filter_results": [
            {"error_code": code, "error_message": message, "matching_acls": []} for _ in request.filters]}
    return _delete_acls(ctx, authorizer, header.api_version, request)


async def _delete_acls(ctx: BrokerContext, authorizer: Authorizer, version: int,
                      request: msg.DeleteAclsRequest) -> msg.DeleteAclsResponse:
    filters = [_filter(f, version) for f in request.filters]
    results: list[msg.DeleteAclsResponse_FilterResult] = [
        {"error_code": 0, "error_message": None, "matching_acls": []} for _ in filters]
    good = []
    for i, flt in enumerate(filters):
        problem = _filter_problem(flt)
        if problem:
            results[i]["error_code"], results[i]["error_message"] = errors.InvalidRequestError.code, problem
        else:
            good.append(i)
    try:
        removed = await ctx.run_blocking(lambda: authorizer.delete([filters[i] for i in good]))
    except Exception as exc:
        log.error("deleting ACLs failed: %s", exc)
        for i in good:
            results[i]["error_code"] = errors.UnknownServerError.code
            results[i]["error_message"] = f"Failed to delete ACLs: {exc}"
        return {"throttle_time_ms": 0, "filter_results": results}
    for i, gone in zip(good, removed, strict=True):
        results[i]["matching_acls"] = [
            {"error_code": 0, "error_message": None, "resource_type": int(ResourceType[p.resource_type]),
             "resource_name": p.name, "pattern_type": int(PatternType[p.pattern_type]), "principal": e.principal,
             "host": e.host, "operation": int(AclOperation[e.operation]),
             "permission_type": int(PermissionType[e.permission])}
            for p, e in gone if e.operation != "UNKNOWN" and e.permission != "UNKNOWN"]
    return {"throttle_time_ms": 0, "filter_results": results}
