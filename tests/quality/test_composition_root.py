"""kbroker/broker.py is the composition root: it builds the parts, starts them in order and stops them in reverse.
It grew back, one feature at a time (TLS contexts, JAAS parsing for the inter-broker login, the startup gate and
quota wrapping of dispatch), so these tests hold it to wiring: a line budget, and none of the pieces that belong in
``kbroker.security.connection_security`` or ``kbroker.handlers.dispatcher``."""
from __future__ import annotations

import ast

from tests.quality.helpers import REPO

BROKER = REPO / "kbroker" / "broker.py"
MAX_LINES = 300
# What builds listener security or sits in the dispatch chain; the broker hands over to the modules that do.
NOT_WIRING = ("kbroker.security.tls", "kbroker.security.sasl", "kbroker.security.sasl_client",
              "kbroker.security.sasl.jaas", "kbroker.protocol.outcome")


def test_the_composition_root_stays_under_its_line_budget() -> None:
    lines = len(BROKER.read_text().splitlines())
    assert lines <= MAX_LINES, (
        f"kbroker/broker.py has {lines} lines (at most {MAX_LINES}): put new wiring in the part it belongs to "
        "(security/connection_security.py for listeners, handlers/dispatcher.py for the dispatch chain, a part's "
        "constructor for its own callbacks)")


def test_the_composition_root_builds_no_listener_security_and_no_dispatch_chain() -> None:
    tree = ast.parse(BROKER.read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert not imported & set(NOT_WIRING), sorted(imported & set(NOT_WIRING))
    broker = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Broker")
    methods = {n.name for n in broker.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    assert not methods & {"dispatch", "_dispatch_once_started", "_inter_broker_client", "_inter_broker_sasl"}, methods
