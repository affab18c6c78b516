"""The topic table and its administration (Kafka's AdminZkClient and what the controller and KafkaApis ask of it):

    admin.py         ``TopicAdmin``: the API the handlers and coordinators use (create, delete, partitions, configs)
    single_node.py   the single broker's topic table, stored in the embedded store
    zookeeper.py     ZooKeeper mode's: created in ZooKeeper, hosted when the controller says
    table.py         one topic's entry and one partition as Metadata answers it
    placement.py     Kafka's checks and replica placement (pure functions)
    znodes.py        compare-and-set topic znode writes
    visibility.py    what an admin answer waits for (the change visible in the brokers' metadata)
    internal.py      __consumer_offsets and __transaction_state: their configs, their creation

It sits above ``kbroker.replicas`` (a topic admin hosts partitions through the replica manager), which only sees
it through the ``TopicTable`` protocol."""
