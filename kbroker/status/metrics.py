"""What ``GET /metrics`` on the status listener answers: the broker's counters (``kbroker.metrics``) and
its state at scrape time, under the names the Prometheus JMX exporter's Kafka rules (kafka-2_0_0.yml)
give Kafka's MBeans, so dashboards and alerts written for Kafka read kbroker unchanged:

    kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec,topic=t (a meter's Count: a counter)
        -> kafka_server_brokertopicmetrics_bytesin_total{topic="t"} (without ``topic``: every topic)
    kafka.server:type=ReplicaManager,name=UnderReplicatedPartitions
        -> kafka_server_replicamanager_underreplicatedpartitions
    kafka.network:type=RequestMetrics,name=TotalTimeMs,request=Produce (a histogram: a summary)
        -> kafka_network_requestmetrics_totaltimems{request="Produce",quantile="0.99"} and ..._count
    kafka.log:type=Log,name=Size,topic=t,partition=0 -> kafka_log_log_size{topic="t",partition="0"}

Two families have no Kafka 2.8 MBean. ``kafka_server_app_info{id="<broker.id>"} 1`` stands for the
``kafka.server:type=app-info,id=<broker.id>`` MBean (which carries only strings), so a scraper can tell which broker
an endpoint is. ``kafka_log_logmanager_usablebytes`` and ``..._totalbytes{logdirectory="<dir>"}`` are each online
log dir's file system (``kbroker.log.disk_space``): KIP-827 (Kafka 3.3) put these figures in DescribeLogDirs v4
as UsableBytes and TotalBytes without a JMX gauge, so the names are kbroker's own: what the JMX exporter would
make of ``kafka.log:type=LogManager,name=UsableBytes,logDirectory=<dir>`` (the tag Kafka's LogDirectoryOffline
gauge has). An offline dir is left out (DescribeLogDirs says it is offline).

Consumer group offsets and lag are named as kafka-exporter names them (``kafka_consumergroup_lag``).
Each broker reports what it knows: its own partitions, the groups it coordinates (lag where it leads the
partition), and the controller's gauges when it is the active controller (0 elsewhere, as in Kafka).
"""
from __future__ import annotations

from typing import TypedDict

from kbroker.handlers.context import BrokerContext
from kbroker.log import LogManager
from kbroker.metrics import FETCH_CONSUMER, FETCH_FOLLOWER, PHASES, QUANTILES, BrokerMetrics, Family
from kbroker.protocol import API_NAMES

_REQUEST_NAMES = {**API_NAMES, FETCH_CONSUMER: "FetchConsumer", FETCH_FOLLOWER: "FetchFollower"}
_PHASE_HELP = {
    "requestqueuetimems": "from the request's bytes read to its handler starting",
    "localtimems": "in the handler",
    "remotetimems": "parked after the handler (purgatory: acks=all, long polls; ZooKeeper round trips)",
    "throttletimems": "a client quota's throttle: the connection muted after the answer (0 when within quota)",
    "responsequeuetimems": "answer ready, waiting behind earlier answers of its connection",
    "responsesendtimems": "writing the answer to the socket",
    "totaltimems": "from the request's bytes read to its answer written",
}


class CommittedOffset(TypedDict):
    """A group's committed offset of one partition in the status view (lag where this broker leads it)."""
    topic: str
    partition: int
    offset: int
    high_watermark: int | None
    lag: int | None


class GroupStatus(TypedDict):
    """A group coordinated here, as /status and /groups show it."""
    group: str
    state: str
    protocol_type: str
    members: int
    offsets: list[CommittedOffset]


def scrape(broker: BrokerContext, groups: list[GroupStatus], under_replicated: int) -> list[Family]:
    """Every family, from the counters and the broker's state now (``groups`` as the status view has them)."""
    families: list[Family] = [
        Family("kafka_server_brokertopicmetrics_replicationbytesin_total", "counter",
               "record bytes this broker's followers appended from their leaders (all topics, as Kafka's)")
        .add(broker.replicas.replication_bytes_in)]
    if broker.metrics is not None:
        families += _topic_counters(broker.metrics)
        families.append(Family("kafka_server_brokertopicmetrics_replicationbytesout_total", "counter",
                               "record bytes sent to followers (all topics, as Kafka's)")
                        .add(broker.metrics.replication_bytes_out))
        families += _request_metrics(broker.metrics)
    families.append(Family("kafka_server_app_info", "gauge", "this broker; its broker.id is the id label")
                    .add(1, (("id", str(broker.broker_id)),)))
    families += _replica_manager(broker, under_replicated)
    families += _controller(broker)
    families += _logs(broker)
    families += log_dir_volumes(broker.log_manager)
    families += _consumer_groups(groups)
    return families


