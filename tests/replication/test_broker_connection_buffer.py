"""The inter-broker client reads each answer into one buffer it keeps (kbroker.interbroker.client._Responses):
records arrive as views into it, it is used again only once nothing holds such a view, and it grows to the
largest answer and stays that size."""
from __future__ import annotations

import asyncio

import pytest

from kbroker.interbroker.client import FIRST_BUFFER_BYTES, _Responses


def _deliver(r: _Responses, data: bytes, step: int) -> None:
    for i in range(0, len(data), step):  # as the transport hands bytes over: a piece at a time
        chunk = data[i:i + step]
        r.get_buffer(-1)[:len(chunk)] = chunk
        r.buffer_updated(len(chunk))


def _frame(body: bytes) -> bytes:
    return len(body).to_bytes(4, "big") + body


def test_answers_arrive_whole_in_the_same_buffer_while_nothing_holds_them() -> None:
    async def run() -> None:
        r = _Responses()
        first = id(r._buf)
        for n, step in ((5, 1), (1000, 7), (40_000, 4096)):
            body = bytes(range(256)) * (n // 256) + b"x" * (n % 256)
            waiter = r.expect()
            _deliver(r, _frame(body), step)
            frame = await waiter
            assert bytes(frame) == body
            del frame, waiter
        assert id(r._buf) == first and len(r._buf) == FIRST_BUFFER_BYTES
    asyncio.run(run())


def test_a_held_view_keeps_its_answer_intact_and_the_next_answer_gets_a_new_buffer() -> None:
    async def run() -> None:
        r = _Responses()
        waiter = r.expect()
        _deliver(r, _frame(b"records of the first answer"), 4)
        kept = (await waiter)[0:7]  # as a decoded Fetch answer's records are
        del waiter
        waiter = r.expect()
        _deliver(r, _frame(b"SECOND ANSWER, longer than the first one"), 64)
        assert bytes(await waiter) == b"SECOND ANSWER, longer than the first one"
        assert bytes(kept) == b"records"
    asyncio.run(run())


def test_a_large_answer_grows_the_buffer_once_and_it_stays_that_size() -> None:
    async def run() -> None:
        r = _Responses()
        big = b"r" * (3 * FIRST_BUFFER_BYTES + 5)
        for _ in range(3):
            waiter = r.expect()
            _deliver(r, _frame(big), 65536)
            assert bytes(await waiter) == big
            del waiter
        size = len(r._buf)
        assert size >= len(big) + 4
        waiter = r.expect()
        _deliver(r, _frame(b"small"), 2)
        assert bytes(await waiter) == b"small" and len(r._buf) == size
    asyncio.run(run())


def test_bytes_no_request_asked_for_and_a_lost_connection_fail_the_wait() -> None:
    async def run() -> None:
        r = _Responses()
        waiter = r.expect()
        _deliver(r, _frame(b"one") + _frame(b"two"), 100)  # two answers to one request
        with pytest.raises(ConnectionError):
            await waiter
        r2 = _Responses()
        waiter = r2.expect()
        r2.connection_lost(None)
        with pytest.raises(ConnectionError):
            await waiter
        with pytest.raises(ConnectionError):
            r2.expect()
    asyncio.run(run())
