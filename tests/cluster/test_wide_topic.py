"""A 600-partition topic on a 3-broker cluster (its own cluster: the module fixture of conftest.py)."""
from __future__ import annotations

import threading
import time

from confluent_kafka.admin import AdminClient, NewTopic

from .conftest import wait_until


def test_a_wide_topic_is_hosted_without_stalling_the_brokers(cluster):
    """LeaderAndIsr for 600 new partitions makes each broker create 600 logs (seconds of file creation); they
    give the event loop back every few partitions, so each broker keeps answering while it hosts them."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    watchers = {i: AdminClient({"bootstrap.servers": b.bootstrap}) for i, b in cluster.brokers.items()}
    for w in watchers.values():
        w.list_topics(timeout=15)
    latencies: dict[int, list[tuple[float, float]]] = {i: [] for i in watchers}
    stop = threading.Event()

    def ask(i: int) -> None:
        while not stop.is_set():
            sent = time.monotonic()
            watchers[i].list_topics(topic="not-the-wide-one", timeout=30)
            latencies[i].append((sent, time.monotonic() - sent))
            time.sleep(0.01)

    threads = [threading.Thread(target=ask, args=(i,)) for i in watchers]
    for t in threads:
        t.start()
    try:
        started = time.monotonic()
        admin.create_topics([NewTopic("wide", num_partitions=600, replication_factor=3)])["wide"].result(60)

        def hosted():
            md = admin.list_topics(topic="wide", timeout=15).topics["wide"]
            return len(md.partitions) == 600 and all(p.leader >= 0 and len(p.isrs) == 3
                                                     for p in md.partitions.values())
        wait_until(hosted, timeout=120, message="600 partitions led with full ISRs")
        took = time.monotonic() - started
    finally:
        stop.set()
        for t in threads:
            t.join()
    for i, seen in latencies.items():
        during = [lat for sent, lat in seen if started <= sent <= started + took]
        assert len(during) >= 5, (i, took, seen[-5:])
        assert max(during) < max(0.5, 0.1 * took), (i, took, sorted(during)[-5:])  # was 1.1 s of 4.5 s
