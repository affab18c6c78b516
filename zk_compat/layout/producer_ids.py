"""Producer id blocks claimed from ``/latest_producer_id_block``.
"""
from __future__ import annotations

from zk_compat.layout.znode_helpers import ensure_path
from zk_compat.store import (
    BadVersionError,
    MetadataStore,
    NoNodeError,
)
from zk_compat.znodes import (
    ProducerIdBlock,
    ProducerIdBlockZNode,
)

# producer ids

def claim_producer_id_block(store: MetadataStore, broker_id: int,
                            block_size: int = ProducerIdBlockZNode.BLOCK_SIZE) -> ProducerIdBlock:
    """Claim the next block of producer ids: read ``/latest_producer_id_block``, write the block
    after it with a conditional set on the version just read, retry if another broker won."""
    path = ProducerIdBlockZNode.path()
    while True:
        try:
            data, stat = store.get(path)
        except NoNodeError:
            ensure_path(store, path)
            continue
        last = ProducerIdBlockZNode.decode(data)
        start = 0 if last is None else last.block_end + 1
        if start > (1 << 63) - 1 - block_size:
            raise RuntimeError("producer ids are exhausted (the next block would pass 2^63-1)")
        block = ProducerIdBlock(broker_id, start, start + block_size - 1)
        try:
            store.set(path, ProducerIdBlockZNode.encode(block), stat.version)
            return block
        except BadVersionError:
            continue
