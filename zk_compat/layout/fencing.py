"""Controller writes fenced by ``/controller_epoch``'s zkVersion, as every controller write in Kafka is.
"""
from __future__ import annotations

from collections.abc import Sequence

from zk_compat.store import (
    CheckVersionOp,
    MetadataStore,
    MetadataStoreError,
    Op,
    OpResult,
)
from zk_compat.znodes import (
    ControllerEpochZNode,
)


class ControllerMovedError(MetadataStoreError):
    """The ``/controller_epoch`` check failed: another broker is controller now (Kafka's
    ControllerMovedException). The caller must resign."""


# fencing

def fenced_multi(store: MetadataStore, ops: Sequence[Op], controller_epoch_zk_version: int | None) -> list[OpResult]:
    """Run ``ops`` as one multi, preceded by ``check(/controller_epoch, version)`` when a version
    is given (every controller write in Kafka is fenced this way). A failed check raises
    ControllerMovedError; a failing op raises its own error with ``failed_op_index`` relative to
    ``ops``. Returns the results of ``ops``."""
    if controller_epoch_zk_version is None:
        return store.multi(ops)
    try:
        results = store.multi([CheckVersionOp(ControllerEpochZNode.path(), controller_epoch_zk_version), *ops])
    except MetadataStoreError as exc:
        if exc.failed_op_index == 0:
            raise ControllerMovedError(
                f"controller epoch zkVersion {controller_epoch_zk_version} is stale ({exc}); "
                f"another broker is controller") from exc
        if exc.failed_op_index is not None:
            exc.failed_op_index -= 1
            exc.results = exc.results[1:] if exc.results else exc.results
        raise
    return results[1:]


def fenced_multi_pipelined(store: MetadataStore, batches: Sequence[Sequence[Op]],
                           controller_epoch_zk_version: int) -> list[list[OpResult] | MetadataStoreError]:
    """``fenced_multi`` for many independent multis sent at once (``MetadataStore.multi_pipelined``): each outcome
    is its results or its own error (``failed_op_index`` relative to its ops). Raises ControllerMovedError if
    any failed the fence: none of those applied, and the caller must resign."""
    check = CheckVersionOp(ControllerEpochZNode.path(), controller_epoch_zk_version)
    outcomes = store.multi_pipelined([[check, *ops] for ops in batches])
    results: list[list[OpResult] | MetadataStoreError] = []
    for outcome in outcomes:
        if isinstance(outcome, MetadataStoreError):
            if outcome.failed_op_index == 0:
                raise ControllerMovedError(f"controller epoch zkVersion {controller_epoch_zk_version} is stale "
                                           f"({outcome}); another broker is controller") from outcome
            if outcome.failed_op_index is not None:
                outcome.failed_op_index -= 1
                outcome.results = outcome.results[1:] if outcome.results else outcome.results
            results.append(outcome)
        else:
            results.append(outcome[1:])
    return results
