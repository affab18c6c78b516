"""The layering of the README's Architecture table as tests: import-linter's contracts ([tool.importlinter] in
pyproject.toml) hold on the tree, each kind of contract fails on a tree that breaks it, and no module of the broker
imports itself back through a chain of others.

`make lint` (or `.venv/bin/lint-imports`) prints the broken contracts with every offending import and its line.
"""
from __future__ import annotations

import shutil
import sys
from collections.abc import Iterable
from pathlib import Path

import grimp
import pytest

from tests.quality.helpers import BIN, PACKAGES, REPO, report, run_tool

LINT_IMPORTS = str(BIN / "lint-imports")


def lint_imports(root: Path, *contracts: str) -> tuple[int, str]:
    """lint-imports on the packages under ``root``, with its pyproject.toml: every contract, or those named."""
    argv = [LINT_IMPORTS, "--no-cache", "--no-logo", str(root / "pyproject.toml")]
    for contract in contracts:
        argv += ["--contract", contract]
    proc = run_tool(argv, cwd=root, env={"PYTHONPATH": str(root)})
    return proc.returncode, report(proc, limit=400)


def test_the_tree_keeps_every_contract():
    code, out = lint_imports(REPO)
    assert code == 0, "import contracts broken (pyproject.toml [tool.importlinter]), " + out


def copy_tree(dest: Path) -> Path:
    """The Python sources of the repository's packages and its pyproject.toml, nothing built."""
    skip = shutil.ignore_patterns("__pycache__", "*.so", "*.c", "*.h", "*.html", "*.pyx", "*.pxd", "results", "*.md")
    for package in (*PACKAGES, "bench"):
        shutil.copytree(REPO / package, dest / package, ignore=skip)
    shutil.copy2(REPO / "pyproject.toml", dest / "pyproject.toml")
    return dest


# (contract id, file to add the import to, the code added, the import lint-imports must name)
FORBIDDEN = [
    ("log", "kbroker/log/__init__.py", "import kbroker.handlers", "kbroker.log -> kbroker.handlers"),
    ("log", "kbroker/log/__init__.py", "def _late():\n    import kbroker.network", "kbroker.log -> kbroker.network"),
    ("layers", "kbroker/replication/partition.py", "import kbroker.broker",
     "kbroker.replication.partition -> kbroker.broker"),
    ("layers", "kbroker/replication/__init__.py", "import kbroker.replicas.replica_manager",
     "kbroker.replication -> kbroker.replicas.replica_manager"),
    ("layers", "kbroker/coordinator/group/__init__.py", "import kbroker.controller",
     "kbroker.coordinator.group -> kbroker.controller"),
    ("network", "kbroker/network/__init__.py", "import kbroker.handlers", "kbroker.network -> kbroker.handlers"),
    ("protocol", "kbroker/protocol/__init__.py", "import kbroker.log", "kbroker.protocol -> kbroker.log"),
    ("core", "kbroker/_core/__init__.py", "import kbroker.errors", "kbroker._core -> kbroker.errors"),
    ("core_face", "kbroker/topics/admin.py", "import kbroker._core.records",
     "kbroker.topics.admin -> kbroker._core"),
    ("core_face", "kbroker/timers.py", "import kbroker._core.timewheel", "kbroker.timers -> kbroker._core"),
    ("zk_compat", "zk_compat/__init__.py", "import kbroker.errors", "zk_compat -> kbroker.errors"),
    ("kazoo_bridge", "kazoo_bridge/__init__.py", "import kbroker.errors", "kazoo_bridge -> kbroker.errors"),
    ("kazoo_bridge_importers", "kbroker/replication/partition.py", "import kazoo_bridge",
     "kbroker.replication.partition -> kazoo_bridge"),
    ("no_bench", "kbroker/cli.py", "import bench", "kbroker.cli -> bench"),
    ("layers", "kbroker/metadata/cache.py", "import kbroker.replication",
     "kbroker.metadata.cache -> kbroker.replication"),
    ("coordinators", "kbroker/coordinator/group/__init__.py", "import kbroker.coordinator.transaction",
     "kbroker.coordinator.group -> kbroker.coordinator.transaction"),
    ("config", "kbroker/config/topic.py", "import kbroker.log", "kbroker.config.topic -> kbroker.log"),
    ("spark_client", "kbroker_spark/__init__.py", "import kbroker.errors", "kbroker_spark -> kbroker.errors"),
    ("not_spark", "kbroker/tools/__init__.py", "import kbroker_spark", "kbroker.tools -> kbroker_spark"),
    ("host", "kbroker/host/plan.py", "import kbroker.broker", "kbroker.host.plan -> kbroker.broker"),
]


