"""message.format.version (topic) and log.message.format.version (broker), as Kafka 2.8: a topic
switched to 0.10.0 while producers keep writing holds v2 batches, then magic-1 messages; consumers
of every Fetch version read both in order, also after a crash and recovery; an idempotent
producer is refused with UNSUPPORTED_FOR_MESSAGE_FORMAT."""
from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time

import pytest

from kbroker.log import batches, legacy
from tests.raw_client import request

from .clients import DEADLINE, ConfluentDriver, KafkaPythonDriver
from .conftest import REPO
from .helpers import create_topic, stored_batches

UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
UNKNOWN_SERVER_ERROR = -1


def _alter_topic(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    """kafka-configs.sh --alter --add-config, as 2.8 sends it: IncrementalAlterConfigs SET."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    admin = AdminClient({"bootstrap.servers": bootstrap})
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()]
    futures = admin.incremental_alter_configs([ConfigResource(ConfigResource.Type.TOPIC, topic,
                                                              incremental_configs=entries)],
                                              request_timeout=DEADLINE)
    for future in futures.values():
        future.result(DEADLINE)


def _topic_config(bootstrap: str, topic: str) -> dict[str, str]:
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)], request_timeout=DEADLINE)
    entries = next(iter(futures.values())).result(DEADLINE)
    return {name: entry.value for name, entry in entries.items()}


class _Writers:
    """Two confluent-kafka producers (uncompressed, gzip) writing until stopped; each value names
    its producer and its sequence, so order and completeness can be checked per producer."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.stop = threading.Event()
        self.sent = {"plain": 0, "gzip": 0}
        self.errors: list[str] = []
        self.threads = [threading.Thread(target=self._run, args=(name,)) for name in self.sent]

    def _run(self, name: str) -> None:
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": self.bootstrap, "compression.type": "none" if name == "plain" else "gzip",
                      "linger.ms": 5, "acks": "all"})

        def done(err, msg) -> None:
            if err is not None:
                self.errors.append(str(err))

        i = 0
        while not self.stop.is_set():
            p.produce(self.topic, key=b"%s-%d" % (name.encode(), i % 7), value=b"%s:%d" % (name.encode(), i),
                      timestamp=1_700_000_000_000 + i, on_delivery=done)
            i += 1
            if i % 20 == 0:
                p.poll(0)
                time.sleep(0.002)
        assert p.flush(DEADLINE) == 0
        self.sent[name] = i

    def __enter__(self) -> _Writers:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(DEADLINE)


def _check_complete(values: list[bytes], sent: dict[str, int]) -> None:
    """Every message of each producer, exactly once, in its send order."""
    by_producer: dict[str, list[int]] = {name: [] for name in sent}
    for v in values:
        name, _, seq = v.decode().partition(":")
        by_producer[name].append(int(seq))
    for name, count in sent.items():
        assert by_producer[name] == list(range(count)), f"{name}: {len(by_producer[name])} of {count} or out of order"


def _raw_fetch_all(bootstrap: str, topic: str, version: int, end: int) -> list[legacy.LegacyRecord]:
    """Every message below ``end`` by Fetch ``version`` (v0-3: magic 0/1 message sets), fetch after fetch."""
    out: list[legacy.LegacyRecord] = []
    offset = 0
    while offset < end:
        body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 16, "isolation_level": 0,
                "topics": [{"topic": topic, "partitions": [{"partition": 0, "fetch_offset": offset,
                                                             "partition_max_bytes": 1 << 16}]}]}
        part = request(bootstrap, 1, version, body).responses[0].partitions[0]
        assert part.error_code == 0
        got = [r for r in legacy.read_records(bytes(part.records), allow_partial=True) if r.offset >= offset]
        assert got, f"Fetch v{version} at {offset} returned nothing"
        assert {r.magic for r in got} == {0 if version < 2 else 1}
        out.extend(got)
        offset = got[-1].offset + 1
    return out


