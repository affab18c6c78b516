"""The dispatch chain every request goes through between the NetworkServer and its handler (the part of
Kafka's ``KafkaApis.handle`` that is not an API; apache/kafka ``core/src/main/scala/kafka/server/KafkaApis.scala``):

    startup gate   in ZooKeeper mode, requests wait until the broker has registered and read the cluster,
                   as Kafka's socket server processes none before ``KafkaServer.startup`` completes
    unknown api    a key no handler serves closes the connection, as Kafka's processor does
    quotas         with client quotas configured, each request is measured and throttled (KIP-219)

The broker builds one and hands it to every listener's NetworkServer."""
from __future__ import annotations

import asyncio
import logging
from typing import Any

from kbroker.handlers.context import BrokerContext
from kbroker.handlers.registry import Answer, ClientConnection, Handler
from kbroker.protocol.header import RequestHeader
from kbroker.protocol.outcome import CLOSE
from kbroker.protocol.schema import Struct
from kbroker.security.quotas import QuotaManager

log = logging.getLogger(__name__)


class Dispatcher:
    def __init__(self, ctx: BrokerContext, handlers: dict[int, Handler], quotas: QuotaManager, *,
                 gated: bool) -> None:
        self._ctx = ctx
        self._handlers = handlers
        self._quotas = quotas
        # gated (ZooKeeper mode): the broker listens, to learn its port for the registration, before it has
        # registered and read the cluster
        self._gated = gated
        self._started = asyncio.Event()

    def open(self) -> None:
        """Startup is complete: serve the requests that waited and every one after."""
        self._started.set()

    def __call__(self, header: RequestHeader, body: Struct, conn: ClientConnection) -> Answer[Any]:
        if self._gated and not self._started.is_set():
            return self._dispatch_once_started(header, body, conn)
        handler = self._handlers.get(header.api_key)
        if handler is None:
            log.info("closing a connection that sent api key %d, which is not served", header.api_key)
            return CLOSE
        if self._quotas.enabled:  # client quotas configured: measure, throttle (KIP-219)
            return self._quotas.run(handler, self._ctx, header, body, conn)
        return handler(self._ctx, header, body, conn)

    async def _dispatch_once_started(self, header: RequestHeader, body: Struct, conn: ClientConnection) -> Any:
        """Before the first cluster view a Metadata request would see no live broker and no topic, and try to
        auto-create what exists (INVALID_REPLICATION_FACTOR, which clients take as final for their sends)."""
        await self._started.wait()
        result = self(header, body, conn)
        if asyncio.iscoroutine(result) or isinstance(result, asyncio.Future):
            result = await result
        return result
