"""AlterIsr (56, KIP-497), which the active controller serves, as Kafka 2.8's KafkaApis.handleAlterIsrRequest
and KafkaController.processAlterIsr do: CLUSTER_ACTION on the cluster; NOT_CONTROLLER from any other
broker; STALE_BROKER_EPOCH unless the broker is registered with that epoch. Then per partition:
UNKNOWN_TOPIC_OR_PARTITION without a state znode, FENCED_LEADER_EPOCH for an older leader epoch, the
current state unchanged when the request asks for it, else a compare-and-set of the state znode on
``current_isr_version`` (INVALID_UPDATE_VERSION when it moved). A written change is announced through
/isr_change_notification, from which the controller sends UpdateMetadata to every broker.

kbroker's own leaders write their ISR to ZooKeeper themselves (Kafka before inter.broker.protocol 2.7);
this serves a leader that asks, as a 2.8 controller does."""
from __future__ import annotations

import logging

from kbroker import errors
from kbroker.handlers.authorize import Op, cluster_allowed
from kbroker.handlers.context import BrokerContext
from kbroker.handlers.registry import Answer, ClientConnection, handles
from kbroker.protocol import message_types as msg
from kbroker.protocol.header import RequestHeader
from zk_compat import layout
from zk_compat.store import BadVersionError, NoNodeError
from zk_compat.znodes import PartitionState

log = logging.getLogger(__name__)


def _top_level(code: int) -> msg.AlterIsrResponse:
    return {"throttle_time_ms": 0, "error_code": code, "topics": []}


@handles(msg.ALTER_ISR)
def alter_isr(ctx: BrokerContext, header: RequestHeader, request: msg.AlterIsrRequest,
              conn: ClientConnection) -> Answer[msg.AlterIsrResponse]:
    if not cluster_allowed(ctx, conn, Op.CLUSTER_ACTION):
        return _top_level(errors.ClusterAuthorizationFailedError.code)
    zk = ctx.zookeeper
    if zk is None or not zk.controller.active:
        return _top_level(errors.NotControllerError.code)
    broker = zk.cluster.snapshot.brokers.get(request.broker_id)
    if broker is None or broker.epoch != request.broker_epoch:
        log.info("AlterIsr from broker %d ignored: broker epoch %d is not the registered one (%s)",
                 request.broker_id, request.broker_epoch, None if broker is None else broker.epoch)
        return _top_level(errors.StaleBrokerEpochError.code)
    return _alter(ctx, request)


async def _alter(ctx: BrokerContext, request: msg.AlterIsrRequest) -> msg.AlterIsrResponse:
    zk = ctx.zookeeper
    assert zk is not None
    controller = zk.controller
    asked = [(t.name, p) for t in request.topics for p in t.partitions]

    def apply() -> list[tuple[str, msg.AlterIsrResponse_PartitionResult]]:
        out: list[tuple[str, msg.AlterIsrResponse_PartitionResult]] = []
        changed = []
        for topic, p in asked:
            answer: msg.AlterIsrResponse_PartitionResult = {
                "partition_index": p.partition_index, "error_code": 0, "leader_id": -1, "leader_epoch": -1,
                "isr": [], "current_isr_version": -1}
            found = layout.get_partition_state(ctx.store, topic, p.partition_index)
            if found is None:
                answer["error_code"] = errors.UnknownTopicOrPartitionError.code
            else:
                current, stat = found
                wanted = PartitionState(leader=request.broker_id, leader_epoch=p.leader_epoch, isr=list(p.new_isr),
                                        controller_epoch=controller.epoch)
                if p.leader_epoch < current.leader_epoch:
                    answer["error_code"] = errors.FencedLeaderEpochError.code
                elif (wanted.leader, wanted.leader_epoch, wanted.isr) == (current.leader, current.leader_epoch,
                                                                           current.isr):
                    answer.update({"leader_id": current.leader, "leader_epoch": current.leader_epoch,
                                   "isr": current.isr, "current_isr_version": stat.version})
                else:
                    try:
                        written = layout.set_partition_state(ctx.store, topic, p.partition_index, wanted,
                                                             p.current_isr_version,
                                                             controller_epoch_zk_version=controller.epoch_zk_version)
                    except BadVersionError:
                        answer["error_code"] = errors.InvalidUpdateVersionError.code
                    except NoNodeError:
                        answer["error_code"] = errors.UnknownTopicOrPartitionError.code
                    else:
                        answer.update({"leader_id": wanted.leader, "leader_epoch": wanted.leader_epoch,
                                       "isr": wanted.isr, "current_isr_version": written.version})
                        changed.append((topic, p.partition_index))
            out.append((topic, answer))
        if changed:
            layout.create_isr_change_notification(ctx.store, changed)
        return out

    try:
        answers = await ctx.run_blocking(apply)
    except errors.KafkaError as exc:
        return _top_level(exc.code)
    except Exception:
        log.exception("AlterIsr from broker %d failed", request.broker_id)
        return _top_level(errors.UnknownServerError.code)
    by_topic: dict[str, list[msg.AlterIsrResponse_PartitionResult]] = {}
    for topic, answer in answers:
        by_topic.setdefault(topic, []).append(answer)
    return {"throttle_time_ms": 0, "error_code": 0,
            "topics": [{"name": name, "partitions": parts} for name, parts in by_topic.items()]}
