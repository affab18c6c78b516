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


# What `strict = true` turns on (mypy 1.x); an override that sets one of these false, or ignore_errors, relaxes it.
STRICT_FLAGS = ("warn_unused_configs", "disallow_any_generics", "disallow_subclassing_any", "disallow_untyped_calls",
                "disallow_untyped_defs", "disallow_incomplete_defs", "check_untyped_defs",
                "disallow_untyped_decorators", "warn_redundant_casts", "warn_unused_ignores", "warn_return_any",
                "no_implicit_reexport", "strict_equality", "extra_checks")


def test_mypy_is_strict_on_every_module_of_the_three_packages():
    """Issue 23: mypy strict on every module of kbroker/, zk_compat/ and kazoo_bridge/ (test_mypy_passes then fails on
    any strict error): the global switch is on, and no per-module override takes any part of it back."""
    import tomllib

    from tests.quality.helpers import REPO

    mypy = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]
    assert mypy.get("strict") is True, "[tool.mypy] strict = true is missing"
    assert {"kbroker", "zk_compat", "kazoo_bridge"} <= set(mypy["files"])
    relaxed = [(o["module"], key) for o in mypy.get("overrides", []) for key, value in o.items()
               if (key in STRICT_FLAGS and value is False) or (key in ("ignore_errors", "follow_imports") and value
                                                               not in (False, "normal"))]
    assert not relaxed, f"overrides relax strict mode: {relaxed}"
    ours = [o["module"] for o in mypy.get("overrides", [])
            if any(str(m).startswith(("kbroker", "zk_compat", "kazoo_bridge")) for m in
                   ([o["module"]] if isinstance(o["module"], str) else o["module"]))]
    assert not ours, f"per-module mypy overrides for our own packages: {ours}"
