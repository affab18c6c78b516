"""ruff and mypy, configured in pyproject.toml, as tests: `make test` fails where `make lint` would.

To see or fix the findings by hand: `make lint`, `.venv/bin/ruff check --fix PATH`, `.venv/bin/mypy`.
"""
from __future__ import annotations

import sys

from tests.quality.helpers import LINT_PATHS, report, run_tool


def test_ruff_finds_nothing():
    proc = run_tool([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise",
                     *LINT_PATHS])
    assert proc.returncode == 0, "ruff check " + " ".join(LINT_PATHS) + " has findings, " + report(proc)


def test_mypy_passes():
    # The files, the strict modules and the stub-less third-party packages are listed in [tool.mypy].
    proc = run_tool([sys.executable, "-m", "mypy"], timeout=600)
    assert proc.returncode == 0, "mypy has findings, " + report(proc)
