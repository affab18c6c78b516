"""Every file under bench/results says what made it: the command, the commit and the date, written by the run (in
one of its JSON lines) or, for files saved before runs recorded it, in a ``<file>.meta.json`` beside it whose
``reconstructed`` says how each field was established from git history. Names say what was measured, not which work
item it was for; and every entry point of bench/ writes its provenance through bench.harness.results_meta."""
from __future__ import annotations

import json
import re
from pathlib import Path

from bench.harness.catalog import entry_points

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"
FIELDS = ("command", "commit", "date")
SIDECAR = ".meta.json"


def has_provenance(record: object) -> bool:
    return isinstance(record, dict) and all(isinstance(record.get(f), str) and record[f] for f in FIELDS)


def in_file(path: Path) -> bool:
    if path.suffix != ".jsonl":
        return False
    for line in path.read_text().splitlines():
        if line.startswith("{") and has_provenance(json.loads(line)):
            return True
    return False


def test_every_results_file_records_command_commit_and_date() -> None:
    files = sorted(p for p in RESULTS.iterdir() if not p.name.endswith(SIDECAR))
    assert len(files) > 20, files
    missing = []
    for path in files:
        sidecar = RESULTS / (path.name + SIDECAR)
        meta = json.loads(sidecar.read_text()) if sidecar.exists() else None
        if meta is not None:
            assert meta["file"] == path.name, sidecar
        if in_file(path):
            continue
        if meta is None or not has_provenance(meta):
            missing.append(path.name)
            continue
        # what the run did not record is marked, each field with how it was established
        assert set(meta["reconstructed"]) == set(FIELDS) and all(meta["reconstructed"].values()), sidecar
        assert re.fullmatch(r"[0-9a-f]{40}", meta["commit"]), sidecar
        assert meta["command"].startswith(("python -m bench", "locust ")), sidecar
    assert not missing, f"results without command, commit and date (in a line or a {SIDECAR}): {missing}"


def test_every_sidecar_belongs_to_a_file_and_renamed_files_keep_their_old_name() -> None:
    for sidecar in RESULTS.glob("*" + SIDECAR):
        assert (RESULTS / sidecar.name.removesuffix(SIDECAR)).exists(), f"{sidecar.name}: its file is gone"
    formers = [json.loads(p.read_text()).get("former_name") for p in RESULTS.glob("*" + SIDECAR)]
    assert "issue29-replication-hops-20261129.jsonl" in formers  # findable by the name the commits cite


def test_results_are_named_for_what_they_measured() -> None:
    work_items = [p.name for p in RESULTS.iterdir() if re.search(r"issue\d+|-s\d+[.-]", p.name)]
    assert not work_items, work_items


def test_every_entry_point_records_its_provenance() -> None:
    # the suite puts it in its summary line, the others print results_meta.header() first; the Locust file reports
    # to Locust's own statistics, the fuzzer's --worker to libFuzzer
    silent = [e.command for e in entry_points() if e.path.name != "locustfile.py"
              and not re.search(r"\b(header|provenance)\(", e.path.read_text())]
    assert not silent, f"entry points that write results without bench.harness.results_meta: {silent}"
