"""UpdateFeatures (57, KIP-584) as a Kafka 2.8 ZooKeeper-mode broker answers it.

KafkaApis.handleUpdateFeatures: CLUSTER_AUTHORIZATION_FAILED without ALTER on the cluster, NOT_CONTROLLER
from a broker that is not the active controller, INVALID_REQUEST "Feature versioning system is disabled."
below inter.broker.protocol.version 2.7. Otherwise the controller (KafkaController.processFeatureUpdates)
checks each update against the features the broker supports and those finalized in /feature. Kafka 2.8
defines no feature at all (BrokerFeatures' default set is empty), so nothing is ever finalized and every
update is refused with INVALID_REQUEST and Kafka's reason, per feature, with no top-level error."""
from __future__ import annotations

import re

from kbroker import errors
from kbroker.handlers.authorize import cluster_allowed
from kbroker.handlers.context import BrokerContext
from kbroker.handlers.registry import Answer, ClientConnection, handles
from kbroker.protocol import message_types as msg
from kbroker.protocol.header import RequestHeader
from kbroker.protocol.messages.acls import AclOperation

INVALID_REQUEST = errors.InvalidRequestError.code
_VERSION = re.compile(r"^(\d+)\.(\d+)")


def _versioning_enabled(ctx: BrokerContext) -> bool:
    """KafkaConfig.isFeatureVersioningSupported: inter.broker.protocol.version 2.7 or later (2.8's default)."""
    found = _VERSION.match(ctx.config.raw.get("inter.broker.protocol.version", "2.8"))
    return found is None or (int(found.group(1)), int(found.group(2))) >= (2, 7)


def _refusal(update: msg.UpdateFeaturesRequest.FeatureUpdateKey) -> str:
    """Why KafkaController.validateFeatureUpdate refuses ``update`` when no feature is supported or finalized."""
    if not update.feature:
        return "Feature name can not be empty."
    if update.max_version_level < 1:
        if update.allow_downgrade:  # UpdateFeaturesRequest.isDeleteRequest
            return f"Can not delete non-existing finalized feature: '{update.feature}'"
        return (f"Can not provide maxVersionLevel: {update.max_version_level} less than 1 without setting the "
                "allowDowngrade flag to true in the request.")
    return "Could not apply finalized feature update because the provided feature is not supported."


@handles(msg.UPDATE_FEATURES)
def update_features(ctx: BrokerContext, header: RequestHeader, request: msg.UpdateFeaturesRequest,
                    conn: ClientConnection) -> Answer[msg.UpdateFeaturesResponse]:
    def top_level(code: int, message: str | None = None) -> msg.UpdateFeaturesResponse:
        return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "results": []}

    if not cluster_allowed(ctx, conn, AclOperation.ALTER):
        return top_level(errors.ClusterAuthorizationFailedError.code)
    zk = ctx.zookeeper
    if zk is not None and not zk.controller.active:
        return top_level(errors.NotControllerError.code)
    if not _versioning_enabled(ctx):
        return top_level(INVALID_REQUEST, "Feature versioning system is disabled.")
    # Kafka's request keys the updates by feature: the last one counts
    results: dict[str, msg.UpdateFeaturesResponse_UpdatableFeatureResult] = {
        u.feature: {"feature": u.feature, "error_code": INVALID_REQUEST, "error_message": _refusal(u)}
        for u in request.feature_updates}
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "results": list(results.values())}
