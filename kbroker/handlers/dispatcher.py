"""The dispatch chain every request goes through between the NetworkServer and its handler (the part of
Kafka's ``KafkaApis.handle`` that is not an API; apache/kafka ``core/src/main/scala/kafka/server/KafkaApis.scala``):

    unknown api    a key no handler serves closes the connection, as Kafka's processor does
    quotas         with client quotas configured, each request is measured and throttled (KIP-219)

The broker builds one and hands it to every listener's NetworkServer. No request reaches it before the broker has
started: the listeners accept connections only then (``Broker.start``), as Kafka's socket server processes none
before ``KafkaServer.startup`` completes."""
from __future__ import annotations

import logging

from kbroker.handlers.context import BrokerContext
from kbroker.handlers.registry import ClientConnection, Handler
from kbroker.protocol.header import RequestHeader
from kbroker.protocol.outcome import CLOSE, Reply
from kbroker.protocol.schema import Struct
from kbroker.security.quotas import QuotaManager

log = logging.getLogger(__name__)


class Dispatcher:
    def __init__(self, ctx: BrokerContext, handlers: dict[int, Handler], quotas: QuotaManager) -> None:
        self._ctx = ctx
        self._handlers = handlers
        self._quotas = quotas

    def __call__(self, header: RequestHeader, body: Struct, conn: ClientConnection) -> Reply:
        handler = self._handlers.get(header.api_key)
        if handler is None:
            log.info("closing a connection that sent api key %d, which is not served", header.api_key)
            return CLOSE
        if self._quotas.enabled:  # client quotas configured: measure, throttle (KIP-219)
            throttled: Reply = self._quotas.run(handler, self._ctx, header, body, conn)
            return throttled
        answer: Reply = handler(self._ctx, header, body, conn)
        return answer
