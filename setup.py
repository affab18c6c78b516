"""Build the Cython core of kbroker.

Every ``kbroker/_core/*.pyx`` becomes its own extension module (they import
separately and are tested separately).  ``KBROKER_DEBUG=1`` builds with
``-O0 -g``, line tracing and annotated HTML; ``KBROKER_ONLY=a,b`` restricts
the build to the named modules (handy while one module is being written).
"""
import os
import sys
from pathlib import Path

from setuptools import Extension, setup

CYTHON_RANGE = ((3, 0), (3, 3))

try:
    import Cython
    from Cython.Build import cythonize
except ImportError:  # pragma: no cover - build-time message only
    sys.exit("kbroker needs Cython >=3.0,<3.3 to build: run `make build` (it installs it into .venv)")

_ver = tuple(int(p) for p in Cython.__version__.split(".")[:2])
if not (CYTHON_RANGE[0] <= _ver < CYTHON_RANGE[1]):
    sys.exit(f"kbroker needs Cython >=3.0,<3.3, found {Cython.__version__}")

import numpy  # noqa: E402  (needed for the index module's headers)

DEBUG = os.environ.get("KBROKER_DEBUG") == "1"
ONLY = {m for m in os.environ.get("KBROKER_ONLY", "").split(",") if m}
CORE = Path("kbroker/_core")


def _liburing_paths():
    """Headers and library of python-liburing, which we cimport for io_uring."""
    try:
        import liburing
    except ImportError:
        sys.exit("kbroker needs python-liburing: pip install --no-binary liburing liburing==2024.5.3")
    root = Path(liburing.__file__).parent
    return [str(root.parent), str(root / "include")]


def _extensions():
    cflags = ["-O0", "-g"] if DEBUG else ["-O2"]
    cflags += ["-Wall", "-Wno-unused-function", "-Wno-unreachable-code"]
    macros = [("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")]
    if DEBUG:
        macros += [("KBROKER_DEBUG", "1"), ("CYTHON_TRACE", "1")]
    exts = []
    for pyx in sorted(CORE.glob("*.pyx")):
        name = pyx.stem
        if ONLY and name not in ONLY:
            continue
        include_dirs = [numpy.get_include(), str(CORE)]
        if name == "appender":
            include_dirs += _liburing_paths()
        exts.append(
            Extension(
                f"kbroker._core.{name}",
                [str(pyx)],
                include_dirs=include_dirs,
                extra_compile_args=cflags,
                define_macros=macros,
            )
        )
    return cythonize(
        exts,
        language_level=3,
        annotate=DEBUG,
        compiler_directives={"embedsignature": True, "linetrace": DEBUG},
        include_path=[str(CORE.parent.parent)] + (_liburing_paths() if any(e.name.endswith("appender") for e in exts) else []),
    )


setup(ext_modules=_extensions())
