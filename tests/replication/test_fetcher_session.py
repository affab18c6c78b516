"""A follower's fetch loop keeps a KIP-227 fetch session with its leader: a full Fetch (epoch 0) opens it,
later requests carry the session id, the next epoch and only the partitions whose position moved (plus the
ones to forget), and an unknown session or a wrong epoch makes the next request a full one again."""
from __future__ import annotations

import asyncio
import struct

from kbroker import errors
from kbroker.protocol.codec import decode_request, encode_response
from tests.log.helpers import make_batch

from .test_fetcher_add import start_fetcher

SESSION = 4242


class _ScriptedLeader:
    """Answers each Fetch with the next scripted (error code, session id, {(topic, partition): records})."""

    def __init__(self, script) -> None:
        self.script = list(script)
        self.requests: list[dict] = []
        self.done = asyncio.Event()
        self.server: asyncio.AbstractServer | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader, writer) -> None:
        try:
            while True:
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                header, body = decode_request(memoryview(await reader.readexactly(size)))
                self.requests.append({
                    "session": (body.session_id, body.session_epoch),
                    "partitions": {(t.topic, p.partition): p.fetch_offset for t in body.topics for p in t.partitions},
                    "forgotten": {(f.topic, p) for f in body.forgotten_topics_data for p in f.partitions}})
                if not self.script:
                    self.done.set()
                    await asyncio.sleep(3600)  # the leader has nothing more to say
                error, session, data = self.script.pop(0)
                response = {"throttle_time_ms": 0, "error_code": error, "session_id": session, "responses": [
                    {"topic": t, "partitions": [{"partition_index": p, "error_code": 0, "high_watermark": hw,
                                                 "last_stable_offset": hw, "log_start_offset": 0,
                                                 "aborted_transactions": None, "preferred_read_replica": -1,
                                                 "records": records}]}
                    for (t, p), (records, hw) in data.items()]}
                writer.write(b"".join(bytes(c) for c in encode_response(1, header.api_version,
                                                                         header.correlation_id, response)))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()


def test_the_follower_fetches_incrementally_in_a_session(tmp_path, appender):
    batch = bytes(make_batch(3))
    script = [
        (0, SESSION, {("a", 0): (batch, 3)}),          # full fetch: opens the session, a gets 3 records
        (0, SESSION, {}),                              # incremental: a moved to 3, b did not move
        (errors.FetchSessionIdNotFoundError.code, 0, {}),  # the leader lost the session
        (0, SESSION + 1, {}),                          # full again: a new session
    ]

    async def main():
        leader = _ScriptedLeader(script)
        port = await leader.start()
        fetcher, a, b = start_fetcher(tmp_path, appender, port, wait_ms=10, backoff_ms=10)
        try:
            fetcher.add(a)
            fetcher.add(b)
            await asyncio.wait_for(leader.done.wait(), 10)
        finally:
            fetcher.stop()
            leader.server.close()
        return a, leader.requests

    a, requests = asyncio.run(main())
    assert a.log.log_end_offset == 3 and a.high_watermark == 3
    # the first Fetch may have gone out before b was added: from the first one naming both
    start = next(i for i, r in enumerate(requests) if r["partitions"].keys() >= {("a", 0), ("b", 0)})
    full, incremental, refused, again = requests[start:start + 4]
    assert full["session"][1] == 0 and full["partitions"] == {("a", 0): 0, ("b", 0): 0}
    assert incremental["session"] == (SESSION, 1)
    assert incremental["partitions"] == {("a", 0): 3} and not incremental["forgotten"]  # b did not move
    assert refused["session"] == (SESSION, 2) and refused["partitions"] == {}
    assert again["session"][1] == 0 and again["partitions"] == {("a", 0): 3, ("b", 0): 0}


def test_an_incremental_request_looks_only_at_the_partitions_that_moved(tmp_path, appender, monkeypatch):
    """With thousands of partitions followed from one leader, a follower fetches after every append: building a
    request must not cost a look at each of them. After the full Fetch, a request looks at the partition it
    appended to alone, and the next at none, while the leader's session keeps all of them."""
    from kbroker.log import TopicPartition
    from kbroker.replication.fetcher import LeaderFetcher

    from .test_fetcher_add import _follower_partition

    batch = bytes(make_batch(3))
    script = [(0, SESSION, {("many", 7): (batch, 3)}), (0, SESSION, {}), (0, SESSION, {})]
    looks: list[int] = []
    real = LeaderFetcher._position

    def position(self, target):
        looks[-1] += 1
        return real(self, target)

    monkeypatch.setattr(LeaderFetcher, "_position", position)

    async def main():
        leader = _ScriptedLeader(script)
        port = await leader.start()
        fetcher, _, _ = start_fetcher(tmp_path, appender, port, wait_ms=10, backoff_ms=10)
        real_request = fetcher.connection.request

        async def request(*args, **kwargs):
            response = await real_request(*args, **kwargs)
            looks.append(0)  # the looks before the next request
            return response
        fetcher.connection.request = request  # type: ignore[method-assign]
        looks.append(0)
        try:
            for i in range(50):
                fetcher.add(_follower_partition(tmp_path, appender, TopicPartition("many", i)))
            await asyncio.wait_for(leader.done.wait(), 10)
        finally:
            fetcher.stop()
            leader.server.close()
        return leader.requests

    requests = asyncio.run(main())
    start = next(i for i, r in enumerate(requests) if len(r["partitions"]) == 50)
    full, appended, idle = requests[start:start + 3]
    assert full["session"][1] == 0
    assert appended["partitions"] == {("many", 7): 3} and idle["partitions"] == {} and not idle["forgotten"]
    # positions computed before each request: every partition for the full one, then only what moved
    assert looks[:3] == [50, 1, 0], looks
