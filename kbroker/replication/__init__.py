"""Replication (ZooKeeper mode): followers fetch from leaders, leaders keep the ISR and the high
watermark, acks=all waits until the ISR has a batch.

    fetcher.py          the follower side: one fetch loop per leader, truncation by leader epoch
    isr.py              the leader side's ISR changes, written to ZooKeeper first
    fetch_read.py       a Fetch's read of the logs led here (Kafka's readFromLocalLog)
    delayed.py          the delayed operations: acks=all produces waiting for the high watermark, fetches for min_bytes
    throttle.py         the replication throttles (KIP-73): leader, follower and log-dir-move byte-rate quotas

A fetcher's connection to its leader is a ``kbroker.interbroker.client.BrokerConnection``.
``kbroker.replicas.replica_manager`` owns these: it makes partitions leaders or followers (LeaderAndIsr), records
a follower's fetch offset as its log end offset, and parks acks=all answers and fetches waiting for min_bytes.
The bookkeeping per partition is in ``kbroker.replication.partition``.
"""
