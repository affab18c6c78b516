"""DeleteRecords' offsets as Kafka 2.8 takes them, through confluent-kafka's AdminClient (librdkafka): -1 deletes up
to the high watermark, any other negative offset (librdkafka's OFFSET_INVALID, -1001, for an offset not set) and
one above the high watermark are OFFSET_OUT_OF_RANGE for that partition and delete nothing, one below the log start
offset deletes nothing and answers the log start offset (apache/kafka core/src/main/scala/kafka/cluster/
Partition.scala deleteRecordsOnLeader, kafka/log/Log.scala maybeIncrementLogStartOffset)."""
from __future__ import annotations

import pytest

from .clients import DEADLINE
from .helpers import create_topic
from .test_admin import produce_plain


def test_delete_records_offsets_as_kafka(broker):
    from confluent_kafka import OFFSET_END, OFFSET_INVALID, Consumer, KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient

    bs, topic = broker.bootstrap, "delete-records-offsets"
    create_topic(bs, topic, partitions=2)
    produce_plain(bs, topic, 0, 10)
    produce_plain(bs, topic, 1, 10)
    admin = AdminClient({"bootstrap.servers": bs})
    watcher = Consumer({"bootstrap.servers": bs, "group.id": "delete-records-offsets"})

    def delete(tp: TopicPartition):
        return admin.delete_records([tp], request_timeout=DEADLINE, operation_timeout=DEADLINE)[tp].result(DEADLINE)

    def error_of(tp: TopicPartition) -> str:
        with pytest.raises(KafkaException) as exc:
            delete(tp)
        return exc.value.args[0].name()

    def watermarks(partition: int) -> tuple[int, int]:
        return watcher.get_watermark_offsets(TopicPartition(topic, partition), timeout=DEADLINE)

    try:
        assert OFFSET_INVALID == -1001
        assert delete(TopicPartition(topic, 0, 4)).low_watermark == 4

        # -1001 (and any negative offset but -1) is refused, and the partition keeps its records
        assert error_of(TopicPartition(topic, 0, OFFSET_INVALID)) == "OFFSET_OUT_OF_RANGE"
        assert error_of(TopicPartition(topic, 0, -2)) == "OFFSET_OUT_OF_RANGE"
        # above the high watermark too
        assert error_of(TopicPartition(topic, 0, 11)) == "OFFSET_OUT_OF_RANGE"
        assert watermarks(0) == (4, 10)

        # below the log start offset: nothing deleted, the low watermark answered
        assert delete(TopicPartition(topic, 0, 2)).low_watermark == 4
        assert watermarks(0) == (4, 10)

        # -1 is the high watermark
        assert delete(TopicPartition(topic, 0, OFFSET_END)).low_watermark == 10
        assert watermarks(0) == (10, 10)
        # the other partition, untouched by all of the above
        assert watermarks(1) == (0, 10)
        # the high watermark itself, given as a number
        assert delete(TopicPartition(topic, 1, 10)).low_watermark == 10
    finally:
        watcher.close()
