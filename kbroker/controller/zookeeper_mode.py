"""What only a broker of a ZooKeeper-mode cluster has (``handlers.context.ZooKeeperMode``), and how its
controller role follows the cluster: each snapshot of the ZooKeeper view goes to the controller (which acts only
when it is the active one), a changed ``unclean.leader.election.enable`` default is looked at at once
(apache/kafka ``core/src/main/scala/kafka/controller/KafkaController.scala``, ``enableDefaultUncleanLeaderElection``)
and ``auto.leader.rebalance.enable`` runs on the active controller only."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from kbroker.config.broker import BrokerConfig
from kbroker.controller.channel import ControllerChannel
from kbroker.controller.controller import Controller
from kbroker.metadata.cache import MetadataCache
from kbroker.metadata.zk_view import ClusterView, Snapshot


class RegisteredSession(Protocol):
    """The ZooKeeper session that keeps this broker registered (``kazoo_bridge.SessionManager``, which only the
    composition root imports)."""

    def stop(self, timeout: float = ...) -> None: ...


@dataclass
class ZooKeeperParts:
    controller: Controller
    cluster: ClusterView
    metadata: MetadataCache
    channel: ControllerChannel
    session: RegisteredSession

    async def on_snapshot(self, snap: Snapshot) -> None:
        # the controller's writes come back through the watches as the next snapshot
        await self.cluster.run_blocking(lambda: self.controller.on_snapshot(snap))
        if self.controller.active and snap.controller_id is None:
            # this view elected us: it was read before /controller was ours and may be missing brokers that
            # registered meanwhile; the next view (our /controller's watch brings it) is the first we send from
            return
        if self.controller.active:  # a bounced broker is left out of this view: dead first, then new (Kafka)
            self.channel.sync(self.controller.without_bounced(snap), self.controller.epoch)
            self.channel.ask_again(self.controller.take_log_dir_failures())  # KIP-112: which replicas are offline
        else:
            self.channel.stop()

    async def rebalance_leaders(self, percentage: int) -> None:
        if self.controller.active:
            snap = self.cluster.snapshot
            await self.cluster.run_blocking(lambda: self.controller.auto_rebalance(snap, percentage))

    def follow_unclean_default(self, config: BrokerConfig, changed: frozenset[str]) -> None:
        if "unclean.leader.election.enable" in changed:
            self.controller.follow_unclean_default(config.log.unclean_leader_election_enable)
            self.cluster.trigger()
