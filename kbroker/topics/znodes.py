"""Compare-and-set writes to a topic's znode (/brokers/topics/<t>) that both modes make the same way."""
from __future__ import annotations

from kbroker import errors
from zk_compat import layout
from zk_compat.store import BadVersionError, MetadataStore


def write_new_partitions(store: MetadataStore, name: str, expected: int, extra: dict[int, list[int]]) -> None:
    """Add ``extra`` partitions to the topic znode as it is now, if it still has ``expected`` of them (a
    reassignment's adding/removing replicas kept), compare-and-set so a controller's rewrite in between is
    not lost."""
    for _ in range(5):
        with errors.translate_zk():
            found = layout.get_topic_assignment_with_version(store, name)
        if found is None:
            raise errors.UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        current, version = found
        if len(current.partitions) != expected:
            raise errors.InvalidPartitionsError(f"topic {name} now has {len(current.partitions)} partitions; ask again")
        current.partitions.update(extra)
        try:
            with errors.translate_zk():
                layout.set_topic_assignment(store, name, current, version)
            return
        except BadVersionError:
            continue
    raise errors.ReassignmentInProgressError(f"topic {name} kept changing while partitions were added")