def _topic_counters(metrics: BrokerMetrics) -> list[Family]:
    out = []
    for name, counts, what in (("bytesin", metrics.bytes_in, "record bytes produced by clients"),
                               ("messagesin", metrics.messages_in, "records produced by clients"),
                               ("bytesout", metrics.bytes_out, "record bytes fetched by consumers"),
                               ("bytesrejected", metrics.bytes_rejected,
                                "record bytes refused as larger than max.message.bytes"),
                               ("totalproducerequests", metrics.produce_requests,
                                "partition appends of Produce requests that reached the log"),
                               ("failedproducerequests", metrics.failed_produce_requests,
                                "of those, the ones that failed unexpectedly (as Kafka, not for leadership, "
                                "unknown partitions, too large, corrupt records or a failed log dir)"),
                               ("totalfetchrequests", metrics.fetch_requests,
                                "partition reads of Fetch requests, consumers' and followers'"),
                               ("failedfetchrequests", metrics.failed_fetch_requests,
                                "of those, the ones that failed unexpectedly (as Kafka, not for leadership, "
                                "unknown partitions, leader epochs, a failed log dir or out of range offsets)")):
        family = Family(f"kafka_server_brokertopicmetrics_{name}_total", "counter", f"{what} (no topic: all)")
        family.add(sum(counts.values()))
        for topic, value in sorted(counts.items()):
            family.add(value, (("topic", topic),))
        out.append(family)
    return out


def _request_metrics(metrics: BrokerMetrics) -> list[Family]:
    requests = Family("kafka_network_requestmetrics_requests_total", "counter",
                      "requests answered, by type and version")
    phases = [Family(f"kafka_network_requestmetrics_{phase}", "summary",
                     f"ms {_PHASE_HELP[phase]}, over the last requests of each type") for phase in PHASES]
    for key, stats in sorted(metrics.requests.items(), key=lambda item: _REQUEST_NAMES.get(item[0], str(item[0]))):
        request = (("request", _REQUEST_NAMES.get(key, str(key))),)
        for version, count in sorted(stats.versions.items()):
            requests.add(count, (*request, ("version", str(version))))
        for family, recent in zip(phases, stats.recent(), strict=True):
            for label, q in QUANTILES:
                family.add(recent[min(len(recent) - 1, int(q * len(recent)))] if recent else 0.0,
                           (*request, ("quantile", label)))
            family.add(stats.count, request, "_count")
    return [requests, *phases]


def _replica_manager(broker: BrokerContext, under_replicated: int) -> list[Family]:
    partitions = broker.replicas.partitions.values()
    isr = broker.replicas.isr
    gauges = (("underreplicatedpartitions", under_replicated, "partitions led here whose ISR lacks a replica"),
              ("partitioncount", len(partitions), "partitions hosted here"),
              ("leadercount", sum(1 for p in partitions if p.is_leader), "partitions led here"),
              ("offlinereplicacount", sum(1 for p in partitions if p.log.offline),
               "replicas here whose log dir failed"))
    out = [Family(f"kafka_server_replicamanager_{name}", "gauge", text).add(value) for name, value, text in gauges]
    out.append(Family("kafka_server_replicamanager_isrshrinks_total", "counter",
                      "ISR shrinks this broker wrote as leader").add(isr.shrinks if isr is not None else 0))
    out.append(Family("kafka_server_replicamanager_isrexpands_total", "counter",
                      "ISR expansions this broker wrote as leader").add(isr.expands if isr is not None else 0))
    return out