@pytest.mark.parametrize(("contract", "path", "code", "named"), FORBIDDEN,
                         ids=[f"{c}:{n.split(' -> ')[1]}" + ("-lazy" if "def " in s else "")
                              for c, _, s, n in FORBIDDEN])
def test_a_forbidden_import_breaks_its_contract(tmp_path, contract, path, code, named):
    root = copy_tree(tmp_path)
    with open(root / path, "a") as f:
        f.write(f"\n\n{code}  # added by tests/quality\n")
    exit_code, out = lint_imports(root, contract)
    assert exit_code != 0, f"contract {contract!r} kept despite {named}: " + out
    assert named in out, f"contract {contract!r} broken, but the report does not name {named}: " + out


def test_a_loop_between_sibling_modules_breaks_the_acyclic_contract(tmp_path):
    root = copy_tree(tmp_path)
    (root / "kbroker/log/_loop_a.py").write_text("import kbroker.log._loop_b\n")
    (root / "kbroker/log/_loop_b.py").write_text("def later():\n    import kbroker.log._loop_a\n")
    exit_code, out = lint_imports(root, "acyclic")
    assert exit_code != 0, "contract 'acyclic' kept despite a loop in kbroker.log: " + out
    assert "No cycles are allowed in kbroker.log" in out and "_loop_" in out, out


# -- cycles ---------------------------------------------------------------------------------------------------------

def runtime_import_graph(packages: Iterable[str]) -> grimp.ImportGraph:
    """The packages' imports; those inside functions count, since they run, ``if TYPE_CHECKING:`` ones do not."""
    return grimp.build_graph(*packages, exclude_type_checking_imports=True, cache_dir=None)


def import_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Every set of modules that import each other through a chain (Tarjan's strongly connected components), each as
    a sorted list."""
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(edges[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges.get(child, ()))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def describe(graph: grimp.ImportGraph, cycles: list[list[str]]) -> str:
    """Each cycle as the imports between its modules, with their lines."""
    out = []
    for members in cycles:
        out.append(f"- {len(members)} modules: {', '.join(members)}")
        inside = set(members)
        for importer in members:
            for imported in sorted(graph.find_modules_directly_imported_by(importer) & inside):
                lines = ", ".join(f"l.{d['line_number']}" for d in graph.get_import_details(importer=importer,
                                                                                           imported=imported))
                out.append(f"    {importer} -> {imported} ({lines})")
    return "\n".join(out)


def test_no_module_imports_itself_back():
    graph = runtime_import_graph(PACKAGES)
    cycles = import_cycles(graph)
    assert not cycles, f"import cycles among the broker's modules:\n{describe(graph, cycles)}"


def test_the_cycle_check_counts_imports_in_functions_but_not_type_checking_ones(tmp_path, monkeypatch):
    pkg = tmp_path / "cyclepkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def later():\n    from cyclepkg import b\n    return b\n")
    (pkg / "b.py").write_text("import cyclepkg.a\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from cyclepkg import d\n")
    (pkg / "d.py").write_text("import cyclepkg.c\n")
    # sys.path set directly: syspath_prepend imports pkg_resources, which a test run may have left broken
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    monkeypatch.delitem(sys.modules, "cyclepkg", raising=False)
    graph = runtime_import_graph(["cyclepkg"])
    assert import_cycles(graph) == [["cyclepkg.a", "cyclepkg.b"]]
    assert "cyclepkg.a -> cyclepkg.b (l.2)" in describe(graph, import_cycles(graph))
