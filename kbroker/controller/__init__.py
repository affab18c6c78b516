"""The active controller (ZooKeeper mode): one broker wins the ``/controller`` election and drives the cluster's
partition states.

    controller.py       the Controller: election, partition and replica state changes, ISR notices, propagation
    channel.py          what it sends to brokers (LeaderAndIsr, StopReplica, UpdateMetadata)
    election.py         leader election rules (preferred, offline, unclean, controlled shutdown)
    reassignment.py     partition reassignment (KIP-455)
    zookeeper_mode.py   the controller's ZooKeeper-side wiring for a broker
"""
