"""The inter-broker connection (kbroker/interbroker/client.py) shared by concurrent callers: the transaction
coordinator sends the markers of several transactions to one leader over one connection at once. A broker
answers a connection's requests one at a time (as Kafka's SocketServer), so a request sent behind a long
poll waits for it; the callers take turns, and each gets its own answer. Before, the second caller's read
failed with RuntimeError (asyncio's reader serves one waiter), which the markers' retry did not catch."""
from __future__ import annotations

import asyncio
import time

from kbroker.interbroker.client import BrokerConnection
from kbroker.tools.client import AdminClient


def test_concurrent_requests_on_one_inter_broker_connection_take_turns(broker) -> None:
    with AdminClient(broker.bootstrap) as admin:
        admin.create_topics([{"name": "quiet", "num_partitions": 1, "replication_factor": 1, "configs": []}])
    long_poll = {"replica_id": -1, "max_wait_ms": 800, "min_bytes": 1 << 20, "max_bytes": 1 << 20,
                 "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                 "topics": [{"topic": "quiet", "partitions": [
                     {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}],
                 "forgotten_topics_data": [], "rack_id": ""}

    async def run() -> tuple[list[float], list]:
        conn = BrokerConnection(broker.host, broker.port, "shared-test", 10.0)
        await conn.request(18, 0, {})  # connected: the two calls below share this one connection
        done: list[float] = []
        started = time.monotonic()

        async def call(api_key: int, version: int, body: dict):
            answer = await conn.request(api_key, version, body)
            done.append(time.monotonic() - started)
            return answer
        try:
            answers = await asyncio.gather(call(1, 11, long_poll), call(18, 3, {
                "client_software_name": "shared-test", "client_software_version": "1"}))
        finally:
            conn.close()
        return done, answers

    done, (fetched, versions) = asyncio.run(run())
    assert fetched.responses[0].partitions[0].error_code == 0
    assert versions.error_code == 0 and versions.api_keys
    assert done[1] >= 0.7, "the second request was answered before the long poll ahead of it ended"
