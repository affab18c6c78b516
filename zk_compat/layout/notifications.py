"""Notifications brokers write for the controller: ISR changes and log dir failures.
"""
from __future__ import annotations

from collections.abc import Iterable

from zk_compat.layout.fencing import fenced_multi
from zk_compat.store import (
    DeleteOp,
    MetadataStore,
    NoNodeError,
)
from zk_compat.znodes import (
    IsrChangeNotificationSequenceZNode,
    LogDirEventNotificationSequenceZNode,
    LogDirEventNotificationZNode,
)

# notifications written by brokers

def create_isr_change_notification(store: MetadataStore, partitions: Iterable[tuple[str, int]]) -> str:
    return store.create(IsrChangeNotificationSequenceZNode.create_path(),
                        IsrChangeNotificationSequenceZNode.encode(partitions), sequence=True, makepath=True)


def create_log_dir_event_notification(store: MetadataStore, broker_id: int) -> str:
    return store.create(LogDirEventNotificationSequenceZNode.create_path(),
                        LogDirEventNotificationSequenceZNode.encode(broker_id), sequence=True, makepath=True)


def delete_log_dir_event_notifications(store: MetadataStore, names: Iterable[str], *,
                                       controller_epoch_zk_version: int | None = None) -> None:
    """The controller's cleanup of the notices it handled (KafkaZkClient.deleteLogDirEventNotifications): one
    fenced delete each, any version; one already gone is no error. ControllerMovedError when the epoch moved."""
    for name in names:
        path = f"{LogDirEventNotificationZNode.path()}/{name}"
        try:
            fenced_multi(store, [DeleteOp(path)], controller_epoch_zk_version)
        except NoNodeError:
            pass
