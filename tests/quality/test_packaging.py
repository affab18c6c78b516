"""pyproject.toml is the one list of Python packages and the wheel holds the broker only.

Every third-party module imported by the broker, the tests or bench/ comes from a distribution that pyproject.toml
lists (in [project] dependencies or an extra; the Makefile's deps recipe names the few it installs by hand), so a
new import cannot work here only because something else happened to install its package.
"""
from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from collections.abc import Iterator

import setuptools

from tests.quality.helpers import LINT_PATHS, PACKAGES, REPO

FIRST_PARTY = {*PACKAGES, "bench", "tests"}


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    return normalize(re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement).group(1))


def declared_distributions() -> set[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        requirements += extra
    names = {requirement_name(r) for r in requirements} - {normalize(project["name"])}
    # pip installs named by hand in the Makefile (pykafka without its deps; see the comment there)
    makefile = (REPO / "Makefile").read_text()
    names |= {normalize(n) for n in re.findall(r'install [^\n]*"([A-Za-z0-9][A-Za-z0-9._-]*)[=<>]', makefile)}
    return names


def _catches_import_error(node: ast.Try) -> bool:
    names = {"ImportError", "ModuleNotFoundError"}
    for handler in node.handlers:
        caught = handler.type
        if caught is None:
            return True
        elts = caught.elts if isinstance(caught, ast.Tuple) else [caught]
        if any(isinstance(e, ast.Name) and e.id in names for e in elts):
            return True
    return False


def required_imports(tree: ast.AST) -> Iterator[tuple[str, int]]:
    """Top-level names of absolute imports, leaving out those a ``try: ... except ImportError`` makes optional."""
    optional: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and _catches_import_error(node):
            for stmt in node.body:
                optional.update(id(n) for n in ast.walk(stmt))
    for node in ast.walk(tree):
        if id(node) in optional:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name.split(".")[0], node.lineno
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module.split(".")[0], node.lineno


def test_every_third_party_import_is_declared_in_pyproject():
    distributions = importlib.metadata.packages_distributions()
    declared = declared_distributions()
    missing: list[str] = []
    for top in LINT_PATHS:
        for path in sorted((REPO / top).rglob("*.py")):
            tree = ast.parse(path.read_bytes(), filename=str(path))
            for module, line in required_imports(tree):
                if module in FIRST_PARTY or module in sys.stdlib_module_names or module == "__future__":
                    continue
                dists = {normalize(d) for d in distributions.get(module, [])}
                if not dists & declared:
                    where = f"{path.relative_to(REPO)}:{line}"
                    missing.append(f"{where}: {module} ({', '.join(sorted(dists)) or 'not installed'})")
    assert not missing, "imports whose distribution pyproject.toml does not list:\n" + "\n".join(missing)


def test_the_wheel_holds_the_broker_only():
    find = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    shipped = set(setuptools.find_namespace_packages(where=str(REPO), include=find["include"],
                                                     exclude=find.get("exclude", ())))
    assert {name.split(".")[0] for name in shipped} == set(PACKAGES)
    in_tree = {".".join(init.parent.relative_to(REPO).parts)
               for top in PACKAGES for init in (REPO / top).rglob("__init__.py")}
    assert in_tree <= shipped, f"packages left out of the wheel: {sorted(in_tree - shipped)}"

