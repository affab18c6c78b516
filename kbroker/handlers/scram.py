"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51): SCRAM users in
``/config/users/<user>`` as Kafka 2.8 keeps them (ZkAdminManager's rules and error texts).

Describe answers on any broker, from the store. Alter needs the controller in ZooKeeper mode
(NOT_CONTROLLER otherwise, as clients send it there) and writes each user's znode once, merged with its
other keys (quotas), then the ``/config/changes`` notice every broker follows. Both need DESCRIBE /
ALTER on the cluster when an authorizer is configured (CLUSTER_AUTHORIZATION_FAILED otherwise).
"""
from __future__ import annotations

import logging

from kbroker import errors
from kbroker.handlers.authorize import cluster_allowed
from kbroker.handlers.context import BrokerContext
from kbroker.handlers.registry import ClientConnection, handles
from kbroker.protocol import message_types as msg
from kbroker.protocol.header import RequestHeader
from kbroker.protocol.messages.acls import AclOperation
from kbroker.security.credentials import (
    MAX_ITERATIONS,
    MECHANISM_BY_TYPE,
    MIN_ITERATIONS,
    SCRAM_MECHANISMS,
    ScramCredential,
    alter_scram_credentials,
    credential_from_salted,
    parse_credential,
    read_user_config,
)
from zk_compat.store import NoNodeError
from zk_compat.znodes import desanitize_entity_name, sanitize_entity_name

log = logging.getLogger(__name__)

CLUSTER_AUTHORIZATION_FAILED = errors.ClusterAuthorizationFailedError.code
NOT_CONTROLLER = errors.NotControllerError.code
UNSUPPORTED_SASL_MECHANISM = errors.UnsupportedSaslMechanismError.code
UNKNOWN_SERVER_ERROR = errors.UnknownServerError.code
RESOURCE_NOT_FOUND = errors.ResourceNotFoundError.code
DUPLICATE_RESOURCE = errors.DuplicateResourceError.code
UNACCEPTABLE_CREDENTIAL = errors.UnacceptableCredentialError.code

Info = msg.DescribeUserScramCredentialsResponse_CredentialInfo
Described = msg.DescribeUserScramCredentialsResponse_Result


def _infos(user: str, configs: dict[str, str]) -> list[Info]:
    out: list[Info] = []
    for mechanism, (_, code) in SCRAM_MECHANISMS.items():
        text = configs.get(mechanism)
        if text is not None:
            out.append({"mechanism": code, "iterations": parse_credential(text).iterations})
    return out


def _describe(ctx: BrokerContext, names: list[str] | None) -> list[Described]:
    """Blocking: reads the store."""
    store = ctx.store
    if names is None:   # every user that has SCRAM credentials, by name
        try:
            children = store.get_children("/config/users")
        except NoNodeError:
            children = []
        results: list[Described] = []
        for child in children:
            if child == "<default>":
                continue
            user = desanitize_entity_name(child)
            try:
                infos = _infos(user, read_user_config(store, user))
            except ValueError:
                log.error("the SCRAM credentials of user %r are unreadable", user)
                results.append({"user": user, "error_code": UNKNOWN_SERVER_ERROR,
                                "error_message": f"The SCRAM credentials of user {user} could not be read",
                                "credential_infos": []})
                continue
            if infos:
                results.append({"user": user, "error_code": 0, "error_message": None, "credential_infos": infos})
        return sorted(results, key=lambda r: r["user"])
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    results = []
    for name in dict.fromkeys(names):
        result: Described = {"user": name, "error_code": 0, "error_message": None, "credential_infos": []}
        if not name:
            result.update({"error_code": RESOURCE_NOT_FOUND, "error_message": "Username must not be empty"})
        elif counts[name] > 1:
            result.update({"error_code": DUPLICATE_RESOURCE, "error_message": (
                f"Cannot describe SCRAM credentials for the same user twice in a single request: {name}")})
        else:
            try:
                infos = _infos(name, read_user_config(store, name))
            except ValueError:
                log.error("the SCRAM credentials of user %r are unreadable", name)
                result.update({"error_code": UNKNOWN_SERVER_ERROR,
                              "error_message": f"The SCRAM credentials of user {name} could not be read"})
                infos = []
            if infos:
                result["credential_infos"] = infos
            elif result["error_code"] == 0:
                result.update({"error_code": RESOURCE_NOT_FOUND,
                              "error_message": f"Attempt to describe a user credential that does not exist: {name}"})
        results.append(result)
    return results


@handles(msg.DESCRIBE_USER_SCRAM_CREDENTIALS)
async def describe_user_scram_credentials(ctx: BrokerContext, header: RequestHeader,
                                          request: msg.DescribeUserScramCredentialsRequest,
                                          conn: ClientConnection) -> msg.DescribeUserScramCredentialsResponse:
    if not cluster_allowed(ctx, conn, AclOperation.DESCRIBE):
        return {"throttle_time_ms": 0, "error_code": CLUSTER_AUTHORIZATION_FAILED, "error_message": None,
                "results": []}
    names = None if not request.users else [u.name for u in request.users]
    results = await ctx.run_blocking(lambda: _describe(ctx, names))
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "results": results}


@handles(msg.ALTER_USER_SCRAM_CREDENTIALS)
async def alter_user_scram_credentials(ctx: BrokerContext, header: RequestHeader,
                                       request: msg.AlterUserScramCredentialsRequest,
                                       conn: ClientConnection) -> msg.AlterUserScramCredentialsResponse:
    users = list(dict.fromkeys([d.name for d in request.deletions] + [u.name for u in request.upsertions]))

    def every(code: int, message: str | None = None) -> msg.AlterUserScramCredentialsResponse:
        return {"throttle_time_ms": 0,
                "results": [{"user": u, "error_code": code, "error_message": message} for u in users]}
    zk = ctx.zookeeper
    if zk is not None and not zk.controller.active:
        return every(NOT_CONTROLLER)
    if not cluster_allowed(ctx, conn, AclOperation.ALTER):
        return every(CLUSTER_AUTHORIZATION_FAILED)

    failed: dict[str, tuple[int, str]] = {}
    seen: dict[tuple[str, int], int] = {}

    def fail(user: str, code: int, message: str) -> None:
        failed.setdefault(user, (code, message))
    items: list[msg.AlterUserScramCredentialsRequest.Deletion | msg.AlterUserScramCredentialsRequest.Upsertion] = [
        *request.deletions, *request.upsertions]
    for item in items:
        seen[(item.name, item.mechanism)] = seen.get((item.name, item.mechanism), 0) + 1
    for item in items:
        if not item.name:
            fail(item.name, UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
        elif item.mechanism not in MECHANISM_BY_TYPE:
            fail(item.name, UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
        elif seen[(item.name, item.mechanism)] > 1:
            fail(item.name, DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request")
    for up in request.upsertions:
        if up.iterations < MIN_ITERATIONS:
            fail(up.name, UNACCEPTABLE_CREDENTIAL, "Too few iterations")
        elif up.iterations > MAX_ITERATIONS:
            fail(up.name, UNACCEPTABLE_CREDENTIAL, "Too many iterations")

    changes: dict[str, tuple[dict[str, ScramCredential], list[str]]] = {}
    for user in users:
        if user in failed:
            continue
        upsert = {}
        for up in request.upsertions:
            if up.name == user:
                mechanism = MECHANISM_BY_TYPE[up.mechanism]
                upsert[mechanism] = credential_from_salted(mechanism, bytes(up.salt), bytes(up.salted_password),
                                                           up.iterations)
        deletes = [MECHANISM_BY_TYPE[d.mechanism] for d in request.deletions if d.name == user]
        changes[user] = (upsert, deletes)

    def write() -> dict[str, tuple[int, str]]:
        outcome: dict[str, tuple[int, str]] = {}
        for user, (upsert, deletes) in changes.items():
            try:
                current = read_user_config(ctx.store, user)
            except ValueError:   # Kafka fails too: the znode must be repaired (or deleted) first
                log.warning("SCRAM credentials of user %r not altered: its config znode is unreadable", user)
                outcome[user] = (UNKNOWN_SERVER_ERROR, f"The configs of user {user} in ZooKeeper are unreadable")
                continue
            missing = [m for m in deletes if m not in current]
            if missing:
                outcome[user] = (RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")
                continue
            try:
                alter_scram_credentials(ctx.store, user, upsert, deletes)
                ctx.security.entity_configs.reload(f"users/{sanitize_entity_name(user)}")
            except Exception as exc:  # noqa: BLE001 - one user's failed write is that user's error
                log.error("writing the SCRAM credentials of user %r failed: %s", user, type(exc).__name__)
                outcome[user] = (UNKNOWN_SERVER_ERROR, "Writing the credentials failed")
        return outcome
    written = await ctx.run_blocking(write) if changes else {}
    results: list[msg.AlterUserScramCredentialsResponse_Result] = []
    for user in users:
        code, message = failed.get(user) or written.get(user) or (0, None)
        results.append({"user": user, "error_code": code, "error_message": message})
        if code == 0:
            log.info("SCRAM credentials of user %r altered by %s", user, conn.session.principal)
    return {"throttle_time_ms": 0, "results": results}
