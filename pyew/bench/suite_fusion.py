"""The fusion suite: formulas as one kernel on the GPU against their bytes' floor at the copy rate and the
peers, numpy in and out (numexpr has no erf: it computes gelu's tanh form), first calls (compiling, and
in a new process from the disk cache) and a cached formula's host time on 1-element arrays, through
pyew.evaluate and pyew.fuse."""
from __future__ import annotations

import functools
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from .. import kinds
from .. import runtime as rt
from ..array import empty
from ..fused import evaluate, fuse
from ..interop import asarray
from . import suite_numpy
from .harness import Suite, Table, gpu, host, host_rounds, random_device, random_host_n

GELU, SIX = "gelu(x * w + b)", "silu(x * w + b) * y + z * 0.5"
NE_GELU = "0.5 * (x * w + b) * (1 + tanh(0.7978845608 * ((x * w + b) + 0.044715 * (x * w + b) ** 3)))"
# each formula's dtype, sizes, inputs; its forms in torch.nn.functional, cupy.fuse, an ElementwiseKernel, pyew ops
CASES = {
    GELU: dict(dtype="float32", sizes=(1 << 26, 1 << 28), names="xwb",
               eager=lambda F: lambda x, w, b: F.gelu(x * w + b),
               fuse=lambda cp, sp: lambda x, w, b: 0.5 * (x * w + b) * (1 + sp.erf((x * w + b) * 0.7071067811865476)),
               ek=("T x, T w, T b", "T y", "float t = x * w + b; y = 0.5f * t * (1.0f + erff(t * 0.70710678f))"),
               ops=lambda t, x, w, b: t["gelu"](t["add"](t["mul"](x, w), b))),
    SIX: dict(dtype="float16", sizes=(1 << 26,), names="xwbyz",
              eager=lambda F: lambda x, w, b, y, z: F.silu(x * w + b) * y + z * 0.5,
              fuse=lambda cp, sp: lambda x, w, b, y, z: (x * w + b) / (1 + cp.exp(-(x * w + b))) * y + z * 0.5,
              ek=("T x, T w, T b, T y, T z", "T o", "float t = (float)x * (float)w + (float)b; "
                  "o = (T)(t / (1.0f + __expf(-t)) * (float)y + (float)z * 0.5f)"),
              ops=lambda t, x, w, b, y, z: t["add"](t["mul"](t["silu"](t["add"](t["mul"](x, w), b)), y),
                                                    t["mul"](z, 0.5))),
}
DISK_SCRIPT = """
import time, numpy as np, pyew
x = pyew.asarray(np.ones(1024, np.float32)); pyew.add(x, x); pyew.synchronize()   # the library loaded, as by any op
t = time.perf_counter(); pyew.evaluate({f!r}, local_dict=dict(x=x, w=x, b=x)); pyew.synchronize()
print((time.perf_counter() - t) * 1e3)
"""


def run_fusion(run) -> None:
    table = kinds.table()
    compiled: set = set()           # formulas torch.compile has compiled: its first call is timed once
    for f, case in CASES.items():
        dtype, names = case["dtype"], case["names"]
        for n in _sizes(run, case["sizes"]):
            ins, out = [random_device(run.rng, dtype, n) for _ in names], empty(n, dtype)
            env, nbytes = dict(zip(names, ins)), (len(names) + 1) * n * out.itemsize
            calls = {"pyew": functools.partial(evaluate, f, env, out=out),
                     "pyew op by op": functools.partial(case["ops"], table, **env)}
            if "torch" in run.peers:
                t, ts = run.peers["torch"].mod, [run.peers["torch"].wrap(a) for a in ins]
                calls["torch"] = functools.partial(case["eager"](t.nn.functional), *ts)
                calls["torch.compile"] = functools.partial(t.compile(case["eager"](t.nn.functional)), *ts)
                first = _first_ms(calls["torch.compile"])
                if f not in compiled:       # a later size's call recompiles for the new shape: not a first call
                    compiled.add(f)
                    run.add(suite="fusion", name="first call", dtype=dtype, n=0, impl="torch.compile", ms=first,
                            formula=f)
            if "cupy" in run.peers:
                import cupyx.scipy.special as sp
                cp, cs = run.peers["cupy"].mod, [run.peers["cupy"].wrap(a) for a in ins]
                fused_fn = cp.fuse(kernel_name="pyew_bench_fused")(case["fuse"](cp, sp))   # a lambda's name won't do
                calls["cupy.fuse"] = functools.partial(fused_fn, *cs)
                ek = cp.ElementwiseKernel(*case["ek"], f"pyew_bench_{abs(hash(f))}")
                calls["cupy ElementwiseKernel"] = functools.partial(ek, *cs)
            for impl, c in calls.items():
                row = run.measure("fusion", f, dtype, n, impl, functools.partial(gpu, run, [c], 1), bytes=nbytes)
                if row and run.copy_gbps:
                    row["x_floor"] = row["ms"] / (nbytes / (run.copy_gbps * 1e6))
            del ins, env, out, calls
            rt.synchronize()
    _numpy(run, table)
    _compile_times(run, table)


