"""Topic administration without ZooKeeper: the embedded store under the first log dir, this broker the
controller and the leader of every partition (see ``topic_admin``)."""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from kbroker import errors
from kbroker.config.broker import BrokerConfig
from kbroker.log import TopicPartition
from kbroker.log.log_manager import HOSTING_CHUNK
from kbroker.metadata.zk_view import LiveBroker
from kbroker.replicas.replica_manager import ReplicaManager
from kbroker.topics.admin import TopicAdmin
from kbroker.topics.table import PartitionView, TopicInfo, topic_uuid
from kbroker.topics.znodes import write_new_partitions
from zk_compat import layout
from zk_compat.store import MetadataStore
from zk_compat.znodes import PartitionState

log = logging.getLogger(__name__)


class SingleNodeTopics(TopicAdmin):
    """No ZooKeeper: this broker is the controller and the leader of every partition."""

    def __init__(self, config: BrokerConfig, store: MetadataStore, replicas: ReplicaManager,
                 endpoint: Callable[[], LiveBroker]) -> None:
        super().__init__(config, store, replicas)
        self.endpoint = endpoint  # where this broker listens, known once its listeners are bound

    def live_brokers(self) -> list[LiveBroker]:
        return [self.endpoint()]

    def controller_id(self) -> int:
        return self.broker_id

    def partition_state(self, topic: str, index: int) -> PartitionState:
        partition = self.replicas.partitions.get(TopicPartition(topic, index))
        if partition is None or partition.log.offline:
            return PartitionState(leader=-1, leader_epoch=0, isr=[], controller_epoch=1)
        return PartitionState(leader=partition.leader_id, leader_epoch=partition.leader_epoch,
                              isr=list(partition.isr), controller_epoch=1)

    def metadata_topics(self) -> list[str]:
        return sorted(n for n in self.topics if self.metadata_partitions(n) is not None)

    def metadata_partitions(self, topic: str) -> list[PartitionView] | None:
        """A topic whose partitions are still being hosted (``_register_async``) is not shown yet; a
        partition on an offline log dir has no leader and this broker as its offline replica."""
        info = self.topics.get(topic)
        if info is None:
            return None
        views = []
        for index in sorted(info.assignment):
            partition = self.replicas.partitions.get(TopicPartition(topic, index))
            if partition is None:
                return None
            offline = partition.log.offline
            views.append(PartitionView(index, -1 if offline else partition.leader_id, partition.leader_epoch,
                                       list(info.assignment[index]), list(partition.isr),
                                       [self.broker_id] if offline else []))
        return views

    def load(self) -> None:
        """The topics in the store; a deletion the last run did not finish is finished first."""
        with errors.translate_zk():
            doomed = set(layout.get_topics_marked_for_deletion(self.store))
            for name in layout.get_all_topics(self.store):
                assignment = layout.get_topic_assignment(self.store, name)
                if assignment is None:
                    continue
                if name in doomed:
                    self._finish_deletion(name, assignment.partitions)
                    continue
                configs = layout.get_entity_config(self.store, "topics", name)
                self.topics[name] = TopicInfo(name, {p: list(r) for p, r in assignment.partitions.items()},
                                              dict(configs), topic_uuid(assignment.topic_id))
        for name, info in self.topics.items():
            self.log_manager.topic_overrides[name] = info.configs

    def host_all(self) -> None:
        for name, info in self.topics.items():
            for index in info.assignment:
                self._host(TopicPartition(name, index))

    def _host(self, tp: TopicPartition) -> None:
        """Host as leader and only replica, and say so in the partition state znode."""
        partition = self.replicas.host_as_sole_replica(tp)
        state = PartitionState(leader=self.broker_id, leader_epoch=partition.leader_epoch,
                               isr=[self.broker_id], controller_epoch=1)
        with errors.translate_zk():
            current = layout.get_partition_state(self.store, tp.topic, tp.partition)
            if current is None:
                layout.create_partition_state(self.store, tp.topic, tp.partition, state)
            elif current[0] != state:
                layout.set_partition_state(self.store, tp.topic, tp.partition, state, current[1].version)

    def _register(self, info: TopicInfo) -> TopicInfo:
        self._store_topic(info)
        for index in info.assignment:
            self._host(TopicPartition(info.name, index))
        log.info("created topic %s with %d partitions", info.name, len(info.assignment))
        return info

    async def _register_async(self, info: TopicInfo) -> TopicInfo:
        """Host the new partitions giving the loop back every ``HOSTING_CHUNK``: each costs a directory,
        three files and a checkpoint (a 1,000-partition topic took seconds, every connection waiting). The
        topic's other partitions answer LEADER_NOT_AVAILABLE (retriable) meanwhile; a deletion stops it."""
        self._store_topic(info)
        for n, index in enumerate(info.assignment, start=1):
            if self.topics.get(info.name) is not info or self.stopping:
                return info
            self._host(TopicPartition(info.name, index))
            if n % HOSTING_CHUNK == 0:
                await asyncio.sleep(0)
        log.info("created topic %s with %d partitions", info.name, len(info.assignment))
        return info

    def _store_topic(self, info: TopicInfo) -> None:
        with errors.translate_zk():
            topic_id = layout.create_topic(self.store, info.name, info.assignment, info.configs)
        self._created(info, topic_id)

    async def delete(self, name: str) -> None:
        info = self._deletable(name)
        with errors.translate_zk():
            layout.mark_topic_for_deletion(self.store, name)
        del self.topics[name]
        self._finish_deletion(name, info.assignment)
        self.log_manager.topic_overrides.pop(name, None)
        log.info("deleted topic %s", name)

    def _finish_deletion(self, name: str, assignment: dict[int, list[int]]) -> None:
        """Logs first, then the znodes (the deletion marker last), so a crash in between resumes."""
        self.replicas.delete_partitions(name, assignment)
        with errors.translate_zk():
            layout.delete_topic_znodes(self.store, name)

    async def create_partitions(self, name: str, count: int, assignments: list[list[int]] | None = None,
                                validate_only: bool = False) -> None:
        info, extra = self._new_partitions(name, count, assignments)
        if validate_only:
            return
        write_new_partitions(self.store, name, len(info.assignment), extra)
        info.assignment.update(extra)
        for index in extra:
            self._host(TopicPartition(name, index))

    async def alter_configs(self, name: str, configs: dict[str, str], validate_only: bool = False) -> None:
        info, effective = self._existing(name), self._effective(configs)
        if validate_only:
            return
        with errors.translate_zk():
            layout.change_entity_config(self.store, "topics", name, configs)
        self._configs_changed(info, configs, effective)
