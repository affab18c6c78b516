"""What `kbroker ui` reads from the brokers' ``/metrics`` (each broker's status listener, Prometheus text):

- the cluster's throughput: the all-topics counters the JMX exporter names
  ``kafka_server_brokertopicmetrics_{bytesin,bytesout,messagesin}_total``, summed over brokers and turned into rates
  between two scrapes;
- each log dir's free and total bytes: ``kafka_log_logmanager_{usable,total}bytes{logdirectory="<dir>"}``, which
  kbroker's brokers publish (``kbroker.status.metrics``; Kafka 2.8's DescribeLogDirs has no such fields), tied to a
  broker by the endpoint's own ``kafka_server_app_info{id="<broker.id>"}``, so no endpoint needs naming by hand.

The operator lists the endpoints (``--broker-metrics http://h:p/metrics,...``), as they list them for Prometheus:
nothing in the Kafka protocol says where a broker's HTTP listener is.
"""
from __future__ import annotations

import re
import urllib.error
import urllib.request
from dataclasses import dataclass, field

from kbroker.ui.model import Rates

COUNTERS = ("kafka_server_brokertopicmetrics_bytesin_total", "kafka_server_brokertopicmetrics_bytesout_total",
            "kafka_server_brokertopicmetrics_messagesin_total")
APP_INFO = "kafka_server_app_info"
USABLE, TOTAL = "kafka_log_logmanager_usablebytes", "kafka_log_logmanager_totalbytes"
# a sample: name, {labels} or nothing, value [timestamp]
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
_ESCAPED = re.compile(r"\\(.)")

Counters = tuple[float, float, float]


@dataclass(frozen=True)
class Volume:
    """A log dir's file system as its broker measured it."""
    usable_bytes: int
    total_bytes: int


# (broker id, log dir path as DescribeLogDirs names it) -> its file system
Disks = dict[tuple[int, str], Volume]


@dataclass
class Scraped:
    """What one endpoint's text says."""
    counters: Counters = (0.0, 0.0, 0.0)  # 0 for a missing one
    broker_id: int | None = None  # from kafka_server_app_info{id}
    volumes: dict[str, Volume] = field(default_factory=dict)  # log dir -> its file system


def _labels(text: str) -> dict[str, str]:
    return {k: _ESCAPED.sub(lambda m: "\n" if m.group(1) == "n" else m.group(1), v) for k, v in _LABEL.findall(text)}


def parse(text: str) -> Scraped:
    counters = dict.fromkeys(COUNTERS, 0.0)
    broker_id: int | None = None
    usable: dict[str, int] = {}
    total: dict[str, int] = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m is None:
            continue
        name, labels, raw = m.groups()
        try:
            value = float(raw)
        except ValueError:
            continue
        if name in counters and labels is None:
            counters[name] = value
        elif name == APP_INFO and labels is not None:
            found = _labels(labels).get("id", "")
            broker_id = int(found) if found.lstrip("-").isdigit() else broker_id
        elif name in (USABLE, TOTAL) and labels is not None and "logdirectory" in (parsed := _labels(labels)):
            (usable if name == USABLE else total)[parsed["logdirectory"]] = int(value)
    return Scraped(counters=(counters[COUNTERS[0]], counters[COUNTERS[1]], counters[COUNTERS[2]]),
                   broker_id=broker_id,
                   volumes={d: Volume(usable[d], total[d]) for d in sorted(usable.keys() & total.keys())})


def parse_counters(text: str) -> Counters:
    """The three all-topics counters of one scrape (0 for a missing one)."""
    return parse(text).counters


class BrokerMetrics:
    """Scrapes the listed endpoints each round: the rates since the previous round's scrape of each, and the log
    dirs' file systems."""

    def __init__(self, urls: list[str], timeout: float) -> None:
        self.urls = urls
        self.timeout = timeout
        self._last: dict[str, tuple[int, Counters]] = {}

    def scrape(self, now_ms: int) -> tuple[Rates | None, Disks, list[str]]:
        """Rates (None until an endpoint has been read twice), the log dirs' file systems by (broker, dir), and
        the endpoints that failed, one line each."""
        problems: list[str] = []
        rates = [0.0, 0.0, 0.0]
        any_rate = False
        disks: Disks = {}
        for url in self.urls:
            try:
                with urllib.request.urlopen(url, timeout=self.timeout) as answer:  # the operator's URL
                    scraped = parse(answer.read().decode("utf-8", "replace"))
            except (OSError, ValueError) as exc:
                reason = getattr(exc, "reason", None) or exc
                problems.append(f"broker metrics {url}: {reason}")
                self._last.pop(url, None)
                continue
            if scraped.broker_id is not None:
                disks.update(((scraped.broker_id, path), volume) for path, volume in scraped.volumes.items())
            elif scraped.volumes:
                problems.append(f"broker metrics {url}: log dir sizes without {APP_INFO}{{id}} to say whose")
            counters = scraped.counters
            before = self._last.get(url)
            self._last[url] = (now_ms, counters)
            if before is None or now_ms <= before[0]:
                continue
            seconds = (now_ms - before[0]) / 1000
            for i, (old, new) in enumerate(zip(before[1], counters, strict=True)):
                rates[i] += (new - old if new >= old else new) / seconds  # lower: the broker restarted
            any_rate = True
        return (Rates(*rates) if any_rate else None), disks, problems