def _first_ms(fn) -> float:
    t0 = time.perf_counter()
    fn()
    rt.synchronize()
    return (time.perf_counter() - t0) * 1e3


def _sizes(run, sizes) -> list[int]:
    """The suite's sizes, or with --sizes those within them (at least the largest given)."""
    top = max(run.args.sizes)
    return ([n for n in sizes if n <= top] or [top]) if run.args.sizes_given else list(sizes)


def _numpy(run, table) -> None:
    n = _sizes(run, (1 << 26,))[0]
    if not suite_numpy.rates_measured(run):        # unless the numpy suite measured its rates
        suite_numpy.pcie(run)
    floor_ms = suite_numpy.floor_ms(run, 16 * n, suite_numpy.staged_bytes(12 * n, 4 * n))
    xs = {c: random_host_n(run.rng, "float32", n) for c in "xwb"}
    calls = {"pyew": functools.partial(evaluate, GELU, xs),
             "pyew op by op": functools.partial(CASES[GELU]["ops"], table, **xs)}
    if "numexpr" in run.peers:
        calls["numexpr"] = functools.partial(run.peers["numexpr"].mod.evaluate, NE_GELU, xs)
    for impl, fn in calls.items():
        row = run.measure("fusion numpy", GELU, "float32", n, impl, functools.partial(host, fn, budget_s=2.0),
                          bytes=16 * n)
        if row and floor_ms and impl == "pyew":
            row["floor_ms"], row["floor_ratio"] = floor_ms, row["ms"] / floor_ms


def _compile_times(run, table) -> None:
    """First call of a new formula (compiling), then in a new process (disk cache); a cached one's host time."""
    new, x1 = f"gelu(x * w + b) * {time.time_ns() % 997 + 2}", asarray(np.ones(1, np.float32))
    with tempfile.TemporaryDirectory() as cache:
        old = os.environ.get("PYEW_CACHE_DIR")
        os.environ["PYEW_CACHE_DIR"] = cache
        try:
            run.add(suite="fusion", name="first call", dtype="float32", n=0, impl="pyew",
                    ms=_first_ms(functools.partial(evaluate, new, dict(x=x1, w=x1, b=x1))))
            r = subprocess.run([sys.executable, "-c", DISK_SCRIPT.format(f=new)], capture_output=True, text=True,
                               env=dict(os.environ), timeout=300)
            if r.returncode == 0:
                run.add(suite="fusion", name="first call, new process", dtype="float32", n=0, impl="pyew",
                        ms=float(r.stdout.split()[-1]))
            else:
                run.note(f"fusion: the new-process run failed: {r.stderr.strip().splitlines()[-1:]}")
        finally:
            os.environ.pop("PYEW_CACHE_DIR") if old is None else os.environ.__setitem__("PYEW_CACHE_DIR", old)
    _host_times(run, table, x1)


def _host_times(run, table, x1) -> None:
    """A cached formula's host time per call on 1-element arrays, beside pyew.add's and PyTorch's."""
    fused_fn = fuse(lambda x, w, b: x * w + b)
    calls = [("pyew.evaluate", functools.partial(evaluate, "x * w + b", dict(x=x1, w=x1, b=x1))),
             ("pyew.fuse", functools.partial(fused_fn, x1, x1, x1)),
             ("pyew.add", functools.partial(table["add"], x1, x1))]
    if "torch" in run.peers:
        t1 = run.peers["torch"].wrap(x1)
        calls += [("pyew.fuse, torch tensors", functools.partial(fused_fn, t1, t1, t1)),
                  ("PyTorch eager, x * w + b", lambda: t1 * t1 + t1)]
    # the sides take turns, as the overhead suite's, so the host's drift hits them alike
    figures = host_rounds(run, "fusion host", dict(calls), rt.synchronize)
    for impl, _ in calls:
        run.measure("fusion host", "1 element", "float32", 1, impl, functools.partial(figures.get, impl))


SUITES = (Suite("fusion", "formulas as one kernel: pyew.evaluate vs op by op, PyTorch eager, torch.compile, "
                "cupy.fuse, CuPy ElementwiseKernel, numexpr; compile and cache times", run_fusion,
                (Table("Fused formulas on the GPU (ms; x floor: the bytes at the copy rate)", "fusion",
                       value=("ms", "x_floor"), keys=("name", "dtype", "n"), where=lambda r: r["n"]),
                 Table("Fused formulas, numpy in and out (ms)", "fusion numpy", value=("ms",),
                       fields=("floor_ms", "floor_ratio"),
                       text="The floor: the larger of the call's bytes (3 inputs, 1 output) over the pinned "
                       "both-ways bandwidth and its staged bytes (the 3 inputs; the result comes down into a "
                       "pooled pinned block) over the host's multi-threaded copy rate into pinned memory."),
                 Table("First calls (ms)", "fusion", value=("ms",), keys=("name", "dtype"),
                       where=lambda r: not r["n"]),
                 Table("Host time per call, 1-element DeviceArrays (µs)", "fusion host", value=("us_per_call",),
                       base="pyew.evaluate"))),)
