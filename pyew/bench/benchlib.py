"""The benchmark library, libew_bench.so beside libew.so (`make bench`): kernels libew's are compared
with and users never call (naive twins of BENCH_NAIVE map ops, dot's per-thread atomics), by ctypes."""
from __future__ import annotations

import ctypes
import json
import os
from pathlib import Path

from ..library import ABI_CTYPES


def load(path: Path, spec_files) -> dict:
    """(op, dtype, role) -> (symbol, callable) of each entry point of the library at `path`."""
    cdll = ctypes.CDLL(str(path))
    cdll.ew_bench_manifest.restype = ctypes.c_char_p
    doc = json.loads(cdll.ew_bench_manifest().decode())
    if {(f["path"], f["sha256"]) for f in doc["spec_files"]} != {(f.path, f.sha256) for f in spec_files}:
        raise ValueError("it was built from other spec files than libew.so: rebuild it with `make bench`")
    entries = {}
    for e in doc["entries"]:
        fn = getattr(cdll, e["symbol"])
        fn.argtypes, fn.restype = [ABI_CTYPES[kind] for _, kind in e["args"]], ctypes.c_int
        entries[(e["op"], e["dtype"], e["role"])] = (e["symbol"], fn)
    return entries


def get(run) -> dict:
    """Entries of libew_bench.so beside libew.so (or $PYEW_BENCH_LIB), once per run; {} with a note if unusable."""
    if "benchlib" not in run.cache:
        run.cache["benchlib"] = {}
        path = Path(os.environ.get("PYEW_BENCH_LIB") or Path(run.lib.path).parent / "libew_bench.so")
        if not path.exists():
            run.note(f"no benchmark library {path}: the naive kernel and dot's atomic methods are not measured "
                     "(`make bench` builds it, or set PYEW_BENCH_LIB)")
        else:
            try:
                run.cache["benchlib"] = load(path, run.lib.manifest.spec_files)
            except (OSError, AttributeError, KeyError, ValueError) as e:
                run.note(f"benchmark library {path} not used: {e}")
    return run.cache["benchlib"]
