"""Transactions (KIP-98): the transaction coordinator and its ``__transaction_state`` log, and the
commit/abort markers that close a transaction in every partition it wrote to.

    markers.py      control batches (COMMIT/ABORT markers) and reading their type back
    state_log.py    ``__transaction_state`` records (Kafka's TransactionLog key/value schemas)
    coordinator.py  the state machine per transactional id, driven by the Txn requests

The partition side (open transactions, last stable offset, aborted transactions for
read_committed fetches) is ``kbroker.log.producer_state`` and ``kbroker.replication.partition``.
"""
