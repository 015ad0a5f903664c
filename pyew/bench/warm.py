"""Warm-up before timing: every kernel a suite times is called once on a tiny array first.

CUDA loads a module lazily on its first launch (CUDA_MODULE_LOADING=LAZY, the default since CUDA
12.2), which costs a first call milliseconds; CuPy compiles an ElementwiseKernel on its first call
per dtype, numexpr parses an expression on first use. None of that belongs in a timed call, so each
suite calls what it will time once, on data small enough that the warm-up itself is quick.
"""
from __future__ import annotations

from .. import runtime as rt
from .context import STICKY


def warm_up(run, calls, label: str = "") -> int:
    """Call each zero-argument callable once and wait for the GPU; returns how many succeeded. A
    failure is left to the measurement to report, unless it leaves the CUDA context unusable
    (then the run stops, as a measurement's would)."""
    ok = 0
    if label:
        run.status(f"warm-up: {label}", force=True)
    for c in calls:
        try:
            c()
            ok += 1
        except Exception as e:
            text = f"{getattr(e, 'name', '')} {e}"
            if any(code in text for code in STICKY):
                run.failed(f"warm-up {label}".strip(), e)
    try:
        rt.synchronize()
    except Exception as e:
        run.failed(f"warm-up {label}".strip(), e)
    return ok


def once(run, key) -> bool:
    """True the first time `key` is seen in this run (later callers skip their warm-up)."""
    if key in run.warmed:
        return False
    run.warmed.add(key)
    return True
