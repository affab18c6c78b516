"""The connection times each request into the broker's metrics when its own answer is written, even while
later answers still wait in the output queue (a peer reading slowly never lets that queue empty)."""
from __future__ import annotations

import asyncio
import socket
import time

import pytest

from kbroker.metrics import PHASES, BrokerMetrics
from kbroker.network.responses import ResponseSlot
from kbroker.protocol import decode_response, encode_request
from tests.network.loopback import connection_on_loopback, read_frame


@pytest.fixture
def pair():
    metrics = BrokerMetrics()
    with connection_on_loopback(server_send_buffer=4096, client_receive_buffer=4096,
                                metrics=metrics) as (loop, conn, client, _):
        yield loop, conn, client, metrics


def _timed_slot(correlation_id: int) -> ResponseSlot:
    """A request as handle_request leaves it with metrics on: read, dispatched, its handler returned."""
    slot = ResponseSlot(0, 9, correlation_id)
    slot.received = time.monotonic()
    slot.dispatched = slot.returned = time.monotonic()
    return slot


def test_an_answer_is_timed_once_written_while_later_ones_still_wait(pair):
    loop, conn, client, metrics = pair
    first, big = b"x" * 1000, b"y" * 2_000_000
    slots = [_timed_slot(i) for i in range(3)]
    conn._slots.extend(slots)
    conn._fill(slots[2], [big])
    conn._fill(slots[1], [big])
    conn._fill(slots[0], [first])  # all three are queued at once: the queue never empties from here on
    got = bytearray()

    async def read_the_first_answer_only() -> None:
        deadline = time.monotonic() + 10
        while len(got) < len(first) and time.monotonic() < deadline:
            try:
                got.extend(client.recv(len(first) - len(got), socket.MSG_DONTWAIT))
            except BlockingIOError:
                pass
            await asyncio.sleep(0.001)
        while 0 not in metrics.requests and time.monotonic() < deadline:
            await asyncio.sleep(0.001)
    loop.run_until_complete(read_the_first_answer_only())
    assert bytes(got) == first
    assert conn._out, "the big answers still wait: the client reads no more"
    stats = metrics.requests[0]
    assert stats.count == 1 and stats.versions == {9: 1}
    assert slots[0].sent >= slots[0].queued >= slots[0].ready_at >= slots[0].returned
    assert slots[0].chunks is None  # the kept request lets its answer go
    assert len(conn._sending) == 2
    totals = stats.recent()[-1]
    assert len(totals) == 1 and totals[0] >= 0


def test_a_quota_throttle_is_its_request_s_throttle_time():
    """ThrottleTimeMs (Kafka's apiThrottleTimeMs): the throttle a quota muted the connection for while it handled
    the request, the larger when two quotas throttle it (a Fetch's byte and request quotas), 0 for a request no
    quota throttled; the muted time is not the request's own (its TotalTimeMs ends when its answer is written)."""
    metrics = BrokerMetrics()
    throttles = {1: (0.05, 0.2), 2: ()}  # correlation id -> the mutes its handler makes, in seconds

    def dispatch(header, body, conn):
        for seconds in throttles[header.correlation_id]:
            conn.mute(seconds)  # as QuotaManager.run and FetchQuota do, over a quota
        return {"error_code": 0, "api_keys": []}

    with connection_on_loopback(dispatch, metrics=metrics) as (loop, conn, client, _):
        client.sendall(bytes(encode_request(18, 0, 1, "t", {})) + bytes(encode_request(18, 0, 2, "t", {})))

        async def both_timed() -> None:
            deadline = time.monotonic() + 10
            while (18 not in metrics.requests or metrics.requests[18].count < 2) and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
        loop.run_until_complete(both_timed())
        for want in (1, 2):
            assert decode_response(18, 0, read_frame(client))[0] == want
    phases = dict(zip(PHASES, metrics.requests[18].recent(), strict=True))
    assert phases["throttletimems"] == [0.0, 200.0]
    assert max(phases["totaltimems"]) < 200.0  # the second request waited the throttle out, before its own time
