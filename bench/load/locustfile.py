"""Locust users that load a Kafka broker with confluent-kafka and report to Locust's statistics.

    locust -f bench/load/locustfile.py --headless -u 8 -r 8 -t 60s --host kafka://127.0.0.1:9092 --csv out

Producer users report every produce when its delivery report arrives (request_type "produce", name = topic,
response time = send to acknowledgement); consumer users, in one consumer group, report every poll
(request_type "consume", response time = time spent waiting in that poll, response length = bytes received).
Delivery or fetch errors are failures. Settings (environment variables):

    KB_BOOTSTRAP         bootstrap servers (default: from --host kafka://host:port, else 127.0.0.1:9092)
    KB_TOPIC             topic (default locust); created on start if missing, with KB_PARTITIONS (default 6)
    KB_MESSAGE_SIZE      value size in bytes (default 100)
    KB_KEYS              key distribution: none | uniform | hot (80% of records on 20% of keys)   (default uniform)
    KB_KEY_COUNT         distinct keys (default 1000)
    KB_ACKS              0 | 1 | all (default 1)
    KB_COMPRESSION       none | gzip | snappy | lz4 | zstd (default none)
    KB_LINGER_MS         producer linger.ms (default 5)
    KB_GROUP             consumer group (default locust)
    KB_POLL_MS           how long a consumer poll waits for records (default 500)
    KB_PRODUCER_WEIGHT / KB_CONSUMER_WEIGHT   user mix (default 1 / 1)
    KB_PRODUCE_WAIT_MS   pause between a producer user's sends (default 0)
"""
from __future__ import annotations

import os
import random
import time

import gevent
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from locust import User, constant, events, task

TOPIC = os.environ.get("KB_TOPIC", "locust")
SIZE = int(os.environ.get("KB_MESSAGE_SIZE", "100"))
KEYS = os.environ.get("KB_KEYS", "uniform")
KEY_COUNT = int(os.environ.get("KB_KEY_COUNT", "1000"))
ACKS = os.environ.get("KB_ACKS", "1")
COMPRESSION = os.environ.get("KB_COMPRESSION", "none")
LINGER_MS = os.environ.get("KB_LINGER_MS", "5")
GROUP = os.environ.get("KB_GROUP", "locust")
POLL_MS = float(os.environ.get("KB_POLL_MS", "500"))
PARTITIONS = int(os.environ.get("KB_PARTITIONS", "6"))
PRODUCE_WAIT = float(os.environ.get("KB_PRODUCE_WAIT_MS", "0")) / 1000


def bootstrap(host: str | None) -> str:
    if os.environ.get("KB_BOOTSTRAP"):
        return os.environ["KB_BOOTSTRAP"]
    if host:
        return host.split("://", 1)[-1].rstrip("/")
    return "127.0.0.1:9092"


def next_key() -> bytes | None:
    if KEYS == "none":
        return None
    if KEYS == "hot" and random.random() < 0.8:
        return b"key-%d" % random.randrange(max(1, KEY_COUNT // 5))
    return b"key-%d" % random.randrange(KEY_COUNT)


@events.test_start.add_listener
def create_topic(environment, **_kw) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap(environment.host)})
    if TOPIC in admin.list_topics(timeout=10).topics:
        return
    try:
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(15)
    except KafkaException as e:
        if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise


class KafkaProducerUser(User):
    weight = int(os.environ.get("KB_PRODUCER_WEIGHT", "1"))
    wait_time = constant(PRODUCE_WAIT)

    def on_start(self) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap(self.host), "acks": ACKS,
                                  "linger.ms": LINGER_MS, "compression.type": COMPRESSION})
        self.payload = os.urandom(SIZE)

    def on_stop(self) -> None:
        deadline = time.monotonic() + 10
        while len(self.producer) and time.monotonic() < deadline:
            self.producer.poll(0)
            gevent.sleep(0.01)

    def _report(self, start: float, size: int):
        def on_delivery(err, msg) -> None:
            events.request.fire(request_type="produce", name=TOPIC,
                                response_time=(time.perf_counter() - start) * 1000, response_length=size,
                                exception=KafkaException(err) if err is not None else None, context={})
        return on_delivery

    @task
    def produce(self) -> None:
        start = time.perf_counter()
        while True:
            try:
                self.producer.produce(TOPIC, self.payload, next_key(), on_delivery=self._report(start, SIZE))
                break
            except BufferError:  # the local queue is full: let deliveries drain
                self.producer.poll(0)
                gevent.sleep(0.005)
        self.producer.poll(0)  # delivery reports of earlier sends fire here
        if len(self.producer) > 1000:
            gevent.sleep(0.001)


class KafkaConsumerUser(User):
    weight = int(os.environ.get("KB_CONSUMER_WEIGHT", "1"))
    wait_time = constant(0)

    def on_start(self) -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap(self.host), "group.id": GROUP,
                                  "auto.offset.reset": "earliest", "enable.auto.commit": True})
        self.consumer.subscribe([TOPIC])

    def on_stop(self) -> None:
        self.consumer.close()

    @task
    def consume(self) -> None:
        # poll without blocking gevent's hub: short non-blocking polls until records come or POLL_MS passes
        start = time.perf_counter()
        deadline = start + POLL_MS / 1000
        msgs: list = []
        while True:
            msgs = self.consumer.consume(num_messages=500, timeout=0)
            if msgs or time.perf_counter() >= deadline:
                break
            gevent.sleep(0.005)
        error = None
        size = 0
        for m in msgs:
            if m.error() is not None:
                if m.error().code() != KafkaError._PARTITION_EOF:
                    error = KafkaException(m.error())
            else:
                size += len(m.value() or b"")
        events.request.fire(request_type="consume", name=TOPIC, response_time=(time.perf_counter() - start) * 1000,
                            response_length=size, exception=error, context={})
