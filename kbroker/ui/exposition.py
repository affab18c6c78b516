"""``GET /metrics`` of `kbroker ui`: every group's lag, lag in seconds and status in the Prometheus text format.

Named as kafka-exporter (github.com/danielqsj/kafka_exporter) names group lag, so its dashboards and alerts read
them unchanged: ``kafka_consumergroup_lag`` per partition, ``kafka_consumergroup_lag_sum`` per group and topic,
``kafka_consumergroup_current_offset``, ``kafka_brokers``. What kafka-exporter lacks is added beside them: the
lag in seconds and the group's status by Burrow's rules, as a state set (one sample per status, 1 on the
current one), so an alert matches ``kafka_consumergroup_status{status="STOP"} == 1``.
"""
from __future__ import annotations

from collections import defaultdict

from kbroker.metrics import Family, render
from kbroker.ui.views import STATUSES, Round


def metrics_text(r: Round | None) -> bytes:
    lag = Family("kafka_consumergroup_lag", "gauge", "Current approximate lag of a consumer group at a partition")
    lag_sum = Family("kafka_consumergroup_lag_sum", "gauge", "Current approximate lag of a consumer group at a topic")
    offset = Family("kafka_consumergroup_current_offset", "gauge",
                    "Current offset of a consumer group at a partition (-1: nothing committed)")
    seconds = Family("kafka_consumergroup_lag_seconds", "gauge",
                     "How long ago the log end passed the group's committed offset, at its worst partition")
    status = Family("kafka_consumergroup_status", "gauge",
                    "The group's status by Burrow's evaluation rules: 1 for the current status, 0 for the others")
    brokers = Family("kafka_brokers", "gauge", "Number of brokers registered in the cluster")
    sample = Family("kbroker_ui_sample_timestamp_seconds", "gauge", "When the last sample of the cluster was taken")
    families = [lag, lag_sum, offset, seconds, status, brokers, sample]
    if r is None:  # nothing sampled yet: the families, with no samples
        return render(families)
    for g in sorted(r.groups, key=lambda g: (g.name, g.storage)):
        group = ("consumergroup", g.name)
        per_topic: dict[str, int] = defaultdict(int)
        for p in sorted(g.partitions, key=lambda p: (p.topic, p.partition)):
            labels = (group, ("topic", p.topic), ("partition", str(p.partition)))
            lag.add(p.lag, labels)
            offset.add(p.committed, labels)
            per_topic[p.topic] += p.lag
        for name, total in sorted(per_topic.items()):
            lag_sum.add(total, (group, ("topic", name)))
        if g.lag_seconds is not None:
            seconds.add(g.lag_seconds, (group, ("storage", g.storage)))
        for name in STATUSES:
            status.add(int(g.status == name), (group, ("storage", g.storage), ("status", name)))
    brokers.add(sum(b.up for b in r.snapshot.brokers))
    sample.add(r.snapshot.taken_ms / 1000)
    return render(families)