def _controller(broker: BrokerContext) -> list[Family]:
    zk = broker.zookeeper
    if zk is None:  # a single broker is its cluster's controller; a partition is offline when its log is
        active = True
        offline = sum(1 for p in broker.replicas.partitions.values() if p.log.offline)
        partitions, topics = len(broker.replicas.partitions), len(broker.topics.topics)
    else:
        active = zk.controller.active
        snap = zk.cluster.snapshot
        deleting = set(snap.deleting)
        offline = sum(1 for (topic, _), state in snap.states.items()
                      if topic not in deleting and state.leader not in snap.brokers) if active else 0
        partitions = sum(len(parts) for parts in snap.assignments.values()) if active else 0
        topics = len(snap.assignments) if active else 0
    gauges = (("activecontrollercount", int(active), "1 on the active controller, 0 elsewhere"),
              ("offlinepartitionscount", offline, "partitions without a live leader (active controller only)"),
              ("globalpartitioncount", partitions, "partitions in the cluster (active controller only)"),
              ("globaltopiccount", topics, "topics in the cluster (active controller only)"))
    return [Family(f"kafka_controller_kafkacontroller_{name}", "gauge", text).add(value)
            for name, value, text in gauges]


def _logs(broker: BrokerContext) -> list[Family]:
    size = Family("kafka_log_log_size", "gauge", "bytes of the partition's log here")
    end = Family("kafka_log_log_logendoffset", "gauge", "the partition's log end offset here")
    start = Family("kafka_log_log_logstartoffset", "gauge", "the partition's log start offset here")
    segments = Family("kafka_log_log_numlogsegments", "gauge", "segments of the partition's log here")
    newest = Family("kafka_topic_partition_current_offset", "gauge", "high watermark of a partition led here")
    oldest = Family("kafka_topic_partition_oldest_offset", "gauge", "log start offset of a partition led here")
    for tp, partition in sorted(broker.replicas.partitions.items()):
        plog = partition.log
        if plog.offline:
            continue
        labels = (("topic", tp.topic), ("partition", str(tp.partition)))
        size.add(plog.size_bytes, labels)
        end.add(plog.log_end_offset, labels)
        start.add(plog.log_start_offset, labels)
        segments.add(len(plog.segments), labels)
        if partition.is_leader:
            newest.add(partition.high_watermark, labels)
            oldest.add(plog.log_start_offset, labels)
    threads = Family("kbroker_log_cleaner_threads", "gauge", "log cleaner threads running (log.cleaner.threads, "
                     "a dynamic broker config)").add(broker.log_manager.cleaner.thread_count)
    return [size, end, start, segments, newest, oldest, threads]


def log_dir_volumes(manager: LogManager) -> list[Family]:
    """Each online log dir's file system, from the last measurement (``kbroker.log.disk_space``)."""
    usable = Family("kafka_log_logmanager_usablebytes", "gauge",
                    "bytes the log dir's file system has free for the broker (statvfs f_bavail, a few seconds old)")
    total = Family("kafka_log_logmanager_totalbytes", "gauge", "bytes of the log dir's file system (statvfs)")
    for directory, volume in sorted(manager.disk_space.volumes().items()):
        if directory in manager.offline_dirs:  # measured before it failed
            continue
        labels = (("logdirectory", str(directory)),)
        usable.add(volume.usable_bytes, labels)
        total.add(volume.total_bytes, labels)
    return [usable, total]


def _consumer_groups(groups: list[GroupStatus]) -> list[Family]:
    members = Family("kafka_consumergroup_members", "gauge", "members of a group coordinated here")
    current = Family("kafka_consumergroup_current_offset", "gauge", "a group's committed offset")
    lag = Family("kafka_consumergroup_lag", "gauge",
                 "high watermark minus committed offset (partitions led by the group's coordinator)")
    lag_sum = Family("kafka_consumergroup_lag_sum", "gauge", "a group's lag over a topic's partitions")
    for group in groups:
        members.add(group["members"], (("consumergroup", group["group"]),))
        sums: dict[str, int] = {}
        for entry in group["offsets"]:
            labels = (("consumergroup", group["group"]), ("topic", entry["topic"]),
                      ("partition", str(entry["partition"])))
            current.add(entry["offset"], labels)
            if entry["lag"] is not None:
                lag.add(entry["lag"], labels)
                sums[entry["topic"]] = sums.get(entry["topic"], 0) + entry["lag"]
        for topic, total in sorted(sums.items()):
            lag_sum.add(total, (("consumergroup", group["group"]), ("topic", topic)))
    return [members, current, lag, lag_sum]
