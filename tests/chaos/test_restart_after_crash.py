"""Found by the chaos harness (kill9): a broker restarted within its ZooKeeper session timeout of a SIGKILL found
its previous process's ``/brokers/ids/<id>`` still there and refused to start (BrokerIdInUseError). It must wait
for that stale registration to expire, then register."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import time

from kazoo_bridge.local_server import ZooKeeperServer
from kazoo_bridge.session import SessionManager
from tests.store_contract.backends import ZooKeeperBackend
from zk_compat import layout
from zk_compat.znodes import BrokerInfo, EndPoint

INFO = BrokerInfo.from_endpoints(1, [EndPoint("PLAINTEXT", "127.0.0.1", 9092, "PLAINTEXT")], timestamp_ms=1)
SESSION_MS = 3000

# the crashed predecessor: registers broker 1 in a session of its own, then waits to be SIGKILLed
PREDECESSOR = textwrap.dedent("""
    import sys, time
    from kazoo_bridge.store import connect
    from zk_compat import layout
    from zk_compat.znodes import BrokerInfo, EndPoint
    store = connect(sys.argv[1], {session_ms}, 5000)
    layout.ensure_persistent_paths(store)
    layout.register_broker(store, BrokerInfo.from_endpoints(
        1, [EndPoint("PLAINTEXT", "127.0.0.1", 9092, "PLAINTEXT")], timestamp_ms=1))
    print("registered", flush=True)
    time.sleep(600)
""").format(session_ms=SESSION_MS)


def test_a_restart_right_after_a_crash_waits_for_the_stale_registration(zookeeper_server: ZooKeeperServer) -> None:
    backend = ZooKeeperBackend(zookeeper_server)
    store = backend.connect(session_timeout_ms=SESSION_MS)
    layout.ensure_persistent_paths(store)
    predecessor = subprocess.Popen([sys.executable, "-c", PREDECESSOR, zookeeper_server.hosts + backend.chroot],
                                   stdout=subprocess.PIPE, text=True)
    manager: SessionManager | None = None
    try:
        assert predecessor.stdout is not None and predecessor.stdout.readline().strip() == "registered"
        stale = store.exists("/brokers/ids/1")
        assert stale is not None and stale.ephemeral_owner != store.session_id
        predecessor.kill()  # kill -9: its session lives on until the server times it out
        predecessor.wait()
        manager = SessionManager(store, INFO)
        started = time.monotonic()
        epoch = manager.start()  # the old code raised BrokerIdInUseError here
        assert time.monotonic() - started < SESSION_MS / 1000 + 10
        now = store.exists("/brokers/ids/1")
        assert now is not None and now.ephemeral_owner == store.session_id and now.czxid == epoch
    finally:
        if predecessor.poll() is None:
            predecessor.kill()
            predecessor.wait()
        if manager is not None:
            manager.stop()
        backend.close()
