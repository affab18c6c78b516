"""What the connection offers the SASL authenticator and the quotas: muting (KIP-219 throttling stops
reading, nothing is lost), the delayed close after a failed authentication (the prepared response
arrives after the delay, then EOF), raw SASL tokens, and an interceptor that sees frames first."""
from __future__ import annotations

import asyncio
import socket
import time

import pytest

from kbroker.network import connection
from kbroker.protocol import decode_response, encode_request
from tests.network.loopback import RecordingDispatch, connection_on_loopback, read_frame


@pytest.fixture
def pair():
    dispatch = RecordingDispatch()
    with connection_on_loopback(dispatch) as (loop, conn, client, _):
        yield loop, conn, client, dispatch.dispatched


def request(correlation_id: int) -> bytes:
    return bytes(encode_request(18, 0, correlation_id, "hooks", {}))


def spin(loop, seconds: float) -> None:
    loop.run_until_complete(asyncio.sleep(seconds))


def test_a_muted_connection_reads_nothing_until_the_throttle_ends_and_loses_nothing(pair):
    loop, conn, client, dispatched = pair
    conn.mute(0.3)
    muted_at = time.monotonic()
    client.sendall(request(1) + request(2))
    spin(loop, 0.15)
    assert dispatched == []  # not read while muted
    spin(loop, 0.3)
    assert [c for _, c in dispatched] == [1, 2]
    assert dispatched[0][0] - muted_at >= 0.29
    for want in (1, 2):
        assert decode_response(18, 0, read_frame(client))[0] == want


def test_close_after_sends_the_prepared_response_after_the_delay_then_closes(pair):
    loop, conn, client, dispatched = pair
    started = time.monotonic()
    conn.close_after(0.2, "authentication failed", api_key=18, version=0, correlation_id=9,
                     body={"error_code": 58, "api_keys": []})
    client.sendall(request(3))  # ignored: nothing is read after a failed authentication
    spin(loop, 0.1)
    client.settimeout(0.05)
    with pytest.raises(TimeoutError):
        client.recv(1)
    spin(loop, 0.3)
    correlation, body = decode_response(18, 0, read_frame(client))
    assert correlation == 9 and body.error_code == 58 and time.monotonic() - started >= 0.2
    assert not conn.closed  # it waits for the client to hang up first (kafka-python 3 loses a response read with EOF)
    client.shutdown(socket.SHUT_WR)
    spin(loop, 0.1)
    assert conn.closed and dispatched == []
    assert client.recv(1) == b""


def test_close_after_closes_by_itself_when_the_client_never_hangs_up(pair):
    loop, conn, client, dispatched = pair
    conn.close_after(0.05, "authentication failed", api_key=18, version=0, correlation_id=9,
                     body={"error_code": 58, "api_keys": []})
    spin(loop, 0.2)
    assert decode_response(18, 0, read_frame(client))[1].error_code == 58
    client.sendall(request(3))  # read away, never answered
    spin(loop, connection.LINGER_S + 0.2)
    assert conn.closed and dispatched == []
    client.settimeout(2)
    assert client.recv(1) == b""


def test_send_token_is_a_bare_size_prefixed_frame_in_order(pair):
    loop, conn, client, dispatched = pair
    conn.send_token(b"")
    conn.send_token(b"r=abc,s=xyz,i=4096")
    spin(loop, 0.05)
    assert read_frame(client) == b""
    assert read_frame(client) == b"r=abc,s=xyz,i=4096"


def test_an_interceptor_sees_frames_first_and_may_hand_them_on(pair):
    loop, conn, client, dispatched = pair
    seen = []

    class Interceptor:
        def intercept(self, c, frame):
            seen.append(bytes(frame[:2]))
            if len(seen) == 1:
                c.send_token(b"taken")
                return True
            return False
    conn.authenticator = Interceptor()
    client.sendall(request(4) + request(5))
    spin(loop, 0.1)
    assert len(seen) == 2 and [c for _, c in dispatched] == [5]
    assert read_frame(client) == b"taken"
    assert decode_response(18, 0, read_frame(client))[0] == 5
