"""Running the house's lint tools from tests: each one as a subprocess of this interpreter's environment."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PACKAGES = ("kbroker", "kbroker_spark", "zk_compat", "kazoo_bridge")  # what the wheel holds
LINT_PATHS = (*PACKAGES, "tests", "bench")           # what ruff checks (the Makefile's LINT_PATHS)


def run_tool(argv: list[str], cwd: Path = REPO, env: dict[str, str] | None = None,
             timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run a tool with plain, wide output (no colours, no wrapped lines), so the report reads well in a failure."""
    full_env = dict(os.environ, NO_COLOR="1", TERM="dumb", COLUMNS="240")
    full_env.pop("FORCE_COLOR", None)
    full_env.update(env or {})
    return subprocess.run(argv, cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout)


def report(proc: subprocess.CompletedProcess[str], limit: int = 200) -> str:
    """The tool's output for an assertion message: its exit code and at most ``limit`` lines."""
    lines = (proc.stdout + proc.stderr).splitlines()
    cut = f"\n... {len(lines) - limit} more lines" if len(lines) > limit else ""
    return f"exit code {proc.returncode}:\n" + "\n".join(lines[:limit]) + cut
