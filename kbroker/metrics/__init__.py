"""Broker metrics in the Prometheus text format, under the names the Prometheus JMX exporter gives Kafka's.

``registry``: the counters the hot paths bump in place (per-topic bytes and messages, per-request-type
counts and the last RING timings of each phase); ``exposition``: metric families rendered as text format
0.0.4. What the broker's state says at scrape time (partitions, controller, groups) is read by
``kbroker.status.endpoint``, which serves ``GET /metrics``. This package imports nothing of kbroker, so the
reactor and the handlers may both feed it.
"""
from kbroker.metrics.exposition import CONTENT_TYPE, Family, render
from kbroker.metrics.registry import (
           FETCH_CONSUMER,
           FETCH_FOLLOWER,
           PHASES,
           QUANTILES,
           BrokerMetrics,
           RequestStats,
           TimedRequest,
)

__all__ = ["CONTENT_TYPE", "FETCH_CONSUMER", "FETCH_FOLLOWER", "PHASES", "QUANTILES", "BrokerMetrics", "Family",
           "RequestStats", "TimedRequest", "render"]
