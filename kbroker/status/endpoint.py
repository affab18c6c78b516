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

HTTP/1.1, one request per connection, GET only; anything else is answered 404/405.
"""
from __future__ import annotations

import asyncio
import json
import logging
from urllib.parse import urlsplit

from kbroker.handlers.context import BrokerContext
from kbroker.log import TopicPartition
from kbroker.metrics import CONTENT_TYPE, render
from kbroker.status.metrics import CommittedOffset, GroupStatus, scrape

# A JSON object of the status views (json.dumps writes it as it is).
JsonObject = dict[str, object]

log = logging.getLogger(__name__)

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}


class StatusServer:
    def __init__(self, broker: BrokerContext, host: str, port: int) -> None:
        self.broker = broker
        self.host = host
        self.port = port
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("status endpoint on http://%s:%d/status", self.host, self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            method, target, _ = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
            code, body = self._answer(method, urlsplit(target).path)
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            code, body = 400, {"error": "a GET request line and headers were expected"}
        except Exception:
            log.exception("status request failed")
            code, body = 503, {"error": "internal error"}
        if isinstance(body, bytes):
            data, content_type = body, CONTENT_TYPE
        else:
            data, content_type = json.dumps(body, indent=1, sort_keys=True).encode() + b"\n", "application/json"
        writer.write(f"HTTP/1.1 {code} {_REASONS[code]}\r\nContent-Type: {content_type}\r\n"
                     f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode() + data)
        try:
            await writer.drain()
        except ConnectionError:
            pass
        writer.close()

    def _answer(self, method: str, path: str) -> tuple[int, JsonObject | bytes]:
        if method != "GET":
            return 405, {"error": f"{method} is not served; use GET"}
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
