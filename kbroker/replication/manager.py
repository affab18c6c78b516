"""Role changes of the partitions this broker hosts, from the controller's LeaderAndIsr requests:
become leader (stop fetching, own the ISR) or follower (fetch from the leader, after truncating
by leader epoch). A state older (by zkVersion) than the one this broker already has is ignored:
requests can cross the leader's own ISR writes."""
from __future__ import annotations

import logging

from kbroker.cluster import LiveBroker
from kbroker.partition import Partition
from kbroker.replication.fetcher import ReplicaFetcherManager
from kbroker.replication.isr import IsrManager
from zk_compat.znodes import PartitionState

log = logging.getLogger(__name__)


class Replication:
    def __init__(self, broker) -> None:
        self.broker = broker
        self.fetchers = ReplicaFetcherManager(broker)
        self.isr = IsrManager(broker)

    def start(self) -> None:
        self.isr.start()

    def stop(self) -> None:
        self.isr.stop()
        self.fetchers.stop()

    def apply(self, partition: Partition, state: PartitionState, zk_version: int, replicas: list[int],
              leader: LiveBroker | None) -> None:
        if zk_version < partition.zk_version:
            return  # older than what this broker wrote or saw: the newer view is on its way
        me = self.broker.broker_id
        if state.leader == me:
            if partition.become_leader(state.leader_epoch, list(state.isr), list(replicas), zk_version,
                                       state.controller_epoch):
                self.fetchers.unfollow(partition.tp)
                log.info("%s: leader at epoch %d, ISR %s, log end %d, high watermark %d", partition.tp,
                         state.leader_epoch, state.isr, partition.log.log_end_offset, partition.high_watermark)
                self._coordinator_moved(partition, True)
            self.broker.on_append(partition)  # acks=all waiters look at the new ISR
            return
        was_leader = partition.is_leader
        changed = partition.become_follower(state.leader, state.leader_epoch, list(state.isr), list(replicas),
                                            zk_version, state.controller_epoch)
        if was_leader:
            self.broker.on_append(partition)  # waiting produces learn they lost the leadership
            self._coordinator_moved(partition, False)
        if leader is None:
            self.fetchers.unfollow(partition.tp)
        elif changed or self.fetchers.following(partition.tp) != leader.id:
            log.info("%s: follower of %d at epoch %d (log end %d)", partition.tp, state.leader, state.leader_epoch,
                     partition.log.log_end_offset)
            self.fetchers.follow(partition, leader)

    def forget(self, partition: Partition) -> None:
        self.fetchers.unfollow(partition.tp)

    def _coordinator_moved(self, partition: Partition, leader: bool) -> None:
        """The group and transaction coordinators follow their internal topics' leaderships."""
        from kbroker.coordinator.bridge import OFFSETS_TOPIC
        from kbroker.txn.bridge import TRANSACTION_TOPIC
        if partition.tp.topic == OFFSETS_TOPIC and self.broker.coordinator is not None:
            self.broker.coordinator.leadership_changed(partition.tp.partition, leader)
        elif partition.tp.topic == TRANSACTION_TOPIC and self.broker.transactions is not None:
            self.broker.transactions.leadership_changed(partition.tp.partition, leader, partition.leader_epoch)
