"""zk_compat's MetadataStore over a real ZooKeeper ensemble, through kazoo.

* ``store``: ``KazooStore`` / ``connect(zookeeper_connect, session_timeout_ms, connection_timeout_ms)``,
  the same Protocol, exceptions and watch semantics as ``zk_compat.embedded``.
* ``session``: ``SessionManager``, which keeps ``/brokers/ids/<id>`` registered across session
  expiry, tells the controller to resign and re-elect, and asks for a re-read after every
  reconnect. Events reach the broker's asyncio loop via ``call_soon_threadsafe``.

Only the broker's composition root (``kbroker/broker.py``) imports this package; everything else
codes against ``zk_compat.store.MetadataStore``. It uses only zk_compat's public modules.
"""
from kazoo_bridge.session import SessionManager
from kazoo_bridge.store import KazooStore, connect

__all__ = ["KazooStore", "SessionManager", "connect"]
