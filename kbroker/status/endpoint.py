"""A small HTTP status endpoint (``status.listener=http://HOST:PORT``; empty, the default, turns it
off) that a browser, a monitor or a deployment script reads as JSON:

    GET /status     everything below in one object
    GET /brokers    live brokers and the controller
    GET /topics     the partitions this broker hosts: role, leader, leader epoch, replicas, ISR,
                    log start/end offsets, high watermark, last stable offset
    GET /groups     the groups this broker coordinates: state, members, committed offsets and lag
                    (lag where the partition's high watermark is known here, else null)
    GET /health     200 with {"under_replicated": 0} when every partition this broker leads has
                    its full ISR, 503 otherwise (a rolling restart waits for 200 on every broker)
    GET /metrics    Prometheus text format 0.0.4 (``kbroker.status.metrics``), named as the Prometheus
                    JMX exporter names Kafka's metrics, and group lag as kafka-exporter names it

aiohttp serves it on the broker's own event loop (HTTP/1.1 with keep-alive). GET only: another method is
answered 405 with ``Allow: GET``, an unknown path 404, both with a JSON error; a request aiohttp cannot parse
gets its 400 with the parser's reason.
"""
from __future__ import annotations

import json
import logging
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage
from aiohttp.typedefs import Handler

from kbroker.handlers.context import BrokerContext
from kbroker.log import TopicPartition
from kbroker.metrics import CONTENT_TYPE, render
from kbroker.status.metrics import CommittedOffset, GroupStatus, scrape

# A JSON object of the status views (json.dumps writes it as it is).
JsonObject = dict[str, object]

log = logging.getLogger(__name__)

# A connection that has not sent a whole request within this long (none yet, half a header, or idle after an
# answer) is closed: a slow or silent client holds a socket no longer than that.
IDLE_TIMEOUT_S = 10.0
# stop() waits this long for an answer still being written (a client not reading it), then cuts the connection.
SHUTDOWN_TIMEOUT_S = 2.0


class _ClientFaultsAtDebug(logging.LoggerAdapter[logging.Logger]):
    """aiohttp's server logs a request it cannot parse as an ERROR with its traceback. Here that is the
    client's fault, answered 400 (the broker's log keeps ERROR for its own failures): debug."""

    def exception(self, msg: object, *args: object, exc_info: Any = True, **kwargs: Any) -> None:
        if isinstance(exc_info, BadHttpMessage):
            self.logger.debug(msg, *args, exc_info=exc_info, **kwargs)
        else:
            self.logger.exception(msg, *args, exc_info=exc_info, **kwargs)


