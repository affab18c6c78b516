"""The replica manager takes the controller's requests as Kafka's ReplicaManager does (becomeLeaderOrFollower,
stopReplicas, the controller epoch check): real logs, the embedded metadata store, no network. The handlers only
authorize and answer (tests/cluster covers the same through real brokers and a real controller)."""
from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

from kbroker import errors
from kbroker.config.broker import load_config
from kbroker.log import LogManager, TopicPartition
from kbroker.replicas.replica_manager import ReplicaManager
from kbroker.replication.purgatory import Purgatory
from zk_compat import layout
from zk_compat.embedded import EmbeddedServer

BROKER = 2


def _state(index: int, leader: int, leader_epoch: int) -> SimpleNamespace:
    return SimpleNamespace(partition_index=index, controller_epoch=1, leader=leader, leader_epoch=leader_epoch,
                           isr=[2, 1], zk_version=leader_epoch, replicas=[2, 1], adding_replicas=[],
                           removing_replicas=[], is_new=True)


def test_controller_epochs_leader_and_isr_and_stop_replica(tmp_path: Path) -> None:
    config = load_config(overrides=[f"log.dirs={tmp_path / 'logs'}", f"broker.id={BROKER}"])
    log_manager = LogManager(config.log_dirs, config.log, cleaner_thread=False)
    server = EmbeddedServer(None)
    store = server.connect()
    layout.ensure_persistent_paths(store)
    log_manager.startup()

    async def main() -> None:
        purgatory = Purgatory()
        replicas = ReplicaManager(BROKER, config, log_manager, purgatory)
        try:
            assert not replicas.heard_from_controller(1), "a single broker hears from no controller"

            async def run_blocking(fn):
                return await asyncio.get_running_loop().run_in_executor(None, fn)
            replicas.enable_replication(store, run_blocking, lambda topic, index: True)
            assert replicas.heard_from_controller(3)
            assert not replicas.heard_from_controller(2), "an older controller is stale"
            assert replicas.heard_from_controller(3) and replicas.controller_epoch == 3

            # 40 partitions: more than one chunk, each hosted and led here
            states = [("t", _state(i, BROKER, 0)) for i in range(40)]
            results = await replicas.apply_leader_and_isr(3, states, {})
            assert results == [("t", i, 0) for i in range(40)]
            assert all(replicas.leader(TopicPartition("t", i)).leader_epoch == 0 for i in range(40))
            # a partition not assigned here, and a request of a controller older than the newest heard from
            [(_, _, code)] = await replicas.apply_leader_and_isr(3, [("u", SimpleNamespace(
                **{**vars(_state(0, 1, 0)), "replicas": [1, 3], "isr": [1, 3]}))], {})
            assert code == errors.UnknownTopicOrPartitionError.code
            replicas.heard_from_controller(4)
            assert await replicas.apply_leader_and_isr(3, [("t", _state(0, BROKER, 1))], {}) == [
                ("t", 0, errors.StaleControllerEpochError.code)]

            # StopReplica v3 (KIP-570): a leader epoch no newer than the replica's is fenced; -1 (v0-2) stops
            stops = [("t", 0, False, 0), ("t", 1, True, 1), ("t", 2, False, -1)]
            assert replicas.stop_replicas(stops) == [("t", 0, errors.FencedLeaderEpochError.code), ("t", 1, 0),
                                                     ("t", 2, 0)]
            assert TopicPartition("t", 0) in replicas.partitions
            assert TopicPartition("t", 1) not in replicas.partitions and TopicPartition("t", 1) not in log_manager.logs
            assert TopicPartition("t", 2) not in replicas.partitions and TopicPartition("t", 2) in log_manager.logs
        finally:
            replicas.stop()
            purgatory.close()

    try:
        asyncio.run(main())
    finally:
        log_manager.shutdown()
        store.close()
        server.close()
