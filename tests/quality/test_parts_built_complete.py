"""Parts are built complete and keep their own attributes (issue 30): read from the source.

Two patterns of finishing or changing a part from outside, each found with the AST of every module of kbroker/:

* reaching through a part held by ``self`` to set one of its attributes (``self.topics.stopping = True``,
  ``self.cleaner.throttle.rate = r``): the part gets a method that says what happened;
* setting attributes on an object a function has just built with a class of another module (as the fetch read's
  ``denied``, ``quota_bytes``, ``throttle`` and ``metrics`` were, set after ``FetchRead(...)``): the constructor
  takes them. Records are exempt: dataclasses and NamedTuples, and classes filled by their own module (a parser
  filling its ``Field``s, a group its ``Member``s).

And the composition root's ``stop()`` knows what it built without asking (no ``hasattr``/``getattr``).
"""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "kbroker"

# (module, target as written): why it stays. Each names what should change and where it is held up.
EXCEPTIONS = {
    # Throttler.rate is a property: assigning it runs Throttler's own setter.
    ("kbroker/log/cleaner_threads.py", "self.throttle.rate"): "Throttler's rate setter",
}


def _records_and_homes() -> tuple[set[str], dict[str, set[Path]]]:
    """Names of the record classes (dataclasses, NamedTuples) of kbroker, and the modules defining each class."""
    records: set[str] = set()
    homes: dict[str, set[Path]] = {}
    for path in SOURCE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef):
                continue
            homes.setdefault(node.name, set()).add(path)
            decorators = {ast.unparse(d).split("(")[0] for d in node.decorator_list}
            if decorators & {"dataclass", "dataclasses.dataclass"} or any(
                    ast.unparse(b) in ("NamedTuple", "typing.NamedTuple") for b in node.bases):
                records.add(node.name)
    return records, homes


def _assigned(node: ast.AST) -> list[ast.Attribute]:
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        targets = [node.target]
    else:
        return []
    found = []
    for target in targets:
        for sub in ast.walk(target):  # tuple targets too
            if isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store):
                found.append(sub)
    return found


def _through_a_part_of_self(target: ast.Attribute) -> bool:
    """``self.<part>...<attr>``: at least one step between self and the attribute set."""
    base = target.value
    depth = 0
    while isinstance(base, (ast.Attribute, ast.Subscript)):
        base = base.value
        depth += 1
    return depth >= 1 and isinstance(base, ast.Name) and base.id == "self"


def violations(source: Path = SOURCE) -> list[tuple[str, str, int, str]]:
    """(module, target, line, what) for every finding, exceptions included."""
    records, homes = _records_and_homes()
    found = []
    for path in sorted(source.rglob("*.py")):
        module = path.relative_to(REPO).as_posix()
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            built: dict[str, str] = {}  # local name -> class of another module it was built with
            for node in ast.walk(fn):
                if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                    func = node.value.func
                    cls = (func.id if isinstance(func, ast.Name)
                           else func.attr if isinstance(func, ast.Attribute) else "")
                    if cls in homes and cls not in records and path not in homes[cls]:
                        built.update((t.id, cls) for t in node.targets if isinstance(t, ast.Name))
            for node in ast.walk(fn):
                for target in _assigned(node):
                    text = ast.unparse(target)
                    if _through_a_part_of_self(target):
                        found.append((module, text, target.lineno, "sets an attribute of a part held by self"))
                    elif isinstance(target.value, ast.Name) and target.value.id in built:
                        found.append((module, text, target.lineno,
                                      f"sets an attribute of the {built[target.value.id]} it has just built"))
    return sorted(set(found))


def test_no_part_is_finished_or_changed_from_outside():
    unexpected = [f"{module}:{line}: {text} ({what})" for module, text, line, what in violations()
                  if (module, text) not in EXCEPTIONS]
    assert not unexpected, ("give the part a constructor argument or a method instead:\n" + "\n".join(unexpected))


def test_every_exception_still_exists():
    """An exception whose assignment is gone is removed from EXCEPTIONS, so the list says what is left."""
    present = {(module, text) for module, text, _, _ in violations()}
    assert not set(EXCEPTIONS) - present, f"stale exceptions: {sorted(set(EXCEPTIONS) - present)}"


def test_the_scan_finds_both_patterns(tmp_path):
    """The scan itself: a part reached through self and an object finished after it is built are both found."""
    package = tmp_path / "kbroker"
    package.mkdir()
    (package / "parts.py").write_text("class Reader:\n    def __init__(self):\n        self.limit = 0\n")
    (package / "root.py").write_text(
        "from kbroker.parts import Reader\n\n"
        "class Root:\n"
        "    def start(self):\n"
        "        reader = Reader()\n"
        "        reader.limit = 5\n"
        "        self.other.flag = True\n"
        "        self.mine = reader\n")
    global REPO, SOURCE
    saved = REPO, SOURCE
    REPO, SOURCE = tmp_path, package
    try:
        found = {(text, what.split(" ")[-1]) for _, text, _, what in violations(package)}
    finally:
        REPO, SOURCE = saved
    assert found == {("reader.limit", "built"), ("self.other.flag", "self")}


def test_the_composition_root_stops_what_it_built_without_asking():
    tree = ast.parse((SOURCE / "broker.py").read_text())
    asked = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call)
             and isinstance(node.func, ast.Name) and node.func.id in ("hasattr", "getattr")]
    assert not asked, f"kbroker/broker.py asks whether a part exists at lines {asked}"