class StatusServer:
    def __init__(self, broker: BrokerContext, host: str, port: int) -> None:
        self.broker = broker
        self.host = host
        self.port = port
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application(middlewares=[_json_method_not_allowed])
        # one route for every path, so that "/", "/status/" and "/status" are one view, as before; aiohttp
        # answers another method 405 with Allow: GET (HEAD too: allow_head=False keeps the endpoint GET only)
        app.router.add_get("/{path:.*}", self._get, allow_head=False)
        runner = web.AppRunner(app, access_log=None,  # no log line per scrape
                               logger=_ClientFaultsAtDebug(logging.getLogger(f"{__name__}.http")),
                               keepalive_timeout=IDLE_TIMEOUT_S, shutdown_timeout=SHUTDOWN_TIMEOUT_S)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self.port = site.port  # the bound one when the listener asked for port 0
        log.info("status endpoint on http://%s:%d/status", self.host, self.port)

    async def stop(self) -> None:
        """Stop listening and close every connection, idle or half-sent ones at once."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def _get(self, request: web.Request) -> web.Response:
        try:
            code, body = self._answer(request.path)
        except Exception:
            log.exception("status request failed")
            code, body = 503, {"error": "internal error"}
        return _response(code, body)

    def _answer(self, path: str) -> tuple[int, JsonObject | bytes]:
        path = path.rstrip("/") or "/status"
        if path == "/status":
            return 200, {"broker_id": self.broker.broker_id, **self.brokers(), "partitions": self.partitions(),
                         "groups": self.groups(), "under_replicated": self.under_replicated()}
        if path == "/brokers":
            return 200, self.brokers()
        if path == "/topics":
            return 200, {"partitions": self.partitions()}
        if path == "/groups":
            return 200, {"groups": self.groups()}
        if path == "/health":
            count = self.under_replicated()
            return (200 if count == 0 else 503), {"under_replicated": count}
        if path == "/metrics":
            return 200, render(scrape(self.broker, self.groups(), self.under_replicated()))
        return 404, {"error": f"no {path}; try /status, /brokers, /topics, /groups, /health or /metrics"}

    # -- views --------------------------------------------------------------------------------

    def brokers(self) -> JsonObject:
        topics = self.broker.topics
        return {"controller_id": topics.controller_id(),
                "brokers": [{"id": x.id, "host": x.host, "port": x.port, "rack": x.rack}
                            for x in topics.live_brokers()]}

    def partitions(self) -> list[JsonObject]:
        out: list[JsonObject] = []
        for tp, p in sorted(self.broker.replicas.partitions.items()):
            plog = p.log
            out.append({
                "topic": tp.topic, "partition": tp.partition,
                "role": "leader" if p.is_leader else ("follower" if p.leader_id >= 0 else "none"),
                "leader": p.leader_id, "leader_epoch": p.leader_epoch, "replicas": list(p.replicas),
                "isr": list(p.isr), "log_start_offset": plog.log_start_offset, "log_end_offset": plog.log_end_offset,
                "high_watermark": plog.high_watermark, "last_stable_offset": p.last_stable_offset,
                "offline": plog.offline})
        return out

    def under_replicated(self) -> int:
        return sum(1 for p in self.broker.replicas.partitions.values()
                   if p.is_leader and len(p.isr) < len(p.replicas))

    def groups(self) -> list[GroupStatus]:
        coordinator = self.broker.groups.coordinator
        if coordinator is None:
            return []
        _, overviews = coordinator.list_groups()
        out: list[GroupStatus] = []
        for overview in sorted(overviews, key=lambda g: g.group_id):
            description = coordinator.describe_group(overview.group_id)
            try:
                offsets = coordinator.fetch_offsets(overview.group_id)
            except Exception:  # moved away meanwhile
                continue
            committed: list[CommittedOffset] = []
            for (topic, index), (offset, _, _, _code) in sorted(offsets.items()):
                partition = self.broker.replicas.partitions.get(TopicPartition(topic, index))
                hw = partition.high_watermark if partition is not None and partition.is_leader else None
                committed.append({"topic": topic, "partition": index, "offset": offset, "high_watermark": hw,
                                  "lag": None if hw is None or offset < 0 else max(0, hw - offset)})
            out.append({"group": overview.group_id, "state": description.state,
                        "protocol_type": overview.protocol_type, "members": len(description.members),
                        "offsets": committed})
        return out


@web.middleware
async def _json_method_not_allowed(request: web.Request, handler: Handler) -> web.StreamResponse:
    """aiohttp's router refuses a method with a text body; the endpoint's errors are JSON."""
    try:
        return await handler(request)
    except web.HTTPMethodNotAllowed as refused:
        return _response(405, {"error": f"{request.method} is not served; use GET"},
                         {"Allow": refused.headers["Allow"]})


def _response(code: int, body: JsonObject | bytes, headers: dict[str, str] | None = None) -> web.Response:
    if isinstance(body, bytes):
        data, content_type = body, CONTENT_TYPE
    else:
        data, content_type = json.dumps(body, indent=1, sort_keys=True).encode() + b"\n", "application/json"
    return web.Response(status=code, body=data, headers={"Content-Type": content_type, **(headers or {})})
