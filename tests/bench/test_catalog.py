"""``python -m bench --list``: every entry point of bench/ with its docstring's first line, each module importable.

The list is derived from the source tree (bench.harness.catalog), so these tests hold the files to it: each listed
module imports, its docstring's first line is the summary printed, and that line is a sentence of its own."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.harness.catalog import entry_points

REPO = Path(__file__).resolve().parents[2]
# what bench/ must keep offering, whatever else is added (the README and the Makefile name these)
EXPECTED = {"python -m bench", "python -m bench.suite.storage", "python -m bench.suite.throughput",
            "python -m bench.suite.cluster", "python -m bench.reliability.chaos", "python -m bench.reliability.fuzz",
            "python -m bench.reliability.abuse", "python -m bench.experiments.replication_hops",
            "python -m bench.experiments.replication_floor", "python -m bench.load.spark_load",
            "locust -f bench/load/locustfile.py"}

# Imports every module named on argv (a Locust file by its path, in its own process: locust patches the process
# with gevent) and prints each one's docstring's first line.
IMPORTER = """
import importlib, importlib.util, json, sys
out = {}
for module, path in zip(sys.argv[1::2], sys.argv[2::2]):
    if path.endswith("locustfile.py"):
        spec = importlib.util.spec_from_file_location("locustfile", path)
        m = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(m)
    else:
        m = importlib.import_module(module)
    out[module] = (m.__doc__ or "").strip().splitlines()[0]
print(json.dumps(out))
"""


def listed() -> dict[str, str]:
    out = subprocess.run([sys.executable, "-m", "bench", "--list"], cwd=REPO, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split("\n")
    assert lines[0].startswith("entry points")
    rows = {}
    for line in lines[1:]:
        if not line.startswith("  "):
            break
        command, _, summary = line.strip().partition("  ")
        rows[command] = summary.strip()
    return rows


def test_list_names_every_entry_point_with_its_summary() -> None:
    rows = listed()
    points = entry_points()
    assert rows == {e.command: e.summary for e in points}
    assert EXPECTED <= set(rows), EXPECTED - set(rows)
    short = [e.command for e in points if not e.summary_alone or len(e.summary) > 120]
    assert not short, f"docstrings whose first line is not a sentence of its own (then a blank line): {short}"


def test_every_listed_module_imports_and_its_docstring_opens_with_the_summary() -> None:
    points = entry_points()
    ordinary = [e for e in points if e.path.name != "locustfile.py"]
    locust = [e for e in points if e.path.name == "locustfile.py"]
    found: dict[str, str] = {}
    for group in (ordinary, *([e] for e in locust)):
        argv = [a for e in group for a in (e.module, str(e.path))]
        out = subprocess.run([sys.executable, "-c", IMPORTER, *argv], cwd=REPO, capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0, out.stderr[-3000:]
        found.update(json.loads(out.stdout.splitlines()[-1]))
    assert found == {e.module: e.summary for e in points}
