"""KIP-588: a fenced transactional producer is answered PRODUCER_FENCED (90) only by the request
versions that introduced it (AddPartitionsToTxn v2, AddOffsetsToTxn v2, EndTxn v2); older versions
get INVALID_PRODUCER_EPOCH (47), which older clients know as "you are fenced", as Kafka 2.8's
KafkaApis answers. aiokafka 0.14 (v0 requests) and KafkaJS 2.2.4 (v0/v1) are the older clients."""
from __future__ import annotations

import asyncio
import time

from tests.integration.helpers import create_topic
from tests.kafkajs import run_kafkajs
from tests.raw_client import request

INVALID_PRODUCER_EPOCH, PRODUCER_FENCED = 47, 90


async def _aiokafka_fenced(bootstrap: str, topic: str, step: str) -> BaseException | None:
    from aiokafka import AIOKafkaProducer

    old = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"shared-{step}")
    await old.start()
    new = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"shared-{step}")
    try:
        await old.begin_transaction()
        await old.send_and_wait(topic, b"old", partition=0)
        await new.start()  # aborts the old producer's transaction and bumps the epoch
        try:
            if step == "end":
                await old.commit_transaction()  # EndTxn v0 with the old epoch
            else:
                await old.send_and_wait(topic, b"late", partition=1)  # AddPartitionsToTxn v0
                await old.commit_transaction()
        except Exception as exc:  # noqa: BLE001 - the test looks at which one
            return exc
        return None
    finally:
        await new.stop()
        try:
            await old.stop()
        except Exception:  # noqa: BLE001 - a fenced producer may fail to stop cleanly
            pass


def test_aiokafka_fenced_producer_gets_producer_fenced(module_broker):
    from aiokafka.errors import ProducerFenced

    create_topic(module_broker.bootstrap, "fenced-aio", 2)
    for step in ("end", "add"):
        caught = asyncio.run(asyncio.wait_for(_aiokafka_fenced(module_broker.bootstrap, "fenced-aio", step), 60))
        assert isinstance(caught, ProducerFenced), (step, repr(caught))


def test_kafkajs_fenced_producer_gets_invalid_producer_epoch(module_broker):
    create_topic(module_broker.bootstrap, "fenced-js", 2)
    out = run_kafkajs("""
      const kafka = new kafkajs.Kafka({brokers: [args.bootstrap], logLevel: kafkajs.logLevel.NOTHING,
                                       retry: {retries: 2}});
      const mk = () => kafka.producer({transactionalId: 'shared-js', idempotent: true, maxInFlightRequests: 1});
      const old = mk();
      await old.connect();
      const txn = await old.transaction();
      await txn.send({topic: args.topic, messages: [{value: 'old', partition: 0}]});
      const fresh = mk();
      await fresh.connect();
      const current = await fresh.transaction();   // InitProducerId: fences the old producer
      let answer = null;
      try { await txn.commit(); } catch (e) { answer = {name: e.name, type: e.type || null, message: e.message}; }
      await current.abort();
      await fresh.disconnect();
      await old.disconnect().catch(() => {});
      return answer;
    """, {"bootstrap": module_broker.bootstrap, "topic": "fenced-js"}, timeout=90)
    assert out is not None and out["type"] == "INVALID_PRODUCER_EPOCH", out


def _init(bootstrap: str, transactional_id: str) -> tuple[int, int]:
    deadline = time.monotonic() + 30
    while True:  # the coordinator may still be loading, or aborting the previous epoch's transaction
        answer = request(bootstrap, 22, 1, {"transactional_id": transactional_id, "transaction_timeout_ms": 60000})
        if answer.error_code == 0:
            return answer.producer_id, answer.producer_epoch
        assert time.monotonic() < deadline, answer
        time.sleep(0.2)


def test_raw_versions_map_the_fence(module_broker):
    """The same fence at each version of AddPartitionsToTxn, AddOffsetsToTxn and EndTxn: 47 below v2, 90 from v2."""
    bootstrap = module_broker.bootstrap
    create_topic(bootstrap, "fenced-raw", 1)
    pid, fenced_epoch = _init(bootstrap, "shared-raw")
    assert _init(bootstrap, "shared-raw") == (pid, fenced_epoch + 1)
    found = {}
    ids = {"transactional_id": "shared-raw", "producer_id": pid, "producer_epoch": fenced_epoch}
    for version in range(4):
        add = request(bootstrap, 24, version, {**ids, "topics": [{"name": "fenced-raw", "partitions": [0]}]})
        found[("add", version)] = add.results[0].results[0].error_code
        found[("offsets", version)] = request(bootstrap, 25, version, {**ids, "group_id": "g"}).error_code
        found[("end", version)] = request(bootstrap, 26, version, {**ids, "committed": True}).error_code
    expected = {(what, v): INVALID_PRODUCER_EPOCH if v < 2 else PRODUCER_FENCED
                for what in ("add", "offsets", "end") for v in range(4)}
    assert found == expected


def test_init_producer_id_with_a_stale_epoch_is_fenced(module_broker):
    """KIP-360: a transactional producer that sends its (id, epoch) to InitProducerId (v3+) is fenced when
    they are no longer current, PRODUCER_FENCED from v4 and INVALID_PRODUCER_EPOCH at v3; the current
    ones bump the epoch, and a retry of that bump gets the same answer (its first answer may be lost)."""
    bootstrap = module_broker.bootstrap
    pid, stale = _init(bootstrap, "shared-init")
    assert _init(bootstrap, "shared-init") == (pid, stale + 1)
    current = stale + 1

    def init(version: int, producer_id: int, epoch: int) -> tuple[int, int, int]:
        answer = request(bootstrap, 22, version, {"transactional_id": "shared-init", "transaction_timeout_ms": 60000,
                                                  "producer_id": producer_id, "producer_epoch": epoch})
        return answer.error_code, answer.producer_id, answer.producer_epoch

    assert init(4, pid, stale) == (PRODUCER_FENCED, -1, -1)
    assert init(3, pid, stale) == (INVALID_PRODUCER_EPOCH, -1, -1)
    assert init(4, pid + 1000, current) == (PRODUCER_FENCED, -1, -1)
    assert init(4, pid, current) == (0, pid, current + 1)
    assert init(4, pid, current) == (0, pid, current + 1)  # the retry
    assert init(4, pid, current + 1) == (0, pid, current + 2)
    assert init(4, pid, current) == (PRODUCER_FENCED, -1, -1)  # two bumps back: fenced
