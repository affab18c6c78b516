"""What every results record says of itself: the command that made it, the commit it ran and the date."""
from __future__ import annotations

import datetime
import shlex
import subprocess
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


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


def _module(script: str) -> str:
    path = Path(script).resolve()
    try:
        parts = path.with_suffix("").relative_to(REPO).parts
    except ValueError:
        return script
    return ".".join(parts[:-1] if parts[-1] == "__main__" else parts)
