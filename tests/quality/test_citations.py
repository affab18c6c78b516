"""The repository stands alone: every path it cites inside itself exists, and nothing cites files outside it (issue 23).

A path is cited when a tracked text file names something under one of the repository's top-level folders
(``kbroker/log/segment.py``, ``bench/results/``, ``docs/...``); after a file moves, its old name in a comment,
a README table or a test's message is caught here. Placeholders (``<topic>``, ``*``) are not paths.
"""
from __future__ import annotations

import re
import subprocess

from .helpers import REPO

# Paths that exist only while a test or tool runs: the contract tests' planted modules, the fuzzer's corpus folder
# named after its target; and KafkaJS, which `make test` installs (`make check`, in a fresh clone, does not).
MADE_AT_RUN_TIME = {"kbroker/log/_loop_a.py", "kbroker/log/_loop_b.py", "tests/fuzz/corpus/TARGET",
                    "tests/js/node_modules", "tests/js/node_modules/", "tests/js/node_modules/.stamp"}
NOT_TEXT = (".so", ".c", ".h", ".png", ".jsonl", ".json", ".lock", ".gz")
OUTSIDE = re.compile(r"\.\./shared/|\bSTYLE\.md\b")


def tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return [f for f in out.split() if not f.endswith(NOT_TEXT) and "node_modules" not in f
            and not f.startswith("bench/results/")]


def texts() -> list[tuple[str, list[str]]]:
    found = []
    for name in tracked():
        try:
            found.append((name, (REPO / name).read_text().splitlines()))
        except (UnicodeDecodeError, FileNotFoundError):
            continue
    return found


def test_every_cited_path_exists() -> None:
    files = tracked()
    assert len(files) > 300, f"git ls-files listed only {len(files)} files"
    tops = sorted({f.split("/")[0] for f in files if "/" in f})
    folders = "|".join(re.escape(t) for t in tops)
    cited = re.compile(r"(?<![\w./-])((?:" + folders + r")/[\w./*<>{}-]*[\w/])")
    missing, seen = [], 0
    for name, lines in texts():
        for number, line in enumerate(lines, 1):
            for match in cited.finditer(line):
                path = match.group(1).rstrip(".")
                if any(c in path for c in "*<>{}") or path in MADE_AT_RUN_TIME:
                    continue
                seen += 1
                if not (REPO / path).exists():
                    missing.append(f"{name}:{number}: {path}")
    assert seen > 100, f"only {seen} cited paths found: the pattern no longer matches how the repository cites"
    assert not missing, "cited but not in the repository:\n" + "\n".join(missing)


def test_nothing_cites_files_outside_the_repository() -> None:
    hits = [f"{name}:{number}: {line.strip()}" for name, lines in texts() if name != "tests/quality/test_citations.py"
            for number, line in enumerate(lines, 1) if OUTSIDE.search(line)]
    assert not hits, "cites files a clone does not have (cite the public source, or write it into docs/):\n" + \
        "\n".join(hits)
