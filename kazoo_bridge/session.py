"""``SessionManager``: what a broker does when its ZooKeeper session comes and goes.

Kafka's rules (KafkaController's session-expiration handler, ``processExpire`` and
``processRegisterBrokerAndReelect``; the znodes of apache/kafka ``core/src/main/scala/kafka/zk/ZkData.scala``):

* LOST (the session expired: ``/brokers/ids/<id>`` and ``/controller`` are gone, or about to
  be): the controller resigns at once -- it may already have been replaced, and every write it
  makes from now on would be fenced anyway. ``on_resign`` is called first thing.
* CONNECTED with a new session: register the broker again (a fresh ``/brokers/ids/<id>``,
  replacing a node the expired session may still own), report the new broker epoch
  (``on_registered``), then let the controller run election again (``on_reelect``).
* Every CONNECTED (new session or the same one after SUSPENDED): check that our registration
  is still ours, then ``on_reconnect`` -- re-read the authoritative state instead of trusting
  the watch events received so far (events can be lost or coalesced across a disconnect).

Threads (kazoo issues #491/#355/#241: listeners that block; kazoo #185: asyncio). The store's
state listener only posts the event to an asyncio loop with ``call_soon_threadsafe`` and
returns. With ``loop`` given, every callback runs on that loop (the broker's); without, on a
private loop in a thread of its own. Callbacks may be plain functions or coroutine functions.
Store calls (which block) run on a one-thread executor, never on the loop.

Works over any ``MetadataStore`` (the embedded store's ``expire_session`` test hook plays the
same sequence), so the same tests drive both.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import inspect
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from zk_compat import layout
from zk_compat.clock import wall_ms
from zk_compat.layout import BrokerIdInUseError
from zk_compat.store import ConnectionLossError, MetadataStore, SessionExpiredError, SessionState
from zk_compat.znodes import BrokerIdZNode, BrokerInfo

log = logging.getLogger(__name__)

Callback = Callable[..., Any]


class SessionManager:
    """Keeps one broker registered across ZooKeeper sessions and tells the controller when to
    resign and re-elect.

    ``on_resign()``: stop acting as controller now (called on LOST, before anything else; keep
    it short: drop controller state, cancel controller work). ``on_reelect()``: run election
    again (called after every re-registration: in a new session, or when the node went
    missing). ``on_reconnect()``: re-read
    authoritative state (after every reconnect, last). ``on_registered(broker_epoch)``: the
    broker epoch (czxid of the registration) changed. ``on_error(exc)``: a re-registration
    failed and will be retried after ``retry_backoff_ms``.
    """

    def __init__(self, store: MetadataStore, broker_info: BrokerInfo, *,
                 on_resign: Callback | None = None, on_reelect: Callback | None = None,
                 on_reconnect: Callback | None = None, on_registered: Callback | None = None,
                 on_error: Callback | None = None, loop: asyncio.AbstractEventLoop | None = None,
                 retry_backoff_ms: int = 1000, stale_registration_wait_ms: int | None = None) -> None:
        self._store = store
        self._broker_info = broker_info
        self._callbacks: dict[str, Callback | None] = {
            "resign": on_resign, "reelect": on_reelect, "reconnect": on_reconnect,
            "registered": on_registered, "error": on_error,
        }
        self._retry_backoff_s = retry_backoff_ms / 1000.0
        if stale_registration_wait_ms is None:  # the session timeout, and a little for the server's tick
            stale_registration_wait_ms = int(getattr(store, "session_timeout_ms", 0)) + 2000
        self._stale_registration_wait_s = stale_registration_wait_ms / 1000.0
        self._own_loop = loop is None
        self._loop = loop if loop is not None else asyncio.new_event_loop()
        self._loop_thread: threading.Thread | None = None
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="zk-session")
        self._started = False
        self._stopped = False
        # loop-thread state
        self._state = SessionState.CONNECTED
        self._generation = 0  # bumped on every LOST
        self._needs_registration = False
        self._pending_reconnect = False
        self._job: asyncio.Task[None] | None = None
        # executor / start() state
        self._registered_session_id: int | None = None
        self._broker_epoch: int | None = None

    @property
    def broker_epoch(self) -> int | None:
        """The current registration's czxid (Kafka's broker epoch)."""
        return self._broker_epoch

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The loop the callbacks run on."""
        return self._loop

    # -- lifecycle

    def start(self) -> int:
        """Register the broker (blocking) and start following the session. Returns the broker
        epoch. Raises BrokerIdInUseError if another live broker still holds the id once the
        registration of a crashed predecessor would have expired (its session timeout), as Kafka's
        startup does. Do not call it on a running loop's thread: use ``start_async``."""
        if self._started:
            raise RuntimeError("SessionManager.start() called twice")
        self._started = True
        self._store.add_listener(self._on_store_state)
        try:
            epoch = self._register_at_start()
        except BaseException:
            self._store.remove_listener(self._on_store_state)
            self._executor.shutdown(wait=False)
            if self._own_loop:
                self._loop.close()
            raise
        self._broker_epoch = epoch
        if self._own_loop:
            self._loop_thread = threading.Thread(target=self._loop.run_forever, name="zk-session-loop", daemon=True)
            self._loop_thread.start()
        return epoch

    async def start_async(self) -> int:
        """``start()`` from a coroutine on ``loop`` (the blocking part runs off the loop)."""
        return await asyncio.get_running_loop().run_in_executor(None, self.start)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop following the session (the registration stays until the session ends)."""
        if self._stopped:
            return
        self._stopped = True
        self._store.remove_listener(self._on_store_state)
        if self._loop.is_closed():
            return

        def cancel() -> None:
            if self._job is not None:
                self._job.cancel()
            if self._own_loop:
                self._loop.stop()

        if self._loop_thread is not None or not self._own_loop:
            try:
                self._loop.call_soon_threadsafe(cancel)
            except RuntimeError:
                pass  # the broker's loop is already closed
        if self._loop_thread is not None:
            self._loop_thread.join(timeout)
            if not self._loop_thread.is_alive():
                self._loop.close()
        elif self._own_loop:
            self._loop.close()  # never started
        self._executor.shutdown(wait=False, cancel_futures=True)

    # -- the store's listener: post, never block

    def _on_store_state(self, state: SessionState) -> None:
        if self._stopped:
            return
        try:
            self._loop.call_soon_threadsafe(self._handle_state, state)
        except RuntimeError:
            log.debug("session event %s after the loop closed; ignored", state.value)

    # -- on the loop

    def _handle_state(self, state: SessionState) -> None:
        if self._stopped:
            return
        self._state = state
        if state is SessionState.LOST:
            self._generation += 1
            self._needs_registration = True
            log.warning("ZooKeeper session of broker %d expired: resigning as controller; the broker "
                        "registers again once a new session is established", self._broker_info.id)
            self._invoke_now("resign")
        elif state is SessionState.SUSPENDED:
            log.info("ZooKeeper connection of broker %d suspended; waiting for it to come back", self._broker_info.id)
        else:
            self._pending_reconnect = True
            if self._job is None or self._job.done():
                self._job = self._loop.create_task(self._after_connected())

    def _call(self, name: str, *args: Any) -> Any:
        """Call ``on_<name>``; its result (an awaitable for a coroutine function), or None if
        there is no such callback or it failed (logged)."""
        callback = self._callbacks[name]
        if callback is None:
            return None
        try:
            return callback(*args)
        except Exception:
            log.exception("session callback %r failed", callback)
            return None

    async def _finish(self, name: str, awaitable: Any) -> None:
        try:
            await awaitable
        except Exception:
            log.exception("session callback %r failed", self._callbacks[name])

    def _invoke_now(self, name: str, *args: Any) -> None:
        """``on_<name>`` at once; a coroutine it starts finishes in a task of its own."""
        result = self._call(name, *args)
        if inspect.isawaitable(result):
            self._loop.create_task(self._finish(name, result))

    async def _invoke(self, name: str, *args: Any) -> None:
        """``on_<name>``, awaited to the end."""
        result = self._call(name, *args)
        if inspect.isawaitable(result):
            await self._finish(name, result)

    async def _after_connected(self) -> None:
        """One CONNECTED at a time: registration check, re-registration, callbacks."""
        while self._pending_reconnect and not self._stopped:
            self._pending_reconnect = False
            if self._state is not SessionState.CONNECTED:
                return  # the next CONNECTED starts again
            generation = self._generation
            try:
                if not self._needs_registration:
                    self._needs_registration = not await self._in_executor(self._registration_is_ours)
                    if self._needs_registration:
                        log.warning("/brokers/ids/%d is missing or not ours after a reconnect; registering again",
                                    self._broker_info.id)
                if self._needs_registration:
                    epoch = await self._in_executor(self._register)
                    if generation != self._generation:
                        continue  # lost again meanwhile: the next CONNECTED registers again
                    self._needs_registration = False
                    self._broker_epoch = epoch
                    await self._invoke("registered", epoch)
                    await self._invoke("reelect")
            except (ConnectionLossError, SessionExpiredError) as exc:
                log.info("re-registration of broker %d interrupted (%s); retrying", self._broker_info.id, exc)
                if self._state is SessionState.CONNECTED and generation == self._generation:
                    # no state change is coming to restart us (a reply timed out): retry later
                    await asyncio.sleep(self._retry_backoff_s)
                    self._pending_reconnect = True
                continue
            except Exception as exc:
                if isinstance(exc, BrokerIdInUseError):
                    log.error("%s; retrying in %.1f s", exc, self._retry_backoff_s)
                else:
                    log.exception("re-registration of broker %d failed; retrying in %.1f s",
                                  self._broker_info.id, self._retry_backoff_s)
                await self._invoke("error", exc)
                await asyncio.sleep(self._retry_backoff_s)
                self._pending_reconnect = True
                continue
            if generation == self._generation:
                await self._invoke("reconnect")

    async def _in_executor(self, fn: Callable[[], Any]) -> Any:
        return await self._loop.run_in_executor(self._executor, fn)

    # -- blocking store work (executor, or the caller of start())

    def _register_at_start(self) -> int:
        """Register; while ``/brokers/ids/<id>`` belongs to another session, retry until that session could have
        timed out. A broker restarted right after a crash (kill -9) finds its previous process's registration
        still there: ZooKeeper drops it only once that session times out, and refusing to start then would
        turn every quick restart into an outage. A broker id truly held by another live broker is still refused,
        after the wait."""
        deadline = time.monotonic() + self._stale_registration_wait_s
        while True:
            try:
                return self._register(refresh_timestamp=False)
            except BrokerIdInUseError:
                if time.monotonic() >= deadline:
                    raise
                log.warning("/brokers/ids/%d is held by another session, maybe our previous process's: waiting "
                            "up to %.0f s for it to expire", self._broker_info.id,
                            max(0.0, deadline - time.monotonic()))
                time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))

    def _register(self, refresh_timestamp: bool = True) -> int:
        info = self._broker_info
        if refresh_timestamp:  # Kafka writes the time of each registration
            info = dataclasses.replace(info, timestamp_ms=wall_ms())
        epoch = layout.register_broker(self._store, info, previous_session_id=self._registered_session_id)
        stat = self._store.exists(BrokerIdZNode.path(info.id))
        self._registered_session_id = stat.ephemeral_owner if stat is not None else self._store.session_id
        log.info("broker %d registered in session %#x (broker epoch %d)", info.id, self._registered_session_id, epoch)
        return epoch

    def _registration_is_ours(self) -> bool:
        stat = self._store.exists(BrokerIdZNode.path(self._broker_info.id))
        return stat is not None and stat.ephemeral_owner == self._store.session_id
