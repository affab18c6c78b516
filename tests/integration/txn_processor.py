"""A read-process-write loop with a transactional confluent-kafka producer, for the exactly-once
test: consume a batch (read_committed), write each record to the output topic's same partition,
commit the consumer's positions in the same transaction, repeat. Killed and restarted by the test.

    python txn_processor.py BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID
"""
from __future__ import annotations

import sys

from confluent_kafka import Consumer, KafkaException, Producer


def main() -> int:
    bootstrap, source, sink, group, txn_id = sys.argv[1:6]
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                         "transaction.timeout.ms": 10000, "linger.ms": 1})
    producer.init_transactions(60)
    consumer.subscribe([source])
    while True:
        msgs = [m for m in consumer.consume(50, timeout=0.5) if not m.error()]
        if not msgs:
            continue
        producer.begin_transaction()
        for m in msgs:
            producer.produce(sink, key=m.key(), value=m.value(), partition=m.partition())
        try:
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                 consumer.consumer_group_metadata(), 30)
            producer.commit_transaction(30)
        except KafkaException as exc:
            error = exc.args[0]
            if error.txn_requires_abort():
                producer.abort_transaction(30)
                # rewind to the committed positions: the aborted batch is processed again
                for tp in consumer.committed(consumer.assignment(), 30):
                    consumer.seek(tp) if tp.offset >= 0 else None
                continue
            raise
        print(f"committed {len(msgs)}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
