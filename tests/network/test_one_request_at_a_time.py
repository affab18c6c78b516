"""A connection processes its requests one after another, as Kafka's SocketServer does (a channel is muted
from a request's arrival until its response has been sent): a request that arrives while an earlier one
still waits (a long poll, an acks=all Produce, an OffsetCommit waiting for the ISR) is read but not handed
to its handler until that earlier answer is written."""
from __future__ import annotations

import asyncio
import socket
import struct
import time

import pytest

from kbroker.protocol import decode_response, encode_request
from tests.network.loopback import RecordingDispatch, connection_on_loopback, read_frame


@pytest.fixture
def pair():
    dispatch = RecordingDispatch()  # answers: correlation id -> what the handler returns
    with connection_on_loopback(dispatch) as (loop, conn, client, server_sock):
        yield loop, conn, client, dispatch.answers, dispatch.dispatched, server_sock


def request(correlation_id: int) -> bytes:
    return bytes(encode_request(18, 0, correlation_id, "one-at-a-time", {}))


async def read_without_blocking_the_loop(sock: socket.socket) -> bytes:
    """One response frame's body, read while the connection's loop keeps writing."""
    sock.setblocking(False)
    got = bytearray()
    deadline = time.monotonic() + 20

    async def take(n: int) -> None:
        while n > 0 and time.monotonic() < deadline:
            try:
                more = sock.recv(min(n, 65536))
                got.extend(more)
                n -= len(more)
            except BlockingIOError:
                await asyncio.sleep(0)
    await take(4)
    await take(struct.unpack(">i", got[:4])[0])
    sock.setblocking(True)
    return bytes(got[4:])


def spin(loop, seconds: float) -> None:
    loop.run_until_complete(asyncio.sleep(seconds))


def test_a_request_behind_a_waiting_one_is_handled_only_once_that_one_is_answered(pair):
    loop, conn, client, handlers, dispatched, _ = pair
    waiting = loop.create_future()   # the first request's answer is not ready (a DelayedFetch, an acks=all Produce)
    handlers[1] = waiting
    client.sendall(request(1) + request(2) + request(3))
    spin(loop, 0.2)
    assert [c for _, c in dispatched] == [1], "requests 2 and 3 were handled while request 1 still waited"
    answered_at = time.monotonic()
    waiting.set_result({"error_code": 0, "api_keys": []})
    spin(loop, 0.1)
    assert [c for _, c in dispatched] == [1, 2, 3]
    assert dispatched[1][0] >= answered_at
    assert [decode_response(18, 0, read_frame(client))[0] for _ in range(3)] == [1, 2, 3]


def test_the_next_request_waits_until_the_previous_answer_is_written_not_only_encoded(pair):
    loop, conn, client, handlers, dispatched, server_sock = pair
    server_sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    big = {"error_code": 0, "api_keys": [{"api_key": i, "min_version": 0, "max_version": 0} for i in range(30_000)]}
    handlers[1] = big   # 180 KB: the socket takes a small part until the client reads
    client.sendall(request(1) + request(2))
    spin(loop, 0.2)
    assert conn._out, "the first answer should still be partly unwritten"
    assert [c for _, c in dispatched] == [1], "request 2 was handled while answer 1 was still being written"
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)  # now take it quickly
    first = loop.run_until_complete(read_without_blocking_the_loop(client))
    assert decode_response(18, 0, first)[0] == 1
    spin(loop, 0.1)
    assert [c for _, c in dispatched] == [1, 2]
    assert decode_response(18, 0, read_frame(client))[0] == 2


def test_a_parked_answer_is_written_from_within_the_call_that_completes_it_and_the_next_request_waits_a_turn(pair):
    """The purgatory's answers are Deferreds: the leader's append that wakes a follower's parked fetch sends its
    answer before the append returns (no turn of the loop in between), but the follower's next request, read
    meanwhile, is not handled inside that append: it gets a turn of its own."""
    from kbroker.protocol.outcome import Deferred
    loop, conn, client, handlers, dispatched, _ = pair
    parked: Deferred[object] = Deferred(loop=loop)
    handlers[1] = parked
    client.sendall(request(1) + request(2))
    spin(loop, 0.2)
    assert [c for _, c in dispatched] == [1]
    client.setblocking(False)
    parked.set_result({"error_code": 0, "api_keys": []})  # as Purgatory._finish does, outside any loop callback
    first = bytes(client.recv(65536))  # already on the socket: written inside set_result
    client.setblocking(True)
    assert decode_response(18, 0, first[4:])[0] == 1
    assert [c for _, c in dispatched] == [1], "request 2 was handled inside the call that completed request 1"
    spin(loop, 0.1)
    assert [c for _, c in dispatched] == [1, 2]
    assert decode_response(18, 0, read_frame(client))[0] == 2


def test_a_deferred_runs_its_listeners_inside_set_result_and_on_cancel():
    from kbroker.protocol.outcome import Deferred
    loop = asyncio.new_event_loop()
    try:
        seen: list[object] = []
        done: Deferred[int] = Deferred(loop=loop)
        done.when_done(lambda d: seen.append(d.result()))
        done.set_result(7)
        assert seen == [7]
        done.when_done(lambda d: seen.append("late"))  # already done: at once
        assert seen == [7, "late"]
        cancelled: Deferred[int] = Deferred(loop=loop)
        cancelled.when_done(lambda d: seen.append(d.cancelled()))
        cancelled.cancel()
        assert seen[-1] is True
        assert loop.run_until_complete(_awaited(loop)) == 3  # coroutines await it as any future
    finally:
        loop.close()


async def _awaited(loop) -> int:
    from kbroker.protocol.outcome import Deferred
    d: Deferred[int] = Deferred(loop=loop)
    loop.call_soon(d.set_result, 3)
    return await d
