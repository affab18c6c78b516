"""What every results record says of itself: the command that made it, the commit it ran and the date."""
from __future__ import annotations

import datetime
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def commit(tree: Path = REPO) -> str:
    """HEAD of ``tree``, with ``+dirty`` when the work tree has changes ("unknown" outside git)."""
    try:
        head = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def provenance(argv: Sequence[str]) -> dict[str, str]:
    """{"command", "commit", "date"} for a record made by ``python -m <module> argv[1:]``."""
    return {"command": shlex.join(["python", "-m", _module(argv[0]), *argv[1:]]), "commit": commit(),
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}


def header(script: str, args: Sequence[str] | None = None) -> dict[str, str]:
    """The first line an entry point prints, so a results file saved from its output says what made it:
    ``{"kind": "provenance", ...}`` for ``python -m <script's module> args`` (default: this process's arguments).
    ``script`` is the entry point's ``__file__``, right also when ``main(args)`` is called from another module."""
    return {"kind": "provenance", **provenance([script, *(sys.argv[1:] if args is None else args)])}


def _module(script: str) -> str:
    path = Path(script).resolve()
    try:
        parts = path.with_suffix("").relative_to(REPO).parts
    except ValueError:
        return script
    return ".".join(parts[:-1] if parts[-1] == "__main__" else parts)
