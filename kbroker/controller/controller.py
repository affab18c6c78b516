"""The controller (ZooKeeper mode): election through ``/controller`` and ``/controller_epoch``,
partition states, leader elections, and what it tells the brokers.

Election (Kafka's ``KafkaController.elect``): whenever the cluster view shows no ``/controller``,
every broker tries ``register_controller_and_increment_epoch``; one multi decides the winner. The
winner's epoch zkVersion fences every later write. A broker whose session expires resigns at once
(``SessionManager.on_resign``); one that sees another id in ``/controller`` stops acting too.

New topics (the controller's ``TopicChangeHandler`` / ``onNewPartitionCreation``): for every
partition of ``/brokers/topics/<t>`` without a state znode, create it with leader = the first live
replica in assignment order, ISR = the live replicas, leader_epoch 0, controller_epoch = ours.

Dead followers (``onBrokerFailure`` -> ``removeReplicasFromIsr``): a partition whose leader lives
but whose ISR names a dead broker loses it from the ISR with leader_epoch + 1, so acks=all does
not wait replica.lag.time.max.ms for a broker ZooKeeper already declared dead.

Offline partitions (``OfflinePartitionLeaderElectionStrategy``): a partition whose leader is not a
live broker gets the first live replica in assignment order that is in the ISR as leader, the ISR
reduced to its live members, leader_epoch + 1; with ``unclean.leader.election.enable`` (broker
default or topic override) any live replica, ISR = [it]. Without a candidate the controller writes
leader -1 (leader_epoch + 1), keeping the ISR's last member, as Kafka's removeReplicasFromIsr does;
Metadata then reports LEADER_NOT_AVAILABLE, and the partition comes back (leader_epoch + 1 again)
when a replica in its ISR registers again.

Bounced brokers (``processBrokerChange``'s ``bouncedBrokerIds``): a broker whose registration the active
controller saw before and now sees with another broker epoch (the czxid of ``/brokers/ids/<id>``) died and came
back between two views. As Kafka does (``onBrokerFailure`` then ``onBrokerStartup``), it is first handled as
failed, its leaderships moved to other ISR members and its follower seats removed from the ISRs (leader epoch + 1
each), and only then treated as live: the channel hears of it as a new broker in the next view, so it never
resumes a leadership at the epoch it led before it died.

Topic deletion: ``/admin/delete_topics/<t>`` (written by any broker's DeleteTopics) makes the
controller remove the topic's znodes; brokers delete their logs when the topic leaves their view.

Controlled shutdown (``KafkaController.doControlledShutdown``): a stopping broker sends
ControlledShutdown; the controller moves each leadership it holds to the first live replica in
assignment order that is in the ISR (``ControlledShutdownPartitionLeaderElectionStrategy``), takes it
out of every ISR (leader_epoch + 1 each), and answers the partitions it could not move (it is their
only ISR member while another replica lives; Kafka also counts those with no other live replica,
which makes the last broker of a cluster wait out every retry for nothing). Until it leaves
``/brokers/ids`` it is never elected leader again.

Failed log dirs (KIP-112; ``processLogDirEventNotification``, ``onBrokerLogDirFailure``, ``onReplicasBecomeOffline``):
a broker whose log dir fails writes ``/log_dir_event_notification/log_dir_event_<seq>``; the controller deletes
each notice it read (fenced) and has the channel send that broker LeaderAndIsr for all its replicas again. The
replicas it answers KAFKA_STORAGE_ERROR for (``kbroker.controller.offline_dirs``) are offline: a partition one of
them leads gets the first other online replica in assignment order that is in the ISR (with unclean election, any
online replica), else leader -1; each leaves its ISR (the last member stays), leader_epoch + 1. No election elects
a replica on an offline dir.

ISR change notifications (``IsrChangeNotificationHandler``): leaders write one per ISR change; every
broker already watches the state znodes, so the controller only deletes them.

Elections an operator asks for (ElectLeaders: preferred and unclean): ``kbroker.controller.election``.
Reassignment and preferred leader election: ``kbroker.controller.reassignment``; the automatic
preferred-leader rebalance (auto.leader.rebalance.enable) runs every
leader.imbalance.check.interval.seconds from the broker's housekeeping (``auto_rebalance``).

Propagation (``kbroker.controller.channel``): after every view the controller sends each broker
LeaderAndIsr for the partitions it holds, StopReplica for those it no longer holds, and
UpdateMetadata with every partition's leader and ISR. Only the controller reads the partition
state znodes; brokers take their roles from those requests.
"""
from __future__ import annotations

