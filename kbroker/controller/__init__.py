"""The controller (ZooKeeper mode), first step: election through ``/controller`` and
``/controller_epoch``, and the partition states of new topics.

Election (Kafka's ``KafkaController.elect``): whenever the cluster view shows no ``/controller``,
every broker tries ``register_controller_and_increment_epoch``; one multi decides the winner. The
winner's epoch zkVersion fences every later write. A broker whose session expires resigns at once
(``SessionManager.on_resign``); one that sees another id in ``/controller`` stops acting too.

New topics (the controller's ``TopicChangeHandler`` / ``onNewPartitionCreation``): for every
partition of ``/brokers/topics/<t>`` without a state znode, create it with leader = the first live
replica in assignment order, ISR = [leader], leader_epoch 0, controller_epoch = ours. Replication
does not exist yet, so the ISR stays [leader] even for replication factor > 1.

Offline partitions (``OfflinePartitionLeaderElectionStrategy``): a partition whose leader is not a
live broker gets the first live replica in assignment order that is in the ISR as leader, the ISR
reduced to its live members, leader_epoch + 1; with ``unclean.leader.election.enable`` (broker
default or topic override) any live replica, ISR = [it]. Without a candidate the controller writes
leader -1 (leader_epoch + 1), keeping the ISR's last member, as Kafka's removeReplicasFromIsr does;
Metadata then reports LEADER_NOT_AVAILABLE, and the partition comes back (leader_epoch + 1 again)
when a replica in its ISR registers again.

Topic deletion: ``/admin/delete_topics/<t>`` (written by any broker's DeleteTopics) makes the
controller remove the topic's znodes; brokers delete their logs when the topic leaves their view.

Not yet here: ISR shrink of followers on broker death, LeaderAndIsr/UpdateMetadata requests, reassignment, preferred leader election, controlled shutdown.
"""
from __future__ import annotations

import logging

from kbroker.cluster import Snapshot
from zk_compat import layout
from zk_compat.layout import ControllerMovedError
from zk_compat.store import BadVersionError, MetadataStore, NodeExistsError
from zk_compat.znodes import PartitionState

log = logging.getLogger(__name__)


class Controller:
    def __init__(self, store: MetadataStore, broker_id: int, unclean_leader_election: bool = False) -> None:
        self.store = store
        self.broker_id = broker_id
        self.unclean_leader_election = unclean_leader_election
        self.active = False
        self.epoch = -1
        self.epoch_zk_version = -1

    def resign(self) -> None:
        if self.active:
            log.info("broker %d resigns as controller (epoch %d)", self.broker_id, self.epoch)
        self.active = False

    # -- blocking (the cluster view's executor thread)

    def on_snapshot(self, snap: Snapshot) -> bool:
        """React to a fresh view. Returns True when it wrote something (the watches will bring
        the result back as another snapshot)."""
        if snap.controller_id is None:
            self._elect()
            return True
        if snap.controller_id != self.broker_id:
            self.resign()
            return False
        if not self.active:
            # /controller names us but we did not win it in this process/session: a leftover of
            # an earlier session. Kafka resigns and re-elects; do the same.
            return False
        wrote = self._delete_topics(snap)
        wrote = self._create_missing_states(snap) or wrote
        return self._elect_offline_leaders(snap) or wrote

    def _delete_topics(self, snap: Snapshot) -> bool:
        """Topic deletion (``TopicDeletionManager``, without StopReplica): remove the topic's
        znodes and its deletion request in one fenced multi; every broker drops its logs of the
        topic when its view no longer has it."""
        wrote = False
        for topic in snap.deleting:
            try:
                layout.delete_topic_znodes(self.store, topic, controller_epoch_zk_version=self.epoch_zk_version)
            except ControllerMovedError:
                log.warning("controller epoch moved on: broker %d stops acting as controller", self.broker_id)
                self.active = False
                return wrote
            log.info("controller %d deleted topic %s", self.broker_id, topic)
            snap.assignments.pop(topic, None)
            wrote = True
        return wrote

    def _elect_offline_leaders(self, snap: Snapshot) -> bool:
        wrote = False
        live = set(snap.brokers)
        for (topic, index), state in sorted(snap.states.items()):
            if state.leader in live or not self.active:
                continue
            replicas = snap.assignments.get(topic, {}).get(index, [])
            current = layout.get_partition_state(self.store, topic, index)
            if current is None:
                continue
            state, stat = current
            if state.leader in live:
                continue  # changed since the snapshot
            isr = [r for r in state.isr if r in live]
            leader = next((r for r in replicas if r in isr), -1)
            unclean = snap.configs.get(topic, {}).get("unclean.leader.election.enable")
            if leader < 0 and (unclean == "true" if unclean is not None else self.unclean_leader_election):
                leader = next((r for r in replicas if r in live), -1)
                isr = [leader]
            if leader < 0:
                if state.leader == -1:
                    continue  # already offline: until a replica in its ISR comes back
                # Kafka's removeReplicasFromIsr for the dead leader: no leader, the last ISR member stays
                isr = [r for r in state.isr if r != state.leader] or list(state.isr)
            new = PartitionState(leader=leader, leader_epoch=state.leader_epoch + 1, isr=isr,
                                 controller_epoch=self.epoch)
            try:
                layout.set_partition_state(self.store, topic, index, new, stat.version,
                                           controller_epoch_zk_version=self.epoch_zk_version)
            except BadVersionError:
                continue  # someone changed it: the watch brings it back
            except ControllerMovedError:
                log.warning("controller epoch moved on: broker %d stops acting as controller", self.broker_id)
                self.active = False
                return wrote
            if leader < 0:
                log.info("controller %d: %s-%d has no live replica in its ISR %s; offline (leader epoch %d)",
                         self.broker_id, topic, index, isr, new.leader_epoch)
            else:
                log.info("controller %d elected broker %d leader of %s-%d (leader epoch %d, ISR %s)", self.broker_id,
                         leader, topic, index, new.leader_epoch, isr)
            wrote = True
        return wrote

    def _elect(self) -> None:
        if self.active:
            return
        try:
            self.epoch, self.epoch_zk_version = layout.register_controller_and_increment_epoch(
                self.store, self.broker_id)
        except ControllerMovedError as exc:
            log.info("controller election lost: %s", exc)
            self.active = False
            return
        self.active = True
        log.info("broker %d became controller with epoch %d", self.broker_id, self.epoch)

    def _create_missing_states(self, snap: Snapshot) -> bool:
        wrote = False
        live = set(snap.brokers)
        for topic, assignment in snap.assignments.items():
            for index, replicas in sorted(assignment.items()):
                if (topic, index) in snap.states:
                    continue
                leader = next((r for r in replicas if r in live), -1)
                isr = [leader] if leader >= 0 else list(replicas[:1])
                state = PartitionState(leader=leader, leader_epoch=0, isr=isr, controller_epoch=self.epoch)
                try:
                    layout.create_partition_state(self.store, topic, index, state,
                                                  controller_epoch_zk_version=self.epoch_zk_version)
                    wrote = True
                except NodeExistsError:
                    pass
                except ControllerMovedError:
                    log.warning("controller epoch moved on: broker %d stops acting as controller", self.broker_id)
                    self.active = False
                    return wrote
        if wrote:
            log.info("controller %d created partition states", self.broker_id)
        return wrote
