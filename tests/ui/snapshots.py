"""Hand-built snapshots of a small cluster for the web app's fast tests: three brokers (broker 3 down), a topic
with an under-replicated partition and a non-preferred leader, an offline partition, a ZooKeeper-stored group and a
Kafka-stored one."""
from __future__ import annotations

from kbroker.ui.model import Broker, Commit, Group, LogDir, Member, Partition, Rates, Snapshot, Topic

T0 = 1_700_000_000_000


def cluster_snapshot(taken_ms: int = T0, *, log_end: int = 100, committed: int = 40,
                     rates: Rates | None = None) -> Snapshot:
    orders = Topic("orders", False, 2, (
        Partition("orders", 0, 1, (1, 2), (1, 2), 0, log_end, 4096),
        Partition("orders", 1, 1, (2, 1), (1,), 0, log_end, 2048),  # under-replicated, non-preferred, under min ISR
        Partition("orders", 2, -1, (3,), (), -1, -1, -1),  # offline
    ))
    offsets = Topic("__consumer_offsets", True, 1, (Partition("__consumer_offsets", 0, 2, (2,), (2,), 0, 7, 512),))
    dirs = (
        LogDir(1, "/data/k1", None, 6144, 10_000_000, 20_000_000, (("orders", 0, 4096), ("orders", 1, 2048))),
        LogDir(2, "/data/k2", None, 2560, None, None, (("orders", 0, 2048), ("__consumer_offsets", 0, 512))),
        LogDir(2, "/data/k2b", "KAFKA_STORAGE_ERROR", 0, None, None, ()),
    )
    groups = (
        Group("zk-group", "zookeeper", "Active", (), (("orders", 0, "zk-group_host-1"),)),
        Group("kafka-group", "kafka", "Stable",
              (Member("m-1", "client-a", "/127.0.0.1", (("orders", 0), ("orders", 1))),)),
    )
    commits = (
        Commit("zk-group", "zookeeper", "orders", 0, log_end, taken_ms - 1000),
        Commit("kafka-group", "kafka", "orders", 0, committed, taken_ms - 2000),
        Commit("kafka-group", "kafka", "orders", 1, committed, taken_ms - 2000),
    )
    brokers = (Broker(1, "127.0.0.1", 9091, None, True), Broker(2, "127.0.0.1", 9092, "r2", True),
               Broker(3, "127.0.0.1", 9093, None, False))
    return Snapshot(taken_ms, brokers, 1, (orders, offsets), dirs, groups, commits, rates)
