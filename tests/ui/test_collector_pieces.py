"""The collector's options (as Kafka's tools take them, bad values refused with a clear message) and its reading of
the brokers' /metrics: rates between two scrapes, summed over brokers, a restarted broker's counters, an endpoint
that does not answer, each log dir's free and total bytes tied to the broker the endpoint names. The endpoints are
real HTTP servers on 127.0.0.1."""
from __future__ import annotations

import argparse
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kbroker.metrics import Family, render
from kbroker.tools.client import ClientError
from kbroker.ui.broker_metrics import BrokerMetrics, Volume, parse, parse_counters
from kbroker.ui.collector import add_collector_options, collector_from_args
from kbroker.ui.model import Rates


def _closed_port() -> int:
    """A loopback port nothing listens on (the kernel handed it out and it was closed again)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kbroker ui", exit_on_error=False)
    add_collector_options(p)
    return p


def test_options_as_kafka_tools_take_them(tmp_path) -> None:
    props = tmp_path / "client.properties"
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config="
                     "org.apache.kafka.common.security.plain.PlainLoginModule required "
                     'username="ui" password="secret";\n')
    args = _parser().parse_args(["--bootstrap-server", "127.0.0.1:9092,127.0.0.1:9093",
                                 "--zookeeper", "127.0.0.1:2181/kafka", "--command-config", str(props),
                                 "--broker-metrics", "http://127.0.0.1:7071/metrics,http://127.0.0.1:7072/metrics",
                                 "--timeout", "2500"])
    collector = collector_from_args(args)
    o = collector.options
    assert (o.bootstrap_server, o.zookeeper, o.timeout) == ("127.0.0.1:9092,127.0.0.1:9093", "127.0.0.1:2181/kafka",
                                                           2.5)
    assert o.broker_metrics == ("http://127.0.0.1:7071/metrics", "http://127.0.0.1:7072/metrics")
    assert o.security is not None and o.security["sasl.mechanism"] == "PLAIN"
    plain = collector_from_args(_parser().parse_args(["--bootstrap-server", "127.0.0.1:9092"]))
    assert (plain.options.zookeeper, plain.options.security, plain.options.broker_metrics) == (None, None, ())


@pytest.mark.parametrize(("argv", "message"), [
    (["--bootstrap-server", "nohost"], "'nohost' is not host:port"),
    (["--bootstrap-server", "h:1", "--zookeeper", "zk/chroot"], "'zk/chroot' is not host:port"),
    (["--bootstrap-server", "h:1", "--broker-metrics", "h:7071/metrics"], "expected http://host:port/metrics"),
])
def test_bad_options_are_named(argv: list[str], message: str) -> None:
    with pytest.raises(argparse.ArgumentError, match=message):
        _parser().parse_args(argv)


def test_an_unreadable_command_config_is_one_line(tmp_path) -> None:
    args = _parser().parse_args(["--bootstrap-server", "h:1", "--command-config", str(tmp_path / "missing")])
    with pytest.raises(ClientError, match="missing"):
        collector_from_args(args)


def test_the_all_topics_counters_are_read() -> None:
    text = ("# TYPE kafka_server_brokertopicmetrics_bytesin_total counter\n"
            "kafka_server_brokertopicmetrics_bytesin_total 1200\n"
            'kafka_server_brokertopicmetrics_bytesin_total{topic="t"} 1000\n'
            "kafka_server_brokertopicmetrics_messagesin_total 3.0\n")
    assert parse_counters(text) == (1200.0, 0.0, 3.0)


class _Counters:
    """What one endpoint serves: the counters a test sets."""

    def __init__(self) -> None:
        self.values = (0, 0, 0)
        self.more = b""  # more families, as the broker renders them

    def text(self) -> bytes:
        names = ("bytesin", "bytesout", "messagesin")
        return "".join(f"kafka_server_brokertopicmetrics_{n}_total {v}\n"
                       for n, v in zip(names, self.values, strict=True)).encode() + self.more


@pytest.fixture
def endpoints() -> Iterator[list[tuple[str, _Counters]]]:
    servers = []
    out = []
    for _ in range(2):
        counters = _Counters()

        class Handler(BaseHTTPRequestHandler):
            source = counters

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                body = self.source.text()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        out.append((f"http://127.0.0.1:{server.server_address[1]}/metrics", counters))
    try:
        yield out
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


def test_rates_are_summed_over_brokers_between_two_scrapes(endpoints) -> None:
    (url_a, a), (url_b, b) = endpoints
    down = f"http://127.0.0.1:{_closed_port()}/metrics"
    metrics = BrokerMetrics([url_a, url_b, down], timeout=5)
    a.values, b.values = (1000, 500, 10), (2000, 0, 20)
    rates, _, problems = metrics.scrape(10_000)
    assert rates is None  # one scrape: no rate yet
    assert len(problems) == 1 and problems[0].startswith(f"broker metrics {down}: ")
    a.values, b.values = (3000, 700, 30), (2000, 400, 60)
    rates, _, _ = metrics.scrape(12_000)
    assert rates == Rates(bytes_in=1000.0, bytes_out=300.0, messages_in=30.0)
    a.values = (500, 0, 5)  # broker a restarted: its counters began again
    rates, _, _ = metrics.scrape(13_000)
    assert rates == Rates(bytes_in=500.0, bytes_out=0.0, messages_in=5.0)


def _disks(broker_id: int | None, dirs: dict[str, tuple[int, int]]) -> bytes:
    """The families a kbroker broker's /metrics names itself and its log dirs' file systems with."""
    families = []
    if broker_id is not None:
        families.append(Family("kafka_server_app_info", "gauge", "broker").add(1, (("id", str(broker_id)),)))
    usable = Family("kafka_log_logmanager_usablebytes", "gauge", "usable")
    total = Family("kafka_log_logmanager_totalbytes", "gauge", "total")
    for path, (free, size) in dirs.items():
        usable.add(free, (("logdirectory", path),))
        total.add(size, (("logdirectory", path),))
    return render([*families, usable, total])


def test_a_path_with_quotes_and_backslashes_comes_back_as_the_broker_named_it() -> None:
    odd = '/data/"kafka"\\logs\n2'
    scraped = parse(_disks(3, {odd: (5, 9), "/d": (1, 2)}).decode())
    assert scraped.broker_id == 3
    assert scraped.volumes == {odd: Volume(5, 9), "/d": Volume(1, 2)}
    assert parse('kafka_log_logmanager_usablebytes{logdirectory="/only-usable"} 5\n').volumes == {}


def test_log_dirs_free_space_is_keyed_by_the_broker_each_endpoint_names(endpoints) -> None:
    (url_a, a), (url_b, b) = endpoints
    big = 12 * 2**40 + 12345  # 12 TiB and some: exact, not a float's rounding
    a.more = _disks(2, {"/var/kafka/a": (big - 100, big), "/var/kafka/b": (7, 50)})
    b.more = _disks(1, {"/var/kafka/a": (40, 80)})
    _, disks, problems = BrokerMetrics([url_a, url_b], timeout=5).scrape(1_000)
    assert problems == []
    assert disks == {(2, "/var/kafka/a"): Volume(big - 100, big), (2, "/var/kafka/b"): Volume(7, 50),
                     (1, "/var/kafka/a"): Volume(40, 80)}
    b.more = _disks(None, {"/var/kafka/a": (40, 80)})  # whose dirs? not guessed: said
    _, disks, problems = BrokerMetrics([url_a, url_b], timeout=5).scrape(2_000)
    assert set(disks) == {(2, "/var/kafka/a"), (2, "/var/kafka/b")}
    assert problems == [f"broker metrics {url_b}: log dir sizes without kafka_server_app_info{{id}} to say whose"]
