"""Replication (ZooKeeper mode): followers fetch from leaders, leaders keep the ISR and the high
watermark, acks=all waits until the ISR has a batch.

    client.py           an asynchronous connection from one broker to another (Kafka protocol)
    fetcher.py          the follower side: one fetch loop per leader, truncation by leader epoch
    isr.py              the leader side's ISR changes, written to ZooKeeper first
    delayed_produce.py  acks=all requests waiting in the purgatory for the high watermark

The leader side of a follower's Fetch (its fetch offset is its log end offset) lives in
``kbroker.handlers.fetch``; the bookkeeping per partition in ``kbroker.partition``.
"""