def _kcat_values(bootstrap: str, topic: str, count: int) -> list[bytes]:
    done = subprocess.run(["kcat", "-b", bootstrap, "-C", "-t", topic, "-o", "beginning", "-c", str(count), "-e",
                           "-f", "%o %s\n"], capture_output=True, timeout=DEADLINE, check=True)
    lines = done.stdout.decode().splitlines()
    assert [int(line.split(" ", 1)[0]) for line in lines] == list(range(count))
    return [line.split(" ", 1)[1].encode() for line in lines]


def _read_every_way(bootstrap: str, topic: str, sent: dict[str, int]) -> None:
    total = sum(sent.values())
    modern = ConfluentDriver().read(bootstrap, topic, [0], total)
    assert [r.offset for r in modern] == list(range(total))
    _check_complete([r.value for r in modern], sent)
    for api_version in ((0, 10, 1), (0, 10, 0)):  # kafka-python: Fetch v3, then v2
        old = KafkaPythonDriver().read(bootstrap, topic, [0], total, api_version=api_version)
        assert [r.offset for r in old] == list(range(total)), api_version
        _check_complete([r.value for r in old], sent)
    for version in (0, 2):  # raw Fetch v0 (magic 0) and v2 (magic 1)
        got = _raw_fetch_all(bootstrap, topic, version, total)
        assert [r.offset for r in got] == list(range(total))
        _check_complete([r.value for r in got], sent)
    if shutil.which("kcat"):
        _check_complete(_kcat_values(bootstrap, topic, total), sent)


def test_switch_to_0_10_0_while_producing_then_every_reader_and_recovery(broker):
    topic = "mfv-switch"
    create_topic(broker.bootstrap, topic)
    with _Writers(broker.bootstrap, topic) as writers:
        time.sleep(1.0)
        _alter_topic(broker.bootstrap, topic, {"message.format.version": "0.10.0"})
        time.sleep(1.5)
    assert not writers.errors
    assert _topic_config(broker.bootstrap, topic)["message.format.version"] == "0.10.0"

    magics = [h.magic for h in stored_batches(broker.dirs, topic)[0]]
    assert magics[0] == 2 and magics[-1] == 1, "the log holds v2 batches, then magic-1 messages"
    assert magics == sorted(magics, reverse=True), "once switched, every later append is magic 1"
    codecs = {h.compression for h in stored_batches(broker.dirs, topic)[0] if h.magic == 1}
    assert codecs == {0, 1}, "uncompressed messages and gzip wrappers, the producers' codecs kept"
    _read_every_way(broker.bootstrap, topic, writers.sent)

    broker.kill()  # no clean shutdown: the next start recovers the mixed log
    broker.start()
    _read_every_way(broker.bootstrap, topic, writers.sent)
    assert [h.magic for h in stored_batches(broker.dirs, topic)[0]] == magics


def test_idempotent_and_header_records_are_refused_below_0_11(broker):
    topic = "mfv-refusals"
    create_topic(broker.bootstrap, topic, configs={"message.format.version": "0.10.2"})

    def produce(batch: bytes):
        body = {"acks": 1, "timeout_ms": 5000, "transactional_id": None,
                "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}
        return request(broker.bootstrap, 0, 8, body).responses[0].partition_responses[0]

    idempotent = produce(bytes(batches.build_batch([(b"k", b"v", 1_700_000_000_000)], producer_id=5,
                                                   producer_epoch=0, base_sequence=0)))
    assert idempotent.error_code == UNSUPPORTED_FOR_MESSAGE_FORMAT
    assert idempotent.error_message.endswith("Idempotent records cannot be used with magic version 1")

    from confluent_kafka import KafkaException, Producer

    errors: list = []
    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "message.timeout.ms": 5000})
    p.produce(topic, b"x", on_delivery=lambda err, msg: errors.append(err))
    try:
        p.flush(DEADLINE)
    except KafkaException as exc:
        errors.append(exc.args[0])
    assert errors and errors[0] is not None and errors[0].code() != 0, "librdkafka's idempotent producer was refused"

    with_headers = produce(bytes(_batch_with_header()))
    assert with_headers.error_code == UNKNOWN_SERVER_ERROR
    assert "does not support record headers" in with_headers.error_message
    plain = produce(bytes(batches.build_batch([(b"k", b"v", 1_700_000_000_000)])))
    assert (plain.error_code, plain.base_offset) == (0, 0)
    assert [h.magic for h in stored_batches(broker.dirs, topic)[0]] == [1]


