"""Consumer-group coordinator: classic group membership, committed offsets, and their
persistence in ``__consumer_offsets``.

``GroupCoordinator`` (coordinator.py) is what request handlers call; ``Group`` (group.py) is one
group's state machine; ``OffsetsLog`` (offsets_log.py) holds Kafka's record formats and the
replay of a partition; timer.py has the injectable deadlines.
"""
from kbroker.coordinator.coordinator import NO_OFFSET, GroupCoordinator
from kbroker.coordinator.group import (GroupConfig, GroupDescription, GroupOverview, GroupState, JoinMember,
                                       JoinResult, LeaveMemberResult, LeaveResult, MemberDescription, SyncResult)
from kbroker.coordinator.offsets_log import OffsetAndMetadata, OffsetsLog, java_string_hash, partition_for
from kbroker.coordinator.timer import LoopTimer, Timer, WheelTimer, wall_clock_ms

__all__ = [
    "GroupCoordinator", "NO_OFFSET", "GroupConfig", "GroupDescription", "GroupOverview", "GroupState",
    "JoinMember", "JoinResult", "LeaveMemberResult", "LeaveResult", "MemberDescription", "SyncResult",
    "OffsetAndMetadata", "OffsetsLog", "java_string_hash", "partition_for", "LoopTimer", "Timer", "WheelTimer",
    "wall_clock_ms",
]
