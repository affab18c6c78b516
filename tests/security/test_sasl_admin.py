"""The SASL principal at work, on a real broker with Kafka's AclAuthorizer: Describe/AlterUserScramCredentials
need DESCRIBE / ALTER on the cluster (31 otherwise, for the whole request or every user), a super user
(``User:admin`` over PLAIN) may; and the broker's own SASL client (kbroker.security.sasl_client, what
inter-broker connections use) authenticates with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 over a real
connection and reports a wrong password with Kafka's code and text."""
from __future__ import annotations

import asyncio
import struct

import pytest

from kbroker.protocol import decode_response, encode_request
from kbroker.security.sasl_client import SaslClientError, authenticate
from tests.security.sasl_helpers import PLAIN_USERS, SCRAM_USERS, Raw, run_broker, sasl_broker


@pytest.fixture(scope="module")
def bp(tmp_path_factory):
    proc = sasl_broker(tmp_path_factory.mktemp("sasl-admin"), {
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin",
        "allow.everyone.if.no.acl.found": "false",
    })
    yield from run_broker(proc)


def authenticated(bp, user: str) -> Raw:
    r = Raw(bp.sasl_port)
    assert r.plain(user, PLAIN_USERS[user]).error_code == 0
    return r


def upsertion(name: str) -> dict:
    return {"name": name, "mechanism": 2, "iterations": 4096, "salt": b"salt", "salted_password": b"x" * 64}


def test_scram_apis_need_cluster_permissions(bp):
    alice = authenticated(bp, "alice")
    described = alice.request(50, 0, {"users": None})
    assert (described.error_code, described.results) == (31, [])
    altered = alice.request(51, 0, {"deletions": [], "upsertions": [upsertion("x1"), upsertion("x2")]})
    assert [(r.user, r.error_code) for r in altered.results] == [("x1", 31), ("x2", 31)]
    admin = authenticated(bp, "admin")
    assert admin.request(50, 0, {"users": None}).error_code == 0
    altered = admin.request(51, 0, {"deletions": [], "upsertions": [upsertion("x1")]})
    assert [(r.user, r.error_code) for r in altered.results] == [("x1", 0)]
    described = admin.request(50, 0, {"users": [{"name": "x1"}]})
    assert [(r.user, r.error_code, [(c.mechanism, c.iterations) for c in r.credential_infos])
            for r in described.results] == [("x1", 0, [(2, 4096)])]
    # the anonymous PLAINTEXT listener is no super user either
    anon = Raw(bp.port)
    assert anon.request(50, 0, {"users": None}).error_code == 31


async def _client_session(port: int, mechanism: str, user: str, password: str, version: int) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    corr = 0

    async def request(api_key: int, api_version: int, body):
        nonlocal corr
        corr += 1
        writer.write(encode_request(api_key, api_version, corr, "kbroker-inter-broker", body))
        await writer.drain()
        size = struct.unpack(">i", await reader.readexactly(4))[0]
        got, resp = decode_response(api_key, api_version, await reader.readexactly(size))
        assert got == corr
        return resp
    try:
        return await authenticate(request, mechanism, user, password, authenticate_version=version)
    finally:
        writer.close()


@pytest.mark.parametrize("mechanism,version", [("PLAIN", 1), ("SCRAM-SHA-256", 2), ("SCRAM-SHA-512", 1)])
def test_inter_broker_sasl_client(bp, mechanism, version):
    # SCRAM users for this broker, through the super user
    admin = authenticated(bp, "admin")
    from kbroker.security.credentials import salted_password
    ups = [{"name": u, "mechanism": 1 if m == "SCRAM-SHA-256" else 2, "iterations": 4096, "salt": b"s4lt",
            "salted_password": salted_password(m, p, b"s4lt", 4096)} for m, (u, p) in SCRAM_USERS.items()]
    assert all(r.error_code == 0 for r in admin.request(51, 0, {"deletions": [], "upsertions": ups}).results)
    user, password = ("admin", PLAIN_USERS["admin"]) if mechanism == "PLAIN" else SCRAM_USERS[mechanism]
    assert asyncio.run(_client_session(bp.sasl_port, mechanism, user, password, version)) == 0
    with pytest.raises(SaslClientError) as info:
        asyncio.run(_client_session(bp.sasl_port, mechanism, user, "wrong", version))
    assert info.value.error_code == 58
    assert "Authentication failed" in str(info.value) and "wrong" not in str(info.value)
    with pytest.raises(SaslClientError) as info:
        asyncio.run(_client_session(bp.sasl_port, "GSSAPI", user, password, version))
    assert info.value.error_code == 33
