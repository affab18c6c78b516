"""Kafka's ZooKeeper-mode coordination data, independent of how ZooKeeper is reached.

* ``znodes``: one class per znode of Kafka's layout (paths, byte-exact JSON, decoders).
* ``store``: the ``MetadataStore`` Protocol (ZooKeeper's data model) the broker codes against.
* ``embedded``: an in-process ``MetadataStore`` persisted under the first log dir.
* ``layout``: Kafka's operations on that layout (registration, election, topics, configs, ...).
* ``assignment``: replica assignment for new topics and partitions.
* ``errors``: Kafka's refusals of those admin operations, each with its Kafka error code.
* ``paths``: path validation and arithmetic, node data checks, ``zookeeper.connect`` chroots.

``kazoo_bridge`` provides the same ``MetadataStore`` over a real ZooKeeper ensemble.
"""
