"""Kafka's error codes: one exception class per code, named after Kafka's constant.

The table holds facts from Kafka's ``Errors.java`` (code, name, whether the client may retry).
Code raises ``XxxError(message)``; handlers turn any ``KafkaError`` into its ``code`` at the
partition boundary, and ``for_code`` maps a code back to its class.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

_TABLE: tuple[tuple[int, str, bool], ...] = (
    (-1, "UNKNOWN_SERVER_ERROR", False),
    (1, "OFFSET_OUT_OF_RANGE", False),
    (2, "CORRUPT_MESSAGE", True),
    (3, "UNKNOWN_TOPIC_OR_PARTITION", True),
    (4, "INVALID_FETCH_SIZE", False),
    (5, "LEADER_NOT_AVAILABLE", True),
    (6, "NOT_LEADER_OR_FOLLOWER", True),
    (7, "REQUEST_TIMED_OUT", True),
    (8, "BROKER_NOT_AVAILABLE", False),
    (9, "REPLICA_NOT_AVAILABLE", True),
    (10, "MESSAGE_TOO_LARGE", False),
    (11, "STALE_CONTROLLER_EPOCH", False),
    (12, "OFFSET_METADATA_TOO_LARGE", False),
    (13, "NETWORK_EXCEPTION", True),
    (14, "COORDINATOR_LOAD_IN_PROGRESS", True),
    (15, "COORDINATOR_NOT_AVAILABLE", True),
    (16, "NOT_COORDINATOR", True),
    (17, "INVALID_TOPIC_EXCEPTION", False),
    (18, "RECORD_LIST_TOO_LARGE", False),
    (19, "NOT_ENOUGH_REPLICAS", True),
    (20, "NOT_ENOUGH_REPLICAS_AFTER_APPEND", True),
    (21, "INVALID_REQUIRED_ACKS", False),
    (22, "ILLEGAL_GENERATION", False),
    (23, "INCONSISTENT_GROUP_PROTOCOL", False),
    (24, "INVALID_GROUP_ID", False),
    (25, "UNKNOWN_MEMBER_ID", False),
    (26, "INVALID_SESSION_TIMEOUT", False),
    (27, "REBALANCE_IN_PROGRESS", False),
    (28, "INVALID_COMMIT_OFFSET_SIZE", False),
    (29, "TOPIC_AUTHORIZATION_FAILED", False),
    (30, "GROUP_AUTHORIZATION_FAILED", False),
    (31, "CLUSTER_AUTHORIZATION_FAILED", False),
    (32, "INVALID_TIMESTAMP", False),
    (33, "UNSUPPORTED_SASL_MECHANISM", False),
    (34, "ILLEGAL_SASL_STATE", False),
    (35, "UNSUPPORTED_VERSION", False),
    (36, "TOPIC_ALREADY_EXISTS", False),
    (37, "INVALID_PARTITIONS", False),
    (38, "INVALID_REPLICATION_FACTOR", False),
    (39, "INVALID_REPLICA_ASSIGNMENT", False),
    (40, "INVALID_CONFIG", False),
    (41, "NOT_CONTROLLER", True),
    (42, "INVALID_REQUEST", False),
    (43, "UNSUPPORTED_FOR_MESSAGE_FORMAT", False),
    (44, "POLICY_VIOLATION", False),
    (45, "OUT_OF_ORDER_SEQUENCE_NUMBER", False),
    (46, "DUPLICATE_SEQUENCE_NUMBER", False),
    (47, "INVALID_PRODUCER_EPOCH", False),
    (48, "INVALID_TXN_STATE", False),
    (49, "INVALID_PRODUCER_ID_MAPPING", False),
    (50, "INVALID_TRANSACTION_TIMEOUT", False),
    (51, "CONCURRENT_TRANSACTIONS", True),
    (52, "TRANSACTION_COORDINATOR_FENCED", False),
    (53, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", False),
    (54, "SECURITY_DISABLED", False),
    (55, "OPERATION_NOT_ATTEMPTED", False),
    (56, "KAFKA_STORAGE_ERROR", True),
    (57, "LOG_DIR_NOT_FOUND", False),
    (58, "SASL_AUTHENTICATION_FAILED", False),
    (59, "UNKNOWN_PRODUCER_ID", False),
    (60, "REASSIGNMENT_IN_PROGRESS", False),
    (61, "DELEGATION_TOKEN_AUTH_DISABLED", False),
    (62, "DELEGATION_TOKEN_NOT_FOUND", False),
    (63, "DELEGATION_TOKEN_OWNER_MISMATCH", False),
    (64, "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED", False),
    (65, "DELEGATION_TOKEN_AUTHORIZATION_FAILED", False),
    (66, "DELEGATION_TOKEN_EXPIRED", False),
    (67, "INVALID_PRINCIPAL_TYPE", False),
    (68, "NON_EMPTY_GROUP", False),
    (69, "GROUP_ID_NOT_FOUND", False),
    (70, "FETCH_SESSION_ID_NOT_FOUND", True),
    (71, "INVALID_FETCH_SESSION_EPOCH", True),
    (72, "LISTENER_NOT_FOUND", True),
    (73, "TOPIC_DELETION_DISABLED", False),
    (74, "FENCED_LEADER_EPOCH", True),
    (75, "UNKNOWN_LEADER_EPOCH", True),
    (76, "UNSUPPORTED_COMPRESSION_TYPE", False),
    (77, "STALE_BROKER_EPOCH", False),
    (78, "OFFSET_NOT_AVAILABLE", True),
    (79, "MEMBER_ID_REQUIRED", False),
    (80, "PREFERRED_LEADER_NOT_AVAILABLE", True),
    (81, "GROUP_MAX_SIZE_REACHED", False),
    (82, "FENCED_INSTANCE_ID", False),
    (83, "ELIGIBLE_LEADERS_NOT_AVAILABLE", True),
    (84, "ELECTION_NOT_NEEDED", True),
    (85, "NO_REASSIGNMENT_IN_PROGRESS", False),
    (86, "GROUP_SUBSCRIBED_TO_TOPIC", False),
    (87, "INVALID_RECORD", False),
    (88, "UNSTABLE_OFFSET_COMMIT", True),
    (89, "THROTTLING_QUOTA_EXCEEDED", True),
    (90, "PRODUCER_FENCED", False),
    (91, "RESOURCE_NOT_FOUND", False),
    (92, "DUPLICATE_RESOURCE", False),
    (93, "UNACCEPTABLE_CREDENTIAL", False),
    (95, "INVALID_UPDATE_VERSION", False),
    (96, "FEATURE_UPDATE_FAILED", False),
    (100, "UNKNOWN_TOPIC_ID", True),
    (103, "INCONSISTENT_TOPIC_ID", True),
    (106, "FETCH_SESSION_TOPIC_ID_ERROR", True),
)


class KafkaError(Exception):
    """Base of every error that maps to a Kafka error code."""

    code: int = -1
    name: str = "UNKNOWN_SERVER_ERROR"
    retriable: bool = False

    def __init__(self, message: str = "") -> None:
        super().__init__(message or self.name)
        self.message = message or self.name


_BY_CODE: dict[int, type[KafkaError]] = {}


def _class_name(kafka_name: str) -> str:
    """UNKNOWN_TOPIC_OR_PARTITION -> UnknownTopicOrPartitionError (KAFKA_STORAGE_ERROR -> KafkaStorageError)."""
    stem = kafka_name.removesuffix("_ERROR").removesuffix("_EXCEPTION")
    return "".join(part.capitalize() for part in stem.split("_")) + "Error"


for _code, _name, _retriable in _TABLE:
    if _code in _BY_CODE:
        raise RuntimeError(f"duplicate Kafka error code {_code}")
    _cls = type(_class_name(_name), (KafkaError,), {"code": _code, "name": _name, "retriable": _retriable})
    _cls.__module__ = __name__
    globals()[_cls.__name__] = _cls
    _BY_CODE[_code] = _cls

UnknownServerError = _BY_CODE[-1]

if TYPE_CHECKING:
    # Generated above; declared for type checkers where kbroker subclasses them (a base class must be a
    # class, and ``__getattr__`` below only says "some KafkaError class").
    class CorruptMessageError(KafkaError): ...

    class OffsetOutOfRangeError(KafkaError): ...


def __getattr__(name: str) -> type[KafkaError]:
    """Reached only for a name the table above does not define. Its signature tells type checkers what
    the generated names are (every one a ``KafkaError`` class), since they cannot see ``globals()``."""
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def for_code(code: int) -> type[KafkaError]:
    """The class for a Kafka error code (unknown codes map to UNKNOWN_SERVER_ERROR)."""
    return _BY_CODE.get(code, UnknownServerError)


# zk_compat raises its own classes (it imports nothing from kbroker); each carries the Kafka
# code of the kbroker class it stands for. Call zk_compat.layout and zk_compat.assignment
# inside ``with translate_zk():`` to see kbroker's classes.
import contextlib  # noqa: E402
from collections.abc import Iterator  # noqa: E402

from zk_compat import errors as _zk_errors  # noqa: E402


def from_zk(exc: _zk_errors.AdminError) -> KafkaError:
    """The kbroker error for a zk_compat error: the class of its code, with its message."""
    return for_code(exc.code)(exc.message)


@contextlib.contextmanager
def translate_zk() -> Iterator[None]:
    """Re-raise any zk_compat error raised inside as its kbroker error (``from_zk``)."""
    try:
        yield
    except _zk_errors.AdminError as exc:
        raise from_zk(exc) from None
