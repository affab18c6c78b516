"""Coverage-guided fuzzing of kbroker's parsers of untrusted bytes, with atheris (libFuzzer).

    python -m bench.reliability.fuzz --list
    python -m bench.reliability.fuzz --target request --runs 1000000
    python -m bench.reliability.fuzz --target legacy --runs 1000000 --minimize   # then merge into the kept corpus

Each run starts from the kept corpus (tests/fuzz/corpus/<target>/, replayed by `make test`) and
seeds built fresh by the target, writes what it finds new to a work directory, and prints one JSON
line: runs, exec/s, libFuzzer's final coverage (cov: edges, ft: features), the new corpus files
and the findings (crash/timeout/oom artifacts with the exception libFuzzer printed). An input that
runs over a second (-timeout=1), any exception outside the target's contract, or a crash is a
finding; libFuzzer stops at the first one. ``--minimize`` replaces the kept corpus with libFuzzer's
-merge=1 of it and the new files (regress-* inputs are always kept as they are).

Coverage comes from atheris instrumenting the target's Python modules (and the request codecs that
kbroker.protocol.schema compiles with exec). The Cython core (kbroker._core) is not instrumented:
its targets rely on the valid seeds and libFuzzer's mutations, not on feedback from inside it.

The fuzzer runs in a child process (libFuzzer exits the process when it is done), so the parent
can read its output and summarise it.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.harness.results_meta import header

REPO = Path(__file__).resolve().parents[3]
KEPT = REPO / "tests" / "fuzz" / "corpus"

# The modules atheris instruments per target: named here, because they must be imported (by
# bench.reliability.fuzz.targets) only once the import hook is in place.
INSTRUMENT: dict[str, list[str]] = {
    "request": ["kbroker.protocol"],
    "batch_validation": ["bench.reliability.fuzz.targets"],
    "legacy": ["kbroker.log.legacy", "kbroker.log.batches", "kbroker.log.compression"],
    "compressed": ["kbroker.log.batches", "kbroker.log.compression"],
    "journal": ["zk_compat"],
}
_STATUS = re.compile(r"^#(\d+)\s+(\w+)\s+cov: (\d+) ft: (\d+) corp: (\d+)/\S+.*?exec/s: (\d+)")
_DONE = re.compile(r"^Done (\d+) runs in (\d+) second")
_AVERAGE = re.compile(r"^stat::average_exec_per_sec:\s+(\d+)")


def _worker(name: str, libfuzzer_args: list[str]) -> None:
    import atheris  # type: ignore[import-untyped]  # no stubs; only this worker imports it

    logging.disable(logging.CRITICAL)  # the parsers log what they refuse: millions of lines
    with atheris.instrument_imports(include=INSTRUMENT[name]):
        from bench.reliability.fuzz import targets
    target = targets.TARGETS[name]
    for fn in target.extra_code():
        atheris.instrument_func(fn)

    def one_input(data: bytes) -> None:
        targets.check(target, data)

    # libFuzzer runs argv[0] through the shell for -merge=1: make it this worker's command line
    argv0 = f"{sys.executable} -m bench.reliability.fuzz --worker {name} --"
    atheris.Setup([argv0, *libfuzzer_args], one_input)
    atheris.Fuzz()


def _write_seeds(name: str, directory: Path) -> int:
    from bench.reliability.fuzz import targets

    directory.mkdir(parents=True, exist_ok=True)
    count = 0
    for seed in targets.TARGETS[name].seeds():
        (directory / hashlib.sha1(seed).hexdigest()).write_bytes(seed)
        count += 1
    return count


def _child(name: str, args: list[str], log_path: Path) -> tuple[int, list[str]]:
    cmd = [sys.executable, "-m", "bench.reliability.fuzz", "--worker", name, "--", *args]
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with open(log_path, "w") as log, tempfile.TemporaryDirectory(prefix="kbroker-fuzz-", dir=shm) as tmp:
        env = {**os.environ, "KBROKER_FUZZ_TMP": tmp}  # scratch files of the targets (the journal's store)
        rc = subprocess.call(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env)
    return rc, log_path.read_text(errors="replace").splitlines()


def _findings(artifacts: Path, lines: list[str]) -> list[dict[str, str]]:
    """One entry per artifact libFuzzer wrote, with the exception (or reason) it printed."""
    reason = ""
    for i, line in enumerate(lines):
        if "Uncaught Python exception" in line:
            reason = "\n".join(lines[i + 1:i + 30])
            break
        if "ERROR: libFuzzer:" in line or "Slow input" in line:
            reason = line.strip()
    out = []
    for path in sorted(artifacts.iterdir()) if artifacts.exists() else []:
        out.append({"file": str(path), "kind": path.name.split("-")[0], "reason": reason})
    return out


def fuzz(name: str, runs: int, corpus: Path, workdir: Path, max_len: int, minimize: bool) -> dict:
    work = workdir / name
    new, seeds, artifacts = work / "corpus", work / "seeds", work / "artifacts"
    for d in (new, artifacts):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    _write_seeds(name, seeds)
    corpus.mkdir(parents=True, exist_ok=True)
    args = [f"-runs={runs}", "-timeout=1", "-rss_limit_mb=2048", f"-max_len={max_len}",
            f"-artifact_prefix={artifacts}/", "-print_final_stats=1", str(new), str(seeds), str(corpus)]
    started = time.monotonic()
    rc, lines = _child(name, args, work / "fuzz.log")
    seconds = time.monotonic() - started
    last: tuple[str, ...] = ()
    done_runs = average = None
    for line in lines:
        a = _AVERAGE.match(line)
        if a:
            average = int(a.group(1))
        m = _STATUS.match(line)
        if m:
            last = m.groups()
        done = _DONE.match(line)
        if done:
            done_runs = int(done.group(1))
    summary: dict = {
        "target": name,
        "runs": done_runs if done_runs is not None else (int(last[0]) if last else 0),
        "seconds": round(seconds, 1),
        "exec_per_s": average if average is not None else (int(last[5]) if last else None),
        "cov": int(last[2]) if last else None,
        "ft": int(last[3]) if last else None,
        "corpus_size": int(last[4]) if last else None,
        "new_corpus_files": len(list(new.iterdir())),
        "findings": _findings(artifacts, lines),
        "exit": rc,
        "log": str(work / "fuzz.log"),
        "command": f"python -m bench.reliability.fuzz --target {name} --runs {runs}",
    }
    if minimize and not summary["findings"]:
        summary["kept_corpus_files"] = _minimize(name, corpus, [new, seeds], work)
    return summary


def _minimize(name: str, corpus: Path, extra: list[Path], work: Path) -> int:
    """Replace the kept corpus with few inputs that cover the same code: libFuzzer's -merge=1 of the
    kept corpus and `extra` into a fresh directory first (edges only, -use_counters=0), then a
    greedy cover by the line transitions each input executes (libFuzzer's own pick favours many
    small files; the replay in `make test` wants few). regress-* files are always kept as they are."""
    fresh = work / "merged"
    shutil.rmtree(fresh, ignore_errors=True)
    fresh.mkdir()
    rc, _ = _child(name, ["-merge=1", "-use_counters=0", "-timeout=1", str(fresh), str(corpus), *map(str, extra)],
                   work / "merge.log")
    if rc != 0:
        raise SystemExit(f"merge failed (exit {rc}); see {work / 'merge.log'}")
    from bench.reliability.fuzz import targets

    logging.disable(logging.CRITICAL)  # as in the worker: the parsers log what they refuse
    target = targets.TARGETS[name]
    inputs = [path.read_bytes() for path in sorted(fresh.iterdir())]
    chosen = _greedy_cover([_arcs(target, data) for data in inputs])
    for path in corpus.iterdir():
        if not path.name.startswith("regress-"):
            path.unlink()
    for i in chosen:
        (corpus / hashlib.sha1(inputs[i]).hexdigest()).write_bytes(inputs[i])
    shutil.rmtree(fresh, ignore_errors=True)
    return len(list(corpus.iterdir()))


_STDLIB = (sys.base_prefix, sys.prefix)


def _arcs(target, data: bytes) -> set[tuple[str, int, int, int]]:
    """The (code, line, next line) transitions of the project's code (and of the codecs compiled
    with exec) while `target` runs `data`."""
    arcs: set[tuple[str, int, int, int]] = set()

    def call(frame, event, arg):
        code = frame.f_code
        if code.co_filename.startswith(_STDLIB):
            return None
        where, last = f"{code.co_filename}:{code.co_name}", [frame.f_lineno]

        def line(frame, event, arg):
            if event == "line":
                arcs.add((where, code.co_firstlineno, last[0], frame.f_lineno))
                last[0] = frame.f_lineno
            return line
        return line

    sys.settrace(call)
    try:
        target.run(data)
    except Exception:  # noqa: BLE001 - which inputs fail does not matter here, only what they reach
        pass
    finally:
        sys.settrace(None)
    return arcs


def _greedy_cover(covers: list[set]) -> list[int]:
    """Indexes of inputs that together reach everything any of them reaches: repeatedly the one
    adding the most not yet reached."""
    remaining = dict(enumerate(covers))
    covered: set = set()
    chosen = []
    while remaining:
        best = max(remaining, key=lambda i: len(remaining[i] - covered))
        gain = remaining.pop(best) - covered
        if not gain:
            break
        covered |= gain
        chosen.append(best)
    return chosen


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        _worker(argv[1], argv[3:])  # --worker NAME -- libFuzzer args
        return 0
    parser = argparse.ArgumentParser(prog="python -m bench.reliability.fuzz", description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="the targets and what each fuzzes")
    parser.add_argument("--target", choices=sorted(INSTRUMENT), help="the target to fuzz")
    parser.add_argument("--runs", type=int, default=100_000, help="inputs to run (libFuzzer's -runs)")
    parser.add_argument("--corpus", type=Path, help="kept corpus (default tests/fuzz/corpus/TARGET)")
    parser.add_argument("--workdir", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "kbroker-fuzz",
                        help="where new corpus files, seeds, artifacts and the log go")
    parser.add_argument("--max-len", type=int, default=8192, help="largest input libFuzzer makes")
    parser.add_argument("--minimize", action="store_true",
                        help="after a clean run, merge the new files into the kept corpus (-merge=1)")
    opts = parser.parse_args(argv)
    if opts.list:
        from bench.reliability.fuzz.targets import TARGETS

        for t in TARGETS.values():
            print(json.dumps({"target": t.name, "fuzzes": t.doc,
                              "allowed": [e.__qualname__ for e in t.allowed]}))
        return 0
    if opts.target is None:
        parser.error("--target or --list is required")
    corpus = opts.corpus or KEPT / opts.target
    print(json.dumps(header(__file__, argv)), flush=True)
    summary = fuzz(opts.target, opts.runs, corpus, opts.workdir, opts.max_len, opts.minimize)
    print(json.dumps(summary))
    return 1 if summary["findings"] or summary["exit"] != 0 else 0


if __name__ == "__main__":
    sys.exit(main())
