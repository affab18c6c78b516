"""Producer ids for idempotent and transactional producers, as Kafka allocates them: each broker
claims blocks of 1000 ids from ``/latest_producer_id_block`` (compare-and-set, so two brokers never
hold the same block) and hands them out one by one."""
from __future__ import annotations

from collections.abc import Iterator

from kbroker import errors
from zk_compat import layout
from zk_compat.store import MetadataStore


class ProducerIdAllocator:
    def __init__(self, store: MetadataStore, broker_id: int) -> None:
        self.store = store
        self.broker_id = broker_id
        self._ids: Iterator[int] = iter(())

    def __call__(self) -> int:
        for pid in self._ids:
            return pid
        with errors.translate_zk():
            block = layout.claim_producer_id_block(self.store, self.broker_id)
        self._ids = iter(range(block.block_start, block.block_end + 1))
        return next(self._ids)