def _batch_with_header() -> bytearray:
    """A v2 batch of one record carrying one header (batches.build_batch writes none)."""
    def varint(n: int) -> bytes:
        z = (n << 1) ^ (n >> 63)
        out = bytearray()
        while z >= 0x80:
            out.append((z & 0x7F) | 0x80)
            z >>= 7
        out.append(z)
        return bytes(out)

    body = b"\x00" + varint(0) + varint(0) + varint(1) + b"k" + varint(1) + b"v" + varint(1) + varint(1) + b"h" + \
        varint(1) + b"x"
    plain = batches.build_batch([(b"k", b"v", 1_700_000_000_000)])
    header = plain[:batches.HEADER_SIZE]
    batch = bytearray(header) + varint(len(body)) + body
    batch[8:12] = (len(batch) - 12).to_bytes(4, "big")
    return batches.set_crc(batch)


def test_configs_tool_alters_and_broker_default_applies(broker_factory):
    broker = broker_factory({"log.message.format.version": "0.10.0"})
    create_topic(broker.bootstrap, "mfv-default")
    create_topic(broker.bootstrap, "mfv-override", configs={"message.format.version": "2.8"})
    create_topic(broker.bootstrap, "mfv-tool")
    done = subprocess.run([sys.executable, "-m", "kbroker.cli", "configs", "--bootstrap-server", broker.bootstrap,
                           "--alter", "--entity-type", "topics", "--entity-name", "mfv-tool",
                           "--add-config", "message.format.version=0.9.0"], cwd=REPO, capture_output=True,
                          timeout=DEADLINE)
    assert done.returncode == 0, done.stderr.decode()
    assert _topic_config(broker.bootstrap, "mfv-default")["message.format.version"] == "0.10.0"
    assert _topic_config(broker.bootstrap, "mfv-tool")["message.format.version"] == "0.9.0"

    from confluent_kafka import KafkaError, KafkaException, Producer

    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for topic in ("mfv-default", "mfv-override", "mfv-tool"):
        for i in range(3):
            p.produce(topic, key=b"k", value=b"%s %d" % (topic.encode(), i), timestamp=1_700_000_000_000 + i)
    assert p.flush(DEADLINE) == 0
    stored = {t: {h.magic for h in stored_batches(broker.dirs, t)[0]} for t in ("mfv-default", "mfv-override",
                                                                                  "mfv-tool")}
    assert stored == {"mfv-default": {1}, "mfv-override": {2}, "mfv-tool": {0}}
    for topic in stored:
        got = ConfluentDriver().read(broker.bootstrap, topic, [0], 3)
        assert [r.value for r in got] == [b"%s %d" % (topic.encode(), i) for i in range(3)]
    # Kafka's ApiVersionValidator: an unknown version is refused with INVALID_CONFIG and its words
    with pytest.raises(KafkaException, match="Invalid value 0.12.0 for configuration message.format.version: "
                                             "Version `0.12.0` is not a valid version") as refused:
        _alter_topic(broker.bootstrap, "mfv-tool", {"message.format.version": "0.12.0"})
    assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG


