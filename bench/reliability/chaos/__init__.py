"""The chaos harness (issue 14): a real ZooKeeper and N kbroker processes under a workload of idempotent,
transactional and consumer-group clients, while faults are injected one at a time; checks at the end.
Run it with ``python -m bench.reliability.chaos``."""
