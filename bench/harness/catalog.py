"""bench/'s entry points, found in the source tree, each with the first line of its docstring (what it measures).

An entry point is a package's ``__main__.py`` (``python -m <package>``), a module that runs as a script (a top-level
``if __name__ == "__main__":``, ``python -m <module>``) or a Locust file (``locust -f <path>``). Nothing is listed by
hand, so ``python -m bench --list`` cannot drift from the files; tests/bench/test_catalog.py imports each one.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]
# the order --list prints them in: the suite first, the shared harness last
ORDER = ("", "suite", "experiments", "reliability", "load", "harness")


@dataclass(frozen=True)
class EntryPoint:
    command: str   # how to run it
    module: str    # its dotted module name (bench.load.locustfile for a Locust file: import it by path)
    path: Path
    summary: str   # the docstring's first line ("" when it has none)
    summary_alone: bool  # that line is followed by a blank line or nothing: a sentence of its own, not a cut one


def _runs_as_script(tree: ast.Module) -> bool:
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare):
            left, (right,) = node.test.left, node.test.comparators
            if isinstance(left, ast.Name) and left.id == "__name__" and isinstance(right, ast.Constant) \
                    and right.value == "__main__":
                return True
    return False


def entry_points() -> list[EntryPoint]:
    found = []
    for path in sorted(BENCH.rglob("*.py")):
        rel = path.relative_to(BENCH.parent)
        if "results" in rel.parts:
            continue
        tree = ast.parse(path.read_text(), str(path))
        parts = rel.with_suffix("").parts
        if path.name == "__main__.py":  # imported as <package>.__main__: its docstring, and main() not run
            module = ".".join(parts)
            command = f"python -m {'.'.join(parts[:-1])}"
        elif path.name == "locustfile.py":
            module = ".".join(parts)
            command = f"locust -f {rel}"
        elif _runs_as_script(tree):
            module = ".".join(parts)
            command = f"python -m {module}"
        else:
            continue
        lines = (ast.get_docstring(tree) or "").splitlines()
        summary = lines[0].strip() if lines else ""
        found.append(EntryPoint(command, module, path, summary, bool(summary) and (len(lines) == 1 or not lines[1])))
    return sorted(found, key=_place)


def _place(e: EntryPoint) -> tuple[int, str]:
    folder = e.module.split(".")[1] if e.module.count(".") > 1 else ""
    return (ORDER.index(folder) if folder in ORDER else len(ORDER), e.module)


def listing() -> str:
    points = entry_points()
    width = max(len(e.command) for e in points)
    return "\n".join(f"  {e.command:<{width}}  {e.summary}" for e in points)
