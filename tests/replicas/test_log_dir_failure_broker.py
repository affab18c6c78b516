"""The broker's side of a failed log dir (KIP-112, Kafka's ReplicaManager.handleLogDirFailure), with real logs in
two dirs and the embedded metadata store: one log dir event notification per failed dir (not per partition, not
again while it stays failed; a dir failed at startup is announced once ZooKeeper is there), and LeaderAndIsr answers
KAFKA_STORAGE_ERROR for the replicas in the failed dir only."""
from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest

from kbroker import errors
from kbroker.config.broker import load_config
from kbroker.log import LogManager, TopicPartition
from kbroker.replicas.replica_manager import ReplicaManager
from kbroker.replication.purgatory import Purgatory
from zk_compat import layout
from zk_compat.embedded import EmbeddedServer
from zk_compat.znodes import LogDirEventNotificationZNode


class _Broker:
    def __init__(self, tmp_path: Path, dirs: list[Path]) -> None:
        config = load_config(overrides=[f"log.dirs={','.join(map(str, dirs))}", "broker.id=2"])
        self.log_manager = LogManager(config.log_dirs, config.log, cleaner_thread=False,
                                      on_dir_offline=lambda d, tps: self.replicas.log_dir_failures.dir_offline(d, tps))
        self.purgatory = Purgatory()
        self.replicas = ReplicaManager(2, config, self.log_manager, self.purgatory)
        self.server = EmbeddedServer(None)
        self.store = self.server.connect()
        layout.ensure_persistent_paths(self.store)
        self.log_manager.startup()

    async def enable(self) -> None:
        loop = asyncio.get_running_loop()

        async def run_blocking(fn):
            return await loop.run_in_executor(None, fn)
        self.replicas.enable_replication(self.store, run_blocking, lambda topic, index: True)

    def lead(self, topic: str, index: int, is_new: bool = False) -> None:
        p = SimpleNamespace(partition_index=index, controller_epoch=1, leader=2, leader_epoch=0, isr=[2, 1],
                            zk_version=0, replicas=[2, 1], adding_replicas=[], removing_replicas=[], is_new=is_new)
        self.replicas.become_leader_or_follower(topic, p, None)

    def notices(self) -> list[bytes]:
        names = sorted(self.store.get_children(LogDirEventNotificationZNode.path()))
        return [self.store.get(f"{LogDirEventNotificationZNode.path()}/{n}")[0] for n in names]

    def close(self) -> None:
        self.replicas.stop()
        self.purgatory.close()
        self.log_manager.shutdown()
        self.store.close()
        self.server.close()


async def _settle(broker: _Broker) -> None:
    for _ in range(50):  # the notice is written on an executor thread
        await asyncio.sleep(0.01)
        if not broker.replicas.log_dir_failures._tasks:
            return


def test_one_notice_per_failed_dir_and_storage_errors_for_its_replicas(tmp_path: Path):
    dirs = [tmp_path / "a", tmp_path / "b"]

    async def main() -> None:
        broker = _Broker(tmp_path, dirs)
        try:
            await broker.enable()
            for index in range(4):
                broker.lead("t", index, is_new=True)
            where = {i: broker.log_manager.logs[TopicPartition("t", i)].directory.parent for i in range(4)}
            failing = where[0]
            lost = [i for i in range(4) if where[i] == failing]
            kept = [i for i in range(4) if where[i] != failing]
            assert len(lost) == 2 and len(kept) == 2  # the fewest-partitions rule spreads them
            failing.rename(failing.with_name("gone"))
            failing.write_bytes(b"")  # a dir turned into a file: the checkpoint cannot be written
            broker.log_manager.checkpoint()
            await _settle(broker)
            assert broker.notices() == [b'{"version":1,"broker":2,"event":1}']
            broker.log_manager.checkpoint()  # still failed: no second notice
            await _settle(broker)
            assert len(broker.notices()) == 1
            for i in lost:
                with pytest.raises(errors.KafkaStorageError) as raised:
                    broker.lead("t", i)
                assert raised.value.code == 56
            for i in kept:
                broker.lead("t", i)  # the other dir keeps serving
                assert broker.replicas.partition(TopicPartition("t", i)) is not None
        finally:
            broker.close()
    asyncio.run(main())


def test_a_dir_failed_at_startup_is_announced_once_zookeeper_is_there(tmp_path: Path):
    (tmp_path / "file").write_bytes(b"")
    dirs = [tmp_path / "a", tmp_path / "file" / "logs"]  # cannot be created: offline from the start

    async def main() -> None:
        broker = _Broker(tmp_path, dirs)
        try:
            assert broker.notices() == []
            await broker.enable()
            await _settle(broker)
            assert broker.notices() == [b'{"version":1,"broker":2,"event":1}']
        finally:
            broker.close()
    asyncio.run(main())


def test_with_a_dir_offline_only_a_new_replica_gets_a_new_log(tmp_path: Path):
    """Kafka's getOrCreateLog: a replica whose log is not found may have been on the failed dir; an empty log
    in its place would lose what it held (and lead with it), so only a replica the controller calls new gets one."""
    (tmp_path / "file").write_bytes(b"")
    dirs = [tmp_path / "a", tmp_path / "file" / "logs"]

    async def main() -> None:
        broker = _Broker(tmp_path, dirs)
        try:
            await broker.enable()
            with pytest.raises(errors.KafkaStorageError) as raised:
                broker.lead("t", 0)
            assert str(raised.value) == f"Can not create log for t-0 because log directories {dirs[1]} are offline"
            assert TopicPartition("t", 0) not in broker.log_manager.logs
            broker.lead("t", 1, is_new=True)  # a new partition is created in the online dir
            assert broker.log_manager.logs[TopicPartition("t", 1)].directory.parent == dirs[0]
            broker.lead("t", 1)  # and is known from then on
        finally:
            broker.close()
    asyncio.run(main())
