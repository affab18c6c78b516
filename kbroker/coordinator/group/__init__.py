"""Consumer-group coordinator: classic group membership, committed offsets, and their
persistence in ``__consumer_offsets``.

``GroupCoordinator`` (coordinator.py) is what request handlers call; ``Group`` (group.py) is one
group's state machine; ``OffsetsLog`` (offsets_log.py) holds Kafka's record formats and the
replay of a partition. The coordinator schedules its deadlines through a ``kbroker.timers.Timer``.
"""
from kbroker.coordinator.group.coordinator import NO_OFFSET, GroupCoordinator
from kbroker.coordinator.group.group import (
                                       GroupConfig,
                                       GroupDescription,
                                       GroupOverview,
                                       GroupState,
                                       JoinMember,
                                       JoinResult,
                                       LeaveMemberResult,
                                       LeaveResult,
                                       MemberDescription,
                                       SyncResult,
)
from kbroker.coordinator.group.offsets_log import OffsetAndMetadata, OffsetsLog, partition_for

__all__ = [
    "GroupCoordinator", "NO_OFFSET", "GroupConfig", "GroupDescription", "GroupOverview", "GroupState",
    "JoinMember", "JoinResult", "LeaveMemberResult", "LeaveResult", "MemberDescription", "SyncResult",
    "OffsetAndMetadata", "OffsetsLog", "partition_for",
]
