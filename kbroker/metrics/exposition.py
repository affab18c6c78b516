"""Prometheus text exposition format 0.0.4: ``# HELP`` and ``# TYPE`` once per family, then its samples.

Summaries are written as the JMX exporter renders Kafka's histograms: ``name{quantile="0.99"}`` and
``name_count`` (Prometheus' summary type, which prometheus_client's parser reads as one family).
"""
from __future__ import annotations

import math

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
Labels = tuple[tuple[str, str], ...]


class Family:
    """One metric family: counter (name ends in ``_total``), gauge or summary."""

    def __init__(self, name: str, kind: str, help_text: str) -> None:
        if kind not in ("counter", "gauge", "summary"):
            raise ValueError(f"unknown metric type {kind}")
        self.name = name
        self.kind = kind
        self.help = help_text
        self.samples: list[tuple[str, Labels, float]] = []

    def add(self, value: float, labels: Labels = (), suffix: str = "") -> Family:
        self.samples.append((self.name + suffix, labels, value))
        return self


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def render(families: list[Family]) -> bytes:
    out: list[str] = []
    for family in families:
        # a counter's HELP and TYPE name it with ``_total``, as prometheus_client's 0.0.4 output does (its parser
        # then files the ``_total`` samples under the counter)
        out.append(f"# HELP {family.name} {_escape_help(family.help)}")
        out.append(f"# TYPE {family.name} {family.kind}")
        for sample, labels, value in family.samples:
            if labels:
                text = ",".join(f'{k}="{_escape_label(v)}"' for k, v in labels)
                out.append(f"{sample}{{{text}}} {_number(value)}")
            else:
                out.append(f"{sample} {_number(value)}")
    out.append("")
    return "\n".join(out).encode()
