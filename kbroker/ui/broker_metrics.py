"""The cluster's throughput from the brokers' ``/metrics`` (each broker's status listener, Prometheus text): the
all-topics counters the JMX exporter names ``kafka_server_brokertopicmetrics_{bytesin,bytesout,messagesin}_total``,
summed over brokers and turned into rates between two scrapes.

The operator lists the endpoints (``--broker-metrics http://h:p/metrics,...``), as they list them for Prometheus:
nothing in the Kafka protocol says where a broker's HTTP listener is.
"""
from __future__ import annotations

import re
import urllib.error
import urllib.request

from kbroker.ui.model import Rates

COUNTERS = ("kafka_server_brokertopicmetrics_bytesin_total", "kafka_server_brokertopicmetrics_bytesout_total",
            "kafka_server_brokertopicmetrics_messagesin_total")
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)\s+(\S+)")  # an unlabelled sample: name value [timestamp]

Counters = tuple[float, float, float]


def parse_counters(text: str) -> Counters:
    """The three all-topics counters of one scrape (0 for a missing one)."""
    found = dict.fromkeys(COUNTERS, 0.0)
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m and m.group(1) in found:
            try:
                found[m.group(1)] = float(m.group(2))
            except ValueError:
                continue
    return found[COUNTERS[0]], found[COUNTERS[1]], found[COUNTERS[2]]


class BrokerMetrics:
    """Scrapes the listed endpoints each round; the rates since the previous round's scrape of each."""

    def __init__(self, urls: list[str], timeout: float) -> None:
        self.urls = urls
        self.timeout = timeout
        self._last: dict[str, tuple[int, Counters]] = {}

    def scrape(self, now_ms: int) -> tuple[Rates | None, list[str]]:
        """Rates (None until an endpoint has been read twice) and the endpoints that failed, one line each."""
        problems: list[str] = []
        rates = [0.0, 0.0, 0.0]
        any_rate = False
        for url in self.urls:
            try:
                with urllib.request.urlopen(url, timeout=self.timeout) as answer:  # the operator's URL
                    counters = parse_counters(answer.read().decode("utf-8", "replace"))
            except (OSError, ValueError) as exc:
                reason = getattr(exc, "reason", None) or exc
                problems.append(f"broker metrics {url}: {reason}")
                self._last.pop(url, None)
                continue
            before = self._last.get(url)
            self._last[url] = (now_ms, counters)
            if before is None or now_ms <= before[0]:
                continue
            seconds = (now_ms - before[0]) / 1000
            for i, (old, new) in enumerate(zip(before[1], counters, strict=True)):
                rates[i] += (new - old if new >= old else new) / seconds  # lower: the broker restarted
            any_rate = True
        return (Rates(*rates) if any_rate else None), problems
