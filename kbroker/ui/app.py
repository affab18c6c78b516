"""The web app of `kbroker ui` (aiohttp): samples the cluster, keeps the history, serves the pages and pushes updates.

A loop asks the collector for a ``Snapshot`` every ``interval`` seconds and hands it to the sampler; the sampler
keeps its history in SQLite, so every call into it runs on one thread of its own (sqlite3 objects stay on the
thread that made them, and the event loop never waits on the disk). After each round the pages' data is computed
once and every open page hears of it by server-sent events (``/api/events``), then fetches its JSON again.

Routes: ``/`` (overview), ``/groups``, ``/groups/<group>``, ``/topics``, ``/topics/<topic>``, ``/brokers``, each
with its JSON twin at ``/api/`` + the same path (``/api/`` for the overview); ``/metrics`` (``kbroker.ui.exposition``);
``/static/`` (the scripts and styles, uPlot among them: nothing is loaded from anywhere else). Optional HTTP basic
auth guards every route.
"""
from __future__ import annotations

import asyncio
import hmac
import html
import json
import logging
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from aiohttp import BasicAuth, web

from kbroker.metrics import CONTENT_TYPE
from kbroker.ui import views
from kbroker.ui.exposition import metrics_text
from kbroker.ui.model import GroupView, Points, Snapshot, Storage
from kbroker.ui.views import Round, Span

log = logging.getLogger(__name__)

STATIC = Path(__file__).with_name("static")
SPANS: dict[str, views.Span] = {span: span for span in views.SPAN_MS}
KEEPALIVE_S = 15.0  # an SSE comment this often keeps proxies from closing an idle stream
T = TypeVar("T")


class Collector(Protocol):
    async def snapshot(self) -> Snapshot: ...
    async def close(self) -> None: ...


class Sampler(Protocol):
    """What the app asks of ``kbroker.ui.sampler.Sampler`` (all of it on the history thread)."""
    def ingest(self, snapshot: Snapshot) -> None: ...
    def groups(self) -> list[GroupView]: ...
    def group(self, name: str) -> GroupView | None: ...
    def lag_chart(self, group: str, span: Span, per_partition: bool = False, *,
                  storage: Storage | None = None) -> dict[str, Points]: ...
    def rate_chart(self, span: Span) -> dict[str, Points]: ...
    def topic_rates(self) -> dict[str, float]: ...
    def maintain(self) -> None: ...


@dataclass(frozen=True)
class Credentials:
    user: str
    password: str

    @classmethod
    def read(cls, path: str) -> Credentials:
        """The first line of ``path`` that is neither blank nor a ``#`` comment, as ``user:password``."""
        with open(path, encoding="utf-8") as f:
            lines = [line.strip() for line in f if line.strip() and not line.lstrip().startswith("#")]
        if not lines or ":" not in lines[0] or not lines[0].split(":", 1)[0]:
            raise ValueError(f"{path}: expected one line user:password")
        user, password = lines[0].split(":", 1)
        return cls(user, password)

    def admit(self, authorization: str) -> bool:
        try:
            given = BasicAuth.decode(authorization)
        except ValueError:
            return False
        # both compared in full, in constant time, so the answer's timing says nothing of either
        return (hmac.compare_digest(given.login.encode(), self.user.encode())
                & hmac.compare_digest(given.password.encode(), self.password.encode()))


PAGES = {"overview": "Overview", "groups": "Consumer groups", "group": "Consumer group", "topics": "Topics",
         "topic": "Topic", "brokers": "Brokers and disks"}
NAV = (("/", "overview", "Overview"), ("/groups", "groups", "Consumer groups"), ("/topics", "topics", "Topics"),
       ("/brokers", "brokers", "Brokers and disks"))


