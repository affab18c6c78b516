"""Kafka's refusals of an admin operation, as zk_compat raises them.

``layout`` and ``assignment`` do what Kafka's ``AdminZkClient`` and ``AdminUtils`` do, and refuse
what they refuse: a bad topic name, a topic that exists, an impossible replica assignment, ...
Each class here carries the number Kafka answers with in ``code`` (from Kafka's
``Errors.java``) and a readable ``message``.

zk_compat imports nothing from the broker, so these are its own classes. The broker turns one
into its ``kbroker.errors`` class for the same code with ``kbroker.errors.translate_zk()``
(or ``from_zk(exc)``).

These are not the metadata store's errors (``zk_compat.store.MetadataStoreError``: NoNode,
BadVersion, ..., with ZooKeeper's codes), which pass through ``layout`` unchanged.
"""
from __future__ import annotations

from typing import Any


class AdminError(Exception):
    """Base of zk_compat's Kafka errors. A subclass names its Kafka code in its class line
    (``class X(AdminError, code=17)``); without one it inherits its parent's. The base's -1
    is Kafka's UNKNOWN_SERVER_ERROR, what Kafka answers for a refusal without a code of its own."""

    code = -1

    def __init_subclass__(cls, *, code: int | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if code is not None:
            cls.code = code

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class UnknownTopicOrPartitionError(AdminError, code=3):
    """The topic to delete does not exist."""


class InvalidTopicError(AdminError, code=17):
    """An illegal topic name, or one that collides with an existing topic's ('.' and '_')."""


class TopicAlreadyExistsError(AdminError, code=36):
    """The topic exists, or is still marked for deletion."""


class InvalidPartitionsError(AdminError, code=37):
    """A partition count below 1, or one that would not grow the topic."""


class InvalidReplicationFactorError(AdminError, code=38):
    """A replication factor below 1, or above the number of brokers."""


class InvalidReplicaAssignmentError(AdminError, code=39):
    """An assignment Kafka refuses, or brokers of which only some have a rack."""


class TopicAlreadyMarkedForDeletionError(AdminError):
    """``/admin/delete_topics/<topic>`` exists already. Kafka has no error code for it (its
    DeleteTopics handler swallows ``TopicAlreadyMarkedForDeletionException`` and waits for the
    deletion), so it keeps the base's -1."""