import dataclasses
import logging

from kbroker.controller import reassignment
from kbroker.controller.offline_dirs import NewReplicas, OfflineReplicas
from kbroker.metadata.zk_view import Snapshot
from zk_compat import layout
from zk_compat.layout import ControllerMovedError
from zk_compat.store import BadVersionError, MetadataStore, MetadataStoreError, NoNodeError, Stat
from zk_compat.znodes import (
    IsrChangeNotificationZNode,
    LogDirEventNotificationSequenceZNode,
    LogDirEventNotificationZNode,
    PartitionState,
)

log = logging.getLogger(__name__)


class Controller:
    def __init__(self, store: MetadataStore, broker_id: int, unclean_leader_election: bool = False,
                 offline_replicas: OfflineReplicas | None = None) -> None:
        self.store = store
        self.broker_id = broker_id
        self.unclean_leader_election = unclean_leader_election
        self.active = False
        self.epoch = -1
        self.epoch_zk_version = -1
        self.shutting_down: set[int] = set()  # brokers in controlled shutdown, until they deregister
        # replicas on failed log dirs (what brokers answered LeaderAndIsr with), and the brokers whose log dir
        # event was read: the channel asks each about all its replicas again (take_log_dir_failures)
        self.offline_replicas = offline_replicas if offline_replicas is not None else OfflineReplicas()
        self.log_dir_failures: set[int] = set()
        self.new_replicas = NewReplicas()  # their first LeaderAndIsr says is_new

        # live brokers' epochs in the last view this controller acted on (empty until its first view once elected)
        self.broker_epochs: dict[int, int] = {}
        self.bounced: set[int] = set()  # brokers found bounced in the last view (the channel leaves them out once)

    def moved_on(self) -> None:
        """A fenced write found another controller epoch: stop acting as controller (the watches bring the news)."""
        log.warning("controller epoch moved on: broker %d stops acting as controller", self.broker_id)
        self.active = False

    def resign(self) -> None:
        if self.active:
            log.info("broker %d resigns as controller (epoch %d)", self.broker_id, self.epoch)
        self.active = False
        self.broker_epochs, self.bounced = {}, set()

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
        self.shutting_down &= set(snap.brokers)
        if not self.active:
            # /controller names us but we did not win it in this process/session: a leftover of
            # an earlier session. Kafka resigns and re-elects; do the same.
            return False
        wrote = self._handle_bounced(snap)
        self._read_log_dir_events(snap)
        wrote = self._delete_topics(snap) or wrote
        wrote = self._create_missing_states(snap) or wrote
        wrote = self._elect_offline_leaders(snap) or wrote
        wrote = self._move_offline_dir_replicas(snap) or wrote
        wrote = self._remove_dead_followers(snap) or wrote
        wrote = self._drop_non_replicas(snap) or wrote
        if self.active:
            wrote = reassignment.start_requested(self, snap) or wrote
            wrote = reassignment.progress(self, snap) or wrote
            wrote = reassignment.requested_preferred(self, snap) or wrote
        self._delete_isr_change_notifications(snap)
        return wrote

    def _handle_bounced(self, snap: Snapshot) -> bool:
        """Brokers registered again under a new broker epoch since the last view: failed first (Kafka's
        onBrokerFailure for ``bouncedBrokerIds``), so their partitions get leaders and ISRs without them."""
        previous = self.broker_epochs
        self.broker_epochs = {b: live.epoch for b, live in snap.brokers.items()}
        self.bounced = {b for b, epoch in self.broker_epochs.items() if b in previous and previous[b] != epoch}
        if not self.bounced:
            return False
        log.info("controller %d: brokers %s registered again (new broker epoch): handled as failed, then as started",
                 self.broker_id, sorted(self.bounced))
        failed = self.without_bounced(snap)
        wrote = self._elect_offline_leaders(failed)
        wrote = self._remove_dead_followers(failed) or wrote
        if not wrote:  # none of their partitions changed, so no next view would bring them back: live at once
            self.bounced = set()
        return wrote

    def without_bounced(self, snap: Snapshot) -> Snapshot:
        """``snap`` with the brokers of the last view's bounce left out of the live brokers."""
        if not self.bounced:
            return snap
        # its own states: what the failure step writes into it is not seen live in the same view
        return dataclasses.replace(snap, brokers={b: live for b, live in snap.brokers.items() if b not in self.bounced},
                                   states=dict(snap.states), state_versions=dict(snap.state_versions))

    def auto_rebalance(self, snap: Snapshot, percentage: int) -> int:
        """Move leaderships back to preferred replicas where a broker's imbalance is too high."""
        if not self.active:
            return 0
        return len(reassignment.elect_preferred(self, snap, reassignment.imbalanced_partitions(snap, percentage)))

    def controlled_shutdown(self, broker_id: int, snap: Snapshot) -> list[tuple[str, int]]:
        """Move leaderships off ``broker_id`` and take it out of the ISRs; returns the partitions
        it still leads. Raises NotControllerError when this broker is not the controller."""
        from kbroker import errors
        if not self.active:
            raise errors.NotControllerError(f"broker {self.broker_id} is not the controller")
        if broker_id not in snap.brokers:
            raise errors.BrokerNotAvailableError(f"broker {broker_id} is not registered")
        self.shutting_down.add(broker_id)
        remaining: list[tuple[str, int]] = []
        live = set(snap.brokers) - self.shutting_down
        # as Kafka: a single replica has nowhere to go
        pending = [tp for tp in sorted(snap.states) if broker_id in snap.assignments.get(tp[0], {}).get(tp[1], [])
                   and len(snap.assignments[tp[0]][tp[1]]) >= 2]
        held: dict[tuple[str, int], tuple[PartitionState, int]] = {
            tp: (snap.states[tp], snap.state_versions.get(tp, -1)) for tp in pending}
        for _ in range(3):  # a lost compare-and-set (the leader changed the ISR) is tried again on a fresh read
            updates: list[tuple[str, int, PartitionState, int]] = []
            for tp in pending:
                found = held.get(tp)
                if found is None or (found[0].leader != broker_id and broker_id not in found[0].isr):
                    continue  # no longer led by it nor in sync with it
                state, version = found
                replicas = snap.assignments[tp[0]][tp[1]]
                isr = [r for r in state.isr if r != broker_id]
                leader = state.leader
                if leader == broker_id:
                    leader = next((r for r in replicas if r in isr and r in live), -1)
                    if leader < 0:
                        # Worth waiting for only if another replica lives (it may catch up and join the ISR);
                        # with none alive, no retry can ever move it.
                        if any(r in live and r != broker_id for r in replicas):
                            remaining.append(tp)
                        continue
                elif not isr:
                    continue
                updates.append((tp[0], tp[1], PartitionState(leader=leader, leader_epoch=state.leader_epoch + 1,
                                                             isr=isr, controller_epoch=self.epoch), version))
            if not updates:
                break
            try:  # all of them in one pipelined round
                outcomes = layout.set_partition_states(self.store, updates,
                                                       controller_epoch_zk_version=self.epoch_zk_version)
            except ControllerMovedError:
                self.active = False
                raise errors.NotControllerError(f"broker {self.broker_id} is no longer the controller") from None
            pending = []
            for (topic, index, _, _), outcome in zip(updates, outcomes):
                if isinstance(outcome, BadVersionError):
                    pending.append((topic, index))
                elif isinstance(outcome, MetadataStoreError) and not isinstance(outcome, NoNodeError):
                    raise outcome
            held = {}
            for topic, index in pending:
                current = layout.get_partition_state(self.store, topic, index)
                if current is not None:
                    held[(topic, index)] = (current[0], current[1].version)
        log.info("controller %d: controlled shutdown of broker %d, %d partitions it still leads", self.broker_id,
                 broker_id, len(remaining))
        return remaining

    def take_log_dir_failures(self) -> set[int]:
        """The brokers whose log dir events were read since the last call (for the channel's ``ask_again``)."""
        brokers, self.log_dir_failures = self.log_dir_failures, set()
        return brokers

    def _read_log_dir_events(self, snap: Snapshot) -> None:
        """Kafka's processLogDirEventNotification: the broker ids of every notice, then each notice deleted."""
        names = [n for n in snap.log_dir_events if n.startswith(LogDirEventNotificationSequenceZNode.PREFIX)]
        brokers: set[int] = set()
        for name in names:
            path = f"{LogDirEventNotificationZNode.path()}/{name}"
            try:
                data, _ = self.store.get(path)
                brokers.add(LogDirEventNotificationSequenceZNode.decode(data, path))
            except NoNodeError:
                continue
            except ValueError as exc:
                log.warning("controller %d: unreadable log dir event %s skipped: %s", self.broker_id, name, exc)
        try:
            layout.delete_log_dir_event_notifications(self.store, names,
                                                      controller_epoch_zk_version=self.epoch_zk_version)
        except ControllerMovedError:
            self.moved_on()
            return
        failed = brokers & set(snap.brokers)
        if failed:
            log.info("controller %d: log dir failure on brokers %s: asking them which replicas are offline",
                     self.broker_id, sorted(failed))
            self.log_dir_failures |= failed

    def _move_offline_dir_replicas(self, snap: Snapshot) -> bool:
        """Replicas on offline log dirs go to OfflineReplica: another leader where one led (from the ISR's online
        members; unclean election per the topic's or broker's setting; else leader -1), out of the ISR."""
        wrote = False
        offline = self.offline_replicas.view()
        live = set(snap.brokers) - self.shutting_down
        for broker_id, tps in sorted(offline.items()):
            for topic, index in sorted(tps):
                seen = snap.states.get((topic, index))
                if not self.active or broker_id not in snap.brokers or seen is None or (
                        seen.leader != broker_id and broker_id not in seen.isr):
                    continue
                current = self._state_held_by(topic, index, broker_id)
                if current is None:
                    continue
                state, stat = current
                replicas = snap.assignments.get(topic, {}).get(index, [])

                def online(r: int, tp: tuple[str, int] = (topic, index)) -> bool:
                    return r in live and tp not in offline.get(r, ())

                isr = [r for r in state.isr if r != broker_id] or list(state.isr)
                leader = state.leader
                if leader == broker_id:
                    leader = next((r for r in replicas if r in isr and r != broker_id and online(r)), -1)
                    if leader < 0 and self._unclean_allowed(snap, topic):
                        leader = next((r for r in replicas if r != broker_id and online(r)), -1)
                        isr = [leader] if leader >= 0 else isr
                if (leader, isr) == (state.leader, state.isr):
                    continue  # the last member of the ISR, not leading: nothing to change
                new = PartitionState(leader=leader, leader_epoch=state.leader_epoch + 1, isr=isr,
                                     controller_epoch=self.epoch)
                if self._write_state(topic, index, new, stat.version):
                    log.info("controller %d: replica %d of %s-%d is on an offline log dir: leader %d, ISR %s "
                             "(leader epoch %d)", self.broker_id, broker_id, topic, index, leader, isr,
                             new.leader_epoch)
                    wrote = True
        return wrote

    def _state_held_by(self, topic: str, index: int, broker_id: int) -> tuple[PartitionState, Stat] | None:
        """The partition's state as ZooKeeper holds it now, while ``broker_id`` still leads it or is in its
        ISR (what controlled shutdown and a failed log dir take it out of); else None."""
        current = layout.get_partition_state(self.store, topic, index)
        if current is None or (current[0].leader != broker_id and broker_id not in current[0].isr):
            return None
        return current

    def follow_unclean_default(self, enabled: bool) -> None:
        """The broker's unclean.leader.election.enable changed (KIP-226): the default for topics without their own."""
        self.unclean_leader_election = enabled

    def _unclean_allowed(self, snap: Snapshot, topic: str) -> bool:
        unclean = snap.configs.get(topic, {}).get("unclean.leader.election.enable")
        return unclean == "true" if unclean is not None else self.unclean_leader_election

    def _delete_isr_change_notifications(self, snap: Snapshot) -> None:
        for name in snap.isr_changes:
            try:
                self.store.delete(f"{IsrChangeNotificationZNode.path()}/{name}")
            except NoNodeError:
                pass

    def _remove_dead_followers(self, snap: Snapshot) -> bool:
        live = set(snap.brokers)
        updates = [(topic, index, PartitionState(leader=state.leader, leader_epoch=state.leader_epoch + 1,
                                                 isr=[r for r in state.isr if r in live], controller_epoch=self.epoch))
                   for (topic, index), state in sorted(snap.states.items())
                   if state.leader in live and not all(r in live for r in state.isr)]
        written = self._write_states(snap, updates)
        for topic, index, new in written:
            log.info("controller %d removed dead replicas from the ISR of %s-%d: ISR %s (leader epoch %d)",
                     self.broker_id, topic, index, new.isr, new.leader_epoch)
        return bool(written)

    def _drop_non_replicas(self, snap: Snapshot) -> bool:
        """An ISR (or leader) naming a broker that is no longer a replica (a cancelled
        reassignment had added it) is cut back to the replicas, leader_epoch + 1."""
        wrote = False
        live = set(snap.brokers) - self.shutting_down
        for (topic, index), state in sorted(snap.states.items()):
            replicas = snap.assignments.get(topic, {}).get(index)
            if not self.active or not replicas or (
                    all(r in replicas for r in state.isr) and (state.leader < 0 or state.leader in replicas)):
                continue
            found = layout.get_partition_state(self.store, topic, index)
            if found is None:
                continue
            state, stat = found
            isr = [r for r in state.isr if r in replicas]
            leader = state.leader
            if leader >= 0 and leader not in replicas:
                leader = next((r for r in replicas if r in isr and r in live), -1)
            if not isr:
                continue  # nothing in sync among the replicas: leave it to the leader elections
            new = PartitionState(leader=leader, leader_epoch=state.leader_epoch + 1, isr=isr,
                                 controller_epoch=self.epoch)
            if self._write_state(topic, index, new, stat.version):
                log.info("controller %d: %s-%d back to its replicas %s: leader %d, ISR %s", self.broker_id, topic,
                         index, replicas, leader, isr)
                wrote = True
        return wrote

    def _write_state(self, topic: str, index: int, state: PartitionState, version: int) -> bool:
        try:
            layout.set_partition_state(self.store, topic, index, state, version,
                                       controller_epoch_zk_version=self.epoch_zk_version)
            return True
        except BadVersionError:
            return False  # someone changed it: the watch brings it back
        except ControllerMovedError:
            self.moved_on()
            return False

    def _delete_topics(self, snap: Snapshot) -> bool:
        """Topic deletion (``TopicDeletionManager``, without StopReplica): remove each topic's znodes and its
        deletion request in one fenced multi, all the topics' multis in one pipelined round; every broker drops
        its logs of the topic when its view no longer has it."""
        if not snap.deleting:
            return False
        try:
            deleted = layout.delete_topics_znodes(
                self.store, {t: list(snap.assignments.get(t, {})) for t in snap.deleting},
                controller_epoch_zk_version=self.epoch_zk_version)
        except ControllerMovedError:
            self.moved_on()
            return False
        for topic in deleted:
            log.info("controller %d deleted topic %s", self.broker_id, topic)
            snap.assignments.pop(topic, None)
        return bool(deleted)

    def _elect_offline_leaders(self, snap: Snapshot) -> bool:
        live = set(snap.brokers) - self.shutting_down
        offline = self.offline_replicas.view()
        updates: list[tuple[str, int, PartitionState]] = []
        for (topic, index), state in sorted(snap.states.items()):
            if state.leader in snap.brokers or not self.active:
                continue
            replicas = snap.assignments.get(topic, {}).get(index, [])
            off = {r for r, tps in offline.items() if (topic, index) in tps}  # replicas on failed log dirs
            isr = [r for r in state.isr if r in live and r not in off]
            leader = next((r for r in replicas if r in isr), -1)
            if leader < 0 and self._unclean_allowed(snap, topic):
                leader = next((r for r in replicas if r in live and r not in off), -1)
                isr = [leader]
            if leader < 0:
                if state.leader == -1:
                    continue  # already offline: until a replica in its ISR comes back
                # Kafka's removeReplicasFromIsr for the dead leader: no leader, the last ISR member stays
                isr = [r for r in state.isr if r != state.leader] or list(state.isr)
            updates.append((topic, index, PartitionState(leader=leader, leader_epoch=state.leader_epoch + 1,
                                                         isr=isr, controller_epoch=self.epoch)))
        written = self._write_states(snap, updates)
        for topic, index, new in written:
            if new.leader < 0:
                log.info("controller %d: %s-%d has no live replica in its ISR %s; offline (leader epoch %d)",
                         self.broker_id, topic, index, new.isr, new.leader_epoch)
            else:
                log.info("controller %d elected broker %d leader of %s-%d (leader epoch %d, ISR %s)", self.broker_id,
                         new.leader, topic, index, new.leader_epoch, new.isr)
        return bool(written)

    def _write_states(self, snap: Snapshot, updates: list[tuple[str, int, PartitionState]]
                      ) -> list[tuple[str, int, PartitionState]]:
        """Partition states written at once, each a compare-and-set against the zkVersion this view read (Kafka's
        controller updates leaders and ISRs from its cache the same way, in one pipelined round): those written,
        which this view now holds. One someone changed meanwhile is left alone: its watch brings it back."""
        if not updates or not self.active:
            return []
        try:
            outcomes = layout.set_partition_states(
                self.store, [(t, i, new, snap.state_versions.get((t, i), -1)) for t, i, new in updates],
                controller_epoch_zk_version=self.epoch_zk_version)
        except ControllerMovedError:
            self.moved_on()
            return []
        written = []
        for (topic, index, new), outcome in zip(updates, outcomes):
            if isinstance(outcome, Stat):
                snap.states[(topic, index)], snap.state_versions[(topic, index)] = new, outcome.version
                written.append((topic, index, new))
            elif not isinstance(outcome, (BadVersionError, NoNodeError)):
                raise outcome
        return written

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
        # a new controller takes the live brokers as it finds them (onControllerFailover)
        self.broker_epochs, self.bounced = {}, set()
        log.info("broker %d became controller with epoch %d", self.broker_id, self.epoch)

    def _create_missing_states(self, snap: Snapshot) -> bool:
        live = set(snap.brokers)
        missing: dict[str, dict[int, PartitionState]] = {}
        for topic, assignment in snap.assignments.items():
            for index, replicas in assignment.items():
                if (topic, index) in snap.states:
                    continue
                leader = next((r for r in replicas if r in live), -1)
                isr = [r for r in replicas if r in live] if leader >= 0 else list(replicas[:1])
                missing.setdefault(topic, {})[index] = PartitionState(leader=leader, leader_epoch=0, isr=isr,
                                                                      controller_epoch=self.epoch)
        if not missing:
            return False
        try:  # one fenced multi per topic, all of them in one pipelined round
            created = layout.create_topics_partition_states(self.store, missing,
                                                            controller_epoch_zk_version=self.epoch_zk_version)
        except ControllerMovedError:
            self.moved_on()
            return False
        for topic, indexes in created.items():
            for index in indexes:
                self.new_replicas.add(topic, index, snap.assignments[topic][index])
        wrote = any(created.values())
        if wrote:
            log.info("controller %d created the partition states of %d topics", self.broker_id,
                     sum(1 for indexes in created.values() if indexes))
        return wrote