def page_html(page: str, name: str = "") -> str:
    """The shell of a page: ui.js fills ``main`` from the page's JSON twin and refreshes it at each update."""
    title = f"{PAGES[page]} {name}".strip()
    current = {"group": "groups", "topic": "topics"}.get(page, page)
    mark = ' class="current"'
    nav = "".join(f'<a href="{href}"{mark if key == current else ""}>{label}</a>' for href, key, label in NAV)
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>kbroker · {html.escape(title)}</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="/static/uPlot.min.css">
<link rel="stylesheet" href="/static/ui.css">
</head>
<body data-page="{page}" data-name="{html.escape(name)}">
<header><span class="brand">kbroker</span><nav>{nav}</nav>
<span id="live" title="the sampling round shown">connecting…</span></header>
<main id="main"><h1>{html.escape(title)}</h1><p class="note">Waiting for the first sample of the cluster…</p></main>
<script src="/static/uPlot.iife.min.js"></script>
<script src="/static/ui.js"></script>
</body>
</html>
"""


class Ui:
    def __init__(self, collector: Collector, make_sampler: Callable[[], Sampler], *, interval: float = 10.0,
                 maintain_every: float = 300.0, credentials: Credentials | None = None,
                 close_history: Callable[[], None] | None = None) -> None:
        if interval <= 0:
            raise ValueError("the sampling interval must be positive")
        self._collector = collector
        self._make_sampler = make_sampler
        self._sampler: Sampler | None = None
        self.interval = interval
        self.maintain_every = maintain_every
        self._credentials = credentials
        self._close_history = close_history  # on the history thread, as the app stops
        # one thread for everything that touches the history (SQLite): the sampler is made on it too
        self._history = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kbroker-ui-history")
        self._round: Round | None = None
        self._last_error: str | None = None
        self._streams: set[asyncio.Queue[Round | None]] = set()
        self._metrics_cache: tuple[Round | None, bytes] | None = None

    # -- the sampling loop ---------------------------------------------------------------------------------------

    async def _on_history(self, fn: Callable[[Sampler], T]) -> T:
        def call() -> T:
            if self._sampler is None:
                self._sampler = self._make_sampler()
            return fn(self._sampler)
        return await asyncio.get_running_loop().run_in_executor(self._history, call)

    async def open_history(self) -> None:
        """Makes the sampler (and opens its history) now, so that a history that cannot be opened stops the UI
        before it listens; raises what opening it raised (sqlite3.Error, OSError)."""
        await self._on_history(lambda sampler: None)

    async def sample_once(self) -> Round | None:
        """One round: a snapshot, the sampler's views of it, and an update to every open page."""
        try:
            snapshot = await self._collector.snapshot()
        except Exception as exc:  # the cluster may be unreachable for a while: say so, keep the last round, go on
            message = f"{type(exc).__name__}: {exc}"
            if message != self._last_error:
                log.warning("cannot sample the cluster: %s", message)
            self._last_error = message
            return None
        self._last_error = None
        seq = self._round.seq + 1 if self._round else 1

        def ingest(sampler: Sampler) -> Round:
            sampler.ingest(snapshot)
            return Round(seq, snapshot, tuple(sampler.groups()), sampler.topic_rates())
        try:
            self._round = await self._on_history(ingest)
        except (sqlite3.Error, OSError) as exc:  # a full disk, say: the pages keep the last round and say why
            log.error("cannot keep the sample in the history: %s", exc)
            self._last_error = f"history: {exc}"
            return None
        for stream in self._streams:
            _offer(stream, self._round)
        return self._round

    async def sample_forever(self) -> None:
        loop = asyncio.get_running_loop()
        next_maintenance = loop.time() + self.maintain_every
        while True:
            started = loop.time()
            try:
                await self.sample_once()
            except Exception as exc:  # a bug in a round must not end the sampling: log it, say it, go on
                log.exception("sampling round failed")
                self._last_error = f"{type(exc).__name__}: {exc}"
            if loop.time() >= next_maintenance:  # roll-ups, deletions and the size cap, off the event loop
                await self._on_history(lambda sampler: sampler.maintain())
                next_maintenance = loop.time() + self.maintain_every
            await asyncio.sleep(max(0.0, self.interval - (loop.time() - started)))

    # -- the web app ---------------------------------------------------------------------------------------------

    def app(self, *, sample: bool = True) -> web.Application:
        """The aiohttp application; ``sample=False`` leaves the loop out (a test then calls ``sample_once``)."""
        app = web.Application(middlewares=[self._guard])
        page = self._page
        app.router.add_get("/", page("overview"))
        app.router.add_get("/groups", page("groups"))
        app.router.add_get("/groups/{name:.+}", page("group"))
        app.router.add_get("/topics", page("topics"))
        app.router.add_get("/topics/{name:.+}", page("topic"))
        app.router.add_get("/brokers", page("brokers"))
        app.router.add_get("/api/", self._overview)
        app.router.add_get("/api/groups", self._json(views.groups))
        app.router.add_get("/api/groups/{name:.+}", self._group)
        app.router.add_get("/api/topics", self._json(views.topics))
        app.router.add_get("/api/topics/{name:.+}", self._topic)
        app.router.add_get("/api/brokers", self._json(views.brokers))
        app.router.add_get("/api/events", self._events)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_static("/static/", STATIC)
        app.on_shutdown.append(self._close_streams)
        app.on_cleanup.append(self._stop_history)
        if sample:
            app.cleanup_ctx.append(self._sampling)
        return app

    async def _sampling(self, app: web.Application) -> AsyncIterator[None]:
        task = asyncio.create_task(self.sample_forever(), name="kbroker-ui-sampler")
        yield
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass

    async def _stop_history(self, app: web.Application) -> None:
        loop = asyncio.get_running_loop()
        if self._close_history is not None and self._sampler is not None:
            await loop.run_in_executor(self._history, self._close_history)
        await loop.run_in_executor(None, self._history.shutdown)

    @web.middleware
    async def _guard(self, request: web.Request,
                     handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        if self._credentials and not self._credentials.admit(request.headers.get("Authorization", "")):
            return web.Response(status=401, text="authentication required\n",
                                headers={"WWW-Authenticate": 'Basic realm="kbroker ui", charset="UTF-8"'})
        response = await handler(request)
        # the pages load only what kbroker serves: a script that tried anything else would be refused
        response.headers.setdefault("Content-Security-Policy",
                                    "default-src 'self'; img-src 'self' data:; style-src 'self'; "
                                    "frame-ancestors 'none'")
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        return response

    def _page(self, page: str) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def handler(request: web.Request) -> web.StreamResponse:
            return web.Response(text=page_html(page, request.match_info.get("name", "")), content_type="text/html")
        return handler

    def _no_round(self) -> web.Response:
        reason = self._last_error or "no sample of the cluster yet"
        return web.json_response({"error": reason, "waiting": True}, status=503)

    def _json(self, view: Callable[[Round], views.JsonObject]) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handler(request: web.Request) -> web.Response:
            if self._round is None:
                return self._no_round()
            return self._answer(view(self._round))
        return handler

    def _answer(self, body: views.JsonObject) -> web.Response:
        body["sample_error"] = self._last_error  # the last round failed: the page says its data is older
        return web.json_response(body, dumps=_dumps)

    async def _overview(self, request: web.Request) -> web.Response:
        r = self._round
        if r is None:
            return self._no_round()
        span = SPANS.get(request.query.get("span", "1h"))
        if span is None:
            return _bad_span()
        chart = await self._on_history(lambda sampler: sampler.rate_chart(span))
        return self._answer(views.overview(r, chart, span))

    async def _group(self, request: web.Request) -> web.Response:
        r = self._round
        if r is None:
            return self._no_round()
        name = request.match_info["name"]
        span = SPANS.get(request.query.get("span", "1h"))
        per_partition = request.query.get("per_partition", "") in ("1", "true")
        if span is None:
            return _bad_span()
        view = views.find_group(r, name, views.storage_of(request.query.get("storage")))
        if view is None:
            return web.json_response({"error": f"no consumer group {name!r}"}, status=404)
        storage = view.storage
        chart = await self._on_history(
            lambda sampler: sampler.lag_chart(name, span, per_partition, storage=storage))
        return self._answer(views.group(r, view, chart, span, per_partition))

    async def _topic(self, request: web.Request) -> web.Response:
        r = self._round
        if r is None:
            return self._no_round()
        found = views.find_topic(r.snapshot, request.match_info["name"])
        if found is None:
            return web.json_response({"error": f"no topic {request.match_info['name']!r}"}, status=404)
        return self._answer(views.topic(r, found))

    async def _metrics(self, request: web.Request) -> web.Response:
        # rendered once per round, off the event loop: 1,000 groups of 10 partitions are 2.6 MB, about 0.2 s
        r = self._round
        if self._metrics_cache is None or self._metrics_cache[0] is not r:
            self._metrics_cache = (r, await asyncio.get_running_loop().run_in_executor(None, metrics_text, r))
        response = web.Response(body=self._metrics_cache[1])
        response.headers["Content-Type"] = CONTENT_TYPE
        return response

    async def _events(self, request: web.Request) -> web.StreamResponse:
        """Server-sent events: ``update`` with the round's number and time after each sampling round."""
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                               "X-Accel-Buffering": "no"})
        await response.prepare(request)
        stream: asyncio.Queue[Round | None] = asyncio.Queue(maxsize=1)
        self._streams.add(stream)
        try:
            await response.write(b"retry: 3000\n\n")
            if self._round is not None:
                _offer(stream, self._round)
            while True:
                try:
                    r = await asyncio.wait_for(stream.get(), KEEPALIVE_S)
                except TimeoutError:
                    await response.write(b": keepalive\n\n")
                    continue
                if r is None:  # the server is stopping
                    break
                data = json.dumps({"seq": r.seq, "taken_ms": r.snapshot.taken_ms})
                await response.write(f"event: update\ndata: {data}\n\n".encode())
        except (ConnectionResetError, asyncio.CancelledError):
            pass  # the page went away
        finally:
            self._streams.discard(stream)
        return response

    async def _close_streams(self, app: web.Application) -> None:
        for stream in list(self._streams):
            _offer(stream, None)


def _bad_span() -> web.Response:
    return web.json_response({"error": f"span must be one of {', '.join(SPANS)}"}, status=400)


def _offer(stream: asyncio.Queue[Round | None], item: Round | None) -> None:
    """Only the newest round matters to a page: a slow one gets the latest, not a backlog."""
    if stream.full():
        stream.get_nowait()
    stream.put_nowait(item)


def _dumps(body: object) -> str:
    return json.dumps(body, separators=(",", ":"))


async def serve(ui: Ui, host: str, port: int, announce: Callable[[str], None]) -> None:
    """Serve until cancelled (SIGINT/SIGTERM in ``asyncio.run``); ``announce`` gets the address once listening."""
    runner = web.AppRunner(ui.app(), access_log=None, shutdown_timeout=2.0)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
        bound = runner.addresses[0]
        shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
        announce(f"http://{shown}:{bound[1]}/")
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
