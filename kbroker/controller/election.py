"""Leader elections an operator asks for (ElectLeaders, KIP-460), run by the active controller on
the cluster view's thread, with Kafka 2.8's rules (``KafkaController.processReplicaLeaderElection``).

Per partition, in this order:
- not in the cluster: UNKNOWN_TOPIC_OR_PARTITION; its topic being deleted: INVALID_TOPIC_EXCEPTION;
- preferred: ELECTION_NOT_NEEDED when the first assigned replica already leads; else it leads when
  it is alive and in the ISR (ISR unchanged), otherwise PREFERRED_LEADER_NOT_AVAILABLE;
- unclean: ELECTION_NOT_NEEDED when a live broker leads; else the first live replica in the ISR,
  or failing that the first live replica at all, with the ISR reduced to it. The operator asked for
  it, so ``unclean.leader.election.enable`` does not matter here; a live replica is still required,
  otherwise ELIGIBLE_LEADERS_NOT_AVAILABLE.

Brokers in controlled shutdown count as dead, as in Kafka, and so does a replica on a failed log dir
(KIP-112). A successful election writes the state znode (leader_epoch + 1, fenced by the controller
epoch); the watches bring it back as a view that the controller's channel sends out, so the caller
waits for its own metadata to show the leader.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kbroker import errors
from kbroker.metadata.zk_view import Snapshot
from zk_compat import layout
from zk_compat.znodes import PartitionState

if TYPE_CHECKING:
    from kbroker.controller.controller import Controller

log = logging.getLogger(__name__)

PREFERRED, UNCLEAN = 0, 1
ELECTION_NAMES = {PREFERRED: "preferred", UNCLEAN: "unclean"}
_CAS_ATTEMPTS = 5  # a leader shrinking or growing the ISR meanwhile makes the compare-and-set fail


@dataclass(frozen=True)
class Refusal:
    """Why a partition got no new leader: a Kafka error code and its message."""
    code: int
    message: str | None = None


Outcome = int | Refusal  # the broker elected, or why none was
TP = tuple[str, int]


def not_controller(partitions: Iterable[TP]) -> dict[TP, Outcome]:
    return {tp: Refusal(errors.NotControllerError.code) for tp in partitions}


def elect_leaders(ctl: Controller, snap: Snapshot, partitions: Iterable[TP], election_type: int) -> dict[TP, Outcome]:
    """Run one election per partition (blocking: the store is read and written)."""
    partitions = list(partitions)
    if not ctl.active:
        return not_controller(partitions)
    live = set(snap.brokers) - ctl.shutting_down
    out: dict[TP, Outcome] = {}
    for tp in partitions:
        replicas = snap.assignments.get(tp[0], {}).get(tp[1])
        if not replicas or tp not in snap.states:
            out[tp] = Refusal(errors.UnknownTopicOrPartitionError.code, "The partition does not exist.")
        elif tp[0] in snap.deleting:
            out[tp] = Refusal(errors.InvalidTopicError.code, "The topic is being deleted")
        elif not ctl.active:
            out[tp] = Refusal(errors.NotControllerError.code)
        else:  # a replica on a failed log dir (KIP-112) is no candidate, as Kafka's isReplicaOnline
            online = {b for b in live if not ctl.offline_replicas.is_offline(b, tp)}
            out[tp] = _elect(ctl, tp, replicas, election_type, online)
    return out


def _elect(ctl: Controller, tp: TP, replicas: list[int], election_type: int, live: set[int]) -> Outcome:
    topic, index = tp
    for _ in range(_CAS_ATTEMPTS):
        found = layout.get_partition_state(ctl.store, topic, index)
        if found is None:
            return Refusal(errors.UnknownTopicOrPartitionError.code, "The partition does not exist.")
        state, stat = found
        choice = choose(tp, replicas, state, election_type, live)
        if isinstance(choice, Refusal):
            return choice
        leader, isr = choice
        if state.controller_epoch > ctl.epoch:
            return Refusal(errors.NotControllerError.code, "a newer controller wrote this partition's state")
        new = PartitionState(leader=leader, leader_epoch=state.leader_epoch + 1, isr=isr, controller_epoch=ctl.epoch)
        if ctl._write_state(topic, index, new, stat.version):
            log.info("controller %d: %s election made broker %d leader of %s-%d (leader epoch %d, ISR %s)",
                     ctl.broker_id, ELECTION_NAMES[election_type], leader, topic, index, new.leader_epoch, isr)
            return leader
        if not ctl.active:
            return Refusal(errors.NotControllerError.code)
    return Refusal(errors.UnknownServerError.code,
                   f"the state of {topic}-{index} kept changing during {_CAS_ATTEMPTS} attempts; try again")


def choose(tp: TP, replicas: list[int], state: PartitionState, election_type: int,
            live: set[int]) -> tuple[int, list[int]] | Refusal:
    """The new leader and ISR, or why there is none (or no need for one)."""
    name = f"{tp[0]}-{tp[1]}"
    if election_type == PREFERRED:
        preferred = replicas[0]
        if state.leader == preferred:
            return Refusal(errors.ElectionNotNeededError.code, f"{name} is already led by its preferred replica")
        if preferred in live and preferred in state.isr:
            return preferred, list(state.isr)
        why = "not alive" if preferred not in live else f"not in the ISR {state.isr}"
        return Refusal(errors.PreferredLeaderNotAvailableError.code,
                       f"preferred replica {preferred} of {name} is {why}")
    if state.leader >= 0 and state.leader in live:
        return Refusal(errors.ElectionNotNeededError.code, f"{name} already has a live leader ({state.leader})")
    in_sync = next((r for r in replicas if r in live and r in state.isr), -1)
    if in_sync >= 0:
        return in_sync, [r for r in state.isr if r in live]
    any_live = next((r for r in replicas if r in live), -1)
    if any_live >= 0:
        return any_live, [any_live]
    return Refusal(errors.EligibleLeadersNotAvailableError.code,
                   f"no replica of {name} ({', '.join(map(str, replicas))}) is alive")