def test_legacy_producers_to_a_0_10_0_topic_are_stored_as_sent(broker):
    """Produce v0-2 message sets are kept in magic 1 (not up-converted): a producer's snappy
    wrapper comes back from Fetch v2 byte for byte but for its offset; magic 0 becomes magic 1
    without a timestamp; a v4+ fetch gets the stored magic-1 entries as they are."""
    topic = "mfv-legacy-producers"
    create_topic(broker.bootstrap, topic, configs={"message.format.version": "0.10.0"})

    def produce(version: int, records: bytes):
        body = {"acks": 1, "timeout_ms": 5000,
                "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}]}
        return request(broker.bootstrap, 0, version, body).responses[0].partition_responses[0]

    def fetch(version: int) -> bytes:
        body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
                "topics": [{"topic": topic, "partitions": [{"partition": 0, "fetch_offset": 0,
                                                             "partition_max_bytes": 1 << 20}]}]}
        return bytes(request(broker.bootstrap, 1, version, body).responses[0].partitions[0].records)

    wrapper = legacy.encode_wrapper(legacy.SNAPPY, [legacy.LegacyRecord(0, 1_650_000_000_000 + i, b"k%d" % i,
                                                                       b"v%d" % i) for i in range(3)],
                                    wrapper_offset=2)
    assert (produce(2, wrapper).error_code, produce(0, legacy.encode_message(0, b"old", b"zero", magic=0))
            .base_offset) == (0, 3)
    stored = fetch(2)
    entries = legacy.parse_entries(stored)
    assert [(e.magic, e.offset, e.codec) for e in entries] == [(1, 2, legacy.SNAPPY), (1, 3, 0)]
    assert stored[:entries[0].size] == wrapper  # in-place assignment: the producer's bytes, offset 2 as sent
    assert (entries[1].timestamp, entries[1].key, entries[1].value) == (-1, b"old", b"zero")
    assert fetch(4) == stored  # v4+: what is stored
    assert [(r.offset, r.magic) for r in legacy.read_records(fetch(0))] == [(0, 0), (1, 0), (2, 0), (3, 0)]


def test_aiokafka_and_kafkajs_read_a_mixed_log(broker):
    """The two other client families: aiokafka and KafkaJS (Fetch v4+, given the stored magic-1
    messages as they are) read v2 batches, then magic-1 messages, in order."""
    from confluent_kafka import Producer

    from tests.kafkajs import run_kafkajs

    from .clients import AioKafkaDriver

    topic = "mfv-other-clients"
    create_topic(broker.bootstrap, topic)
    values = [b"m%d" % i for i in range(60)]

    def write(chunk: list[bytes], codec: str) -> None:
        p = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec, "linger.ms": 5})
        for v in chunk:
            p.produce(topic, key=b"k", value=v, timestamp=1_700_000_000_000)
        assert p.flush(DEADLINE) == 0

    write(values[:20], "none")
    _alter_topic(broker.bootstrap, topic, {"message.format.version": "0.10.0"})
    write(values[20:40], "gzip")
    write(values[40:], "none")
    assert {h.magic for h in stored_batches(broker.dirs, topic)[0]} == {1, 2}

    # Both take every batch of a fetch response for the first one's format (aiokafka 0.14's compiled reader,
    # KafkaJS's fetch v4+ decodeMessages), so a response holding both formats defeats them, as it would against
    # Kafka 2.8, which sends the same bytes. With a partition fetch size below one batch, each response holds
    # one whole batch or one message (Kafka's KIP-74 minimum) and they read the whole log.
    got = AioKafkaDriver().read(broker.bootstrap, topic, [0], 60, max_partition_fetch_bytes=1)
    assert [(r.offset, r.value) for r in got] == list(enumerate(values))
    out = run_kafkajs("""
      const kafka = new kafkajs.Kafka({brokers: [args.bootstrap], logLevel: kafkajs.logLevel.NOTHING});
      const consumer = kafka.consumer({groupId: 'mfv-js', maxBytesPerPartition: 1});
      await consumer.connect();
      await consumer.subscribe({topic: args.topic, fromBeginning: true});
      const seen = [];
      await new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error('only ' + seen.length + ' messages')), 45000);
        consumer.run({eachMessage: async ({message}) => {
          seen.push([Number(message.offset), message.value.toString()]);
          if (seen.length >= args.count) { clearTimeout(timer); resolve(); }
        }}).catch(reject);
      });
      await consumer.disconnect();
      return seen;
    """, {"bootstrap": broker.bootstrap, "topic": topic, "count": 60}, timeout=90)
    assert out == [[i, v.decode()] for i, v in enumerate(values)]
