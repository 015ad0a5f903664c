"""Suites over pyew's Python API, each skipped with a note where the library lacks its function. firstcall:
a kernel's first launch loads its module (lazy loading), so each op runs in a fresh process."""
from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from .. import dtypes as dt
from .. import kinds
from .. import runtime as rt
from ..array import empty
from ..interop import asarray
from . import benchlib
from .harness import Suite, Table, gpu, host_rounds, map_cases, python_replay, random_device, rotation_slots

UPSAMPLE_SHAPE, RELU_MASK_SHAPE, BATCH_SCALE = (16, 32, 80, 80), (16, 32, 112, 112), 8    # and 8x the batch
DOT_N, API_DTYPES = 1 << 24, ("float32", "float16")
FIRSTCALL_COUNT, FIRSTCALL_N, FIRSTCALL_TIMEOUT_S = 5, 1 << 16, 120        # the first 5 ops of the spec or --ops
SCRIPT = r"""
import json, os, sys, time
t = [time.perf_counter()]
def lap():
    t.append(time.perf_counter())
    return (t[-1] - t[-2]) * 1e3
import numpy as np, pyew
out = {"import_ms": lap(), "module_loading": os.environ.get("CUDA_MODULE_LOADING")}
name, dtype, arity, params, n, primer = json.loads(sys.argv[1])
x, p = pyew.asarray(np.linspace(-3, 3, n).astype(dtype)), pyew.asarray(np.ones(256, primer[1]))
pyew.synchronize()
out["setup_ms"] = lap()
getattr(pyew, primer[0])(*[p] * primer[2]), pyew.synchronize()
out["primer_first_us"] = lap() * 1e3
for key in ("first_us", "second_us", "third_us"):
    getattr(pyew, name)(*[x] * arity, **params), pyew.synchronize()
    out[key] = lap() * 1e3
print("FIRSTCALL " + json.dumps(out))
"""


def functions(run, suite: str, *names) -> dict | None:
    """pyew's functions, or None with a note when one of `names` is missing."""
    table = kinds.table()
    if missing := [n for n in names if n not in table]:
        run.note(f"{suite}: skipped, the loaded library has no pyew.{', pyew.'.join(missing)}")
    return None if missing else table


def _sets(run, dtype, shapes):
    k = rotation_slots(sum(int(np.prod(s)) for s in shapes) * dt.BY_NAME[dtype].itemsize, run.l2_bytes, capacity=8)
    return [tuple(random_device(run.rng, dtype, s) for s in shapes) for _ in range(k)]


def _shapes(run, name, shape):
    have = {k.dtype.name for k in run.lib.manifest.op(name).kernels}
    return [(d, s) for d in run.args.dtypes or API_DTYPES if d in have
            for s in (shape, (shape[0] * BATCH_SCALE, *shape[1:]))]


def _time(run, suite, dtype, shape, rows: dict) -> None:
    """{row name: {impl: a call per buffer set}}; bytes from the first call's arguments and result."""
    for name, calls in rows.items():
        for impl, c in calls.items():
            run.measure(suite, name, dtype, int(np.prod(shape)), impl, functools.partial(gpu, run, c, 1, count=True),
                        shape=list(shape))


def run_upsample(run) -> None:
    fns, torch = functions(run, "upsample", "upsample_nearest2d", "upsample_nearest2d_backward"), run.peers.get("torch")
    for dtype, (N, C, H, W) in _shapes(run, "upsample_nearest2d", UPSAMPLE_SHAPE) if fns else ():
        sets = _sets(run, dtype, ((N, C, H, W), (N, C, 2 * H, 2 * W)))
        fwd = {"pyew": [functools.partial(fns["upsample_nearest2d"], x, scale=2) for x, _ in sets]}
        bwd = {"pyew": [functools.partial(fns["upsample_nearest2d_backward"], dy, scale=2) for _, dy in sets]}
        if torch is not None:
            t, aten = torch.mod, torch.mod.ops.aten
            fwd["torch"] = [functools.partial(t.nn.functional.interpolate, torch.wrap(x), scale_factor=2,
                                              mode="nearest") for x, _ in sets]
            bwd["torch"] = [functools.partial(aten.upsample_nearest2d_backward, torch.wrap(dy), [2 * H, 2 * W],
                                              [N, C, H, W]) for _, dy in sets]
        _time(run, "upsample", dtype, (N, C, H, W), {"forward": fwd, "backward": bwd})
        del sets, fwd, bwd
        rt.synchronize()


def run_relu_mask(run) -> None:
    fns, torch = functions(run, "relu_mask", "relu_mask", "relu_mask_backward"), run.peers.get("torch")
    for dtype, shape in _shapes(run, "relu_mask_backward", RELU_MASK_SHAPE) if fns else ():
        sets = _sets(run, dtype, (shape, shape))
        calls = {"pyew": [functools.partial(fns["relu_mask_backward"], dy, fns["relu_mask"](x)[1]) for x, dy in sets]}
        if torch is not None:                 # torch saves y = relu(x) for its backward
            calls["torch"] = [functools.partial(torch.mod.ops.aten.threshold_backward, torch.wrap(dy),
                                                torch.mod.relu(torch.wrap(x)), 0) for x, dy in sets]
        _time(run, "relu_mask", dtype, shape, {"backward": calls})
        del sets, calls
        rt.synchronize()


def run_dot(run) -> None:
    """pyew.dot ("fast") against the benchmark library's per-thread atomics and torch.dot, float16."""
    fns = functions(run, "dot", "dot")
    if fns is None or not any(k.dtype.name == "float16" for k in run.lib.manifest.op("dot").kernels):
        return run.note("dot: the library has no float16 dot; skipped") if fns else None
    n = min(DOT_N, max(run.args.sizes))
    sets, res, work = _sets(run, "float16", ((n,), (n,))), empty((), "float16"), empty(4, "float16")
    calls = {"fast": [functools.partial(fns["dot"], a, b) for a, b in sets]}
    tail, lib = (n, rt.DEFAULT_STREAM.handle, *run.dev.dims), benchlib.get(run)
    calls |= {m: [functools.partial(lib[key][1], res.ptr, work.ptr, a.ptr, b.ptr, *tail) for a, b in sets]
              for m in ("half_atomic", "half2_pack") if (key := ("dot", "float16", m)) in lib}
    if "torch" in run.peers:
        calls["torch"] = [functools.partial(run.peers["torch"].mod.dot, *map(run.peers["torch"].wrap, s)) for s in sets]
    for impl, c in calls.items():
        run.measure("dot", "dot", "float16", n, impl, functools.partial(gpu, run, c, 1), bytes=4 * n)
    del sets
    rt.synchronize()


def run_overhead(run) -> None:
    """Host time per call on 1-element arrays (the GPU work negligible), pyew against its peers on the same
    calls: two arrays, an array and a Python number, a row-bias broadcast, torch tensors; the raw entry is the floor,
    and each pyew call is also timed replayed by Python rather than C."""
    fns = functions(run, "overhead", "add", "mul")
    if fns is None:
        return
    x, y, z = asarray(np.array([1.25], np.float32)), asarray(np.array([-0.5], np.float32)), empty(1, "float32")
    m = asarray(np.array([[1.25]], np.float32))
    # partials, not lambdas: every library's call is timed with the same one frame around it
    add = functools.partial(fns["add"], x, y)
    rows = {"add": {"pyew": add, "pyew out=": functools.partial(add, out=z)},
            "mul by 0.5": {"pyew": functools.partial(fns["mul"], x, 0.5)},
            "add (1,1)+(1,)": {"pyew": functools.partial(fns["add"], m, y)}}
    for case in map_cases(run.lib.manifest, ops=["add"], dtypes=["float32"]):
        rows["add"][f"{case.entry.symbol} ({'C extension' if run.lib.ext is not None else 'ctypes'})"] = \
            functools.partial(case.entry.fn, z.ptr, x.ptr, y.ptr, 1, rt.DEFAULT_STREAM.handle, *run.dev.dims)
    for name, p in ((n, p) for n, p in run.peers.items() if p.gpu):
        mul = p.mod.mul if name == "torch" else p.mod.multiply
        rows["add"][name] = functools.partial(p.mod.add, p.wrap(x), p.wrap(y))
        rows["mul by 0.5"][name] = functools.partial(mul, p.wrap(x), 0.5)
        rows["add (1,1)+(1,)"][name] = functools.partial(p.mod.add, p.wrap(m), p.wrap(y))
        rows[f"add, {name} operands"] = {"pyew": functools.partial(fns["add"], p.wrap(x), p.wrap(y)),
                                         name: rows["add"][name]}
    for calls in rows.values():      # what the C replay saves: the same call replayed by Python
        calls["pyew, Python replay"] = (calls["pyew"], python_replay)
    for label, calls in rows.items():
        figures = host_rounds(run, f"overhead {label}", calls, rt.synchronize)
        for impl in calls:
            run.measure("overhead", label, "float32", 1, impl, functools.partial(figures.get, impl))


def run_interop(run) -> None:
    fns = functions(run, "interop", "add")
    x, y = asarray(np.array([1.25], np.float32)), asarray(np.array([-0.5], np.float32))
    cases = {"DeviceArray": (0, (x, y))}
    for name, mod in [(p, run.peers[p].mod) for p in ("torch", "cupy") if p in run.peers]:
        fx, fy = (mod.asarray(np.array([v], np.float32)) if name == "cupy" else
                  mod.full((1,), v, dtype=mod.float32, device="cuda") for v in (1.25, -0.5))
        cases |= {name: (2, (fx, fy)), f"{name} + DeviceArray": (1, (fx, y))}
    figures = host_rounds(run, "interop", {label: functools.partial(fns["add"], *args)
                                           for label, (_, args) in cases.items()}, rt.synchronize) if fns else {}
    for label, (foreign, _) in cases.items() if fns else ():
        row = run.measure("interop", "pyew.add", "float32", 1, label, functools.partial(figures.get, label),
                          foreign=foreign)
        base = run.index.get(("interop", "pyew.add", "float32", 1, "DeviceArray"))
        if row and foreign and base:               # what importing one operand costs
            row["extra_us"] = (row["us_per_call"] - base["us_per_call"]) / foreign


def run_firstcall(run) -> None:
    cases = [c for c in map_cases(run.lib.manifest, run.args.ops, ["float32"]) if c.default or run.args.ops]
    primer = next(iter(map_cases(run.lib.manifest, dtypes=["float64"])), None)
    if primer is None or not cases:
        return run.note("firstcall: the library has no float64 map kernel to call first, or no float32 op to time")
    env = dict(os.environ, PYEW_LIB=str(run.lib.path))
    root = str(Path(__file__).resolve().parents[2])           # the folder that holds the pyew package
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (root, env.get("PYTHONPATH"))))
    for c in cases[:FIRSTCALL_COUNT]:
        payload = [c.name, c.dtype, c.arity, c.params, FIRSTCALL_N, [primer.name, primer.dtype, primer.arity]]
        run.status(f"first call of {c.name} in a fresh process", force=True)
        got = run.measure("firstcall", c.name, c.dtype, FIRSTCALL_N, "pyew", functools.partial(spawn, payload, env),
                          primer=primer.label)
        if got:
            got["lazy_us"] = got["first_us"] - got["second_us"]


def spawn(payload, env) -> dict:
    """SCRIPT in a fresh interpreter: its measurements, or RuntimeError with its last words."""
    r = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(payload)], env=env, capture_output=True, text=True,
                       timeout=FIRSTCALL_TIMEOUT_S)
    for line in reversed(r.stdout.splitlines()):
        if line.startswith("FIRSTCALL "):
            return json.loads(line[len("FIRSTCALL "):])
    raise RuntimeError(f"exit {r.returncode}: {(r.stderr.strip().splitlines() or ['no output'])[-1]}")


def _vs_torch(suite, title):
    return (Table(title, suite, ("ms", "gbps"), ("pyew", "torch"), keys=("name", "dtype", "shape")),)


SUITES = (
    Suite("dot", "pyew.dot (float16) vs the benchmark library's per-thread atomics and torch.dot", run_dot,
          (Table("pyew.dot vs per-thread atomics and torch.dot", "dot", ("ms", "gbps"),
                 ("fast", "half_atomic", "half2_pack", "torch"), base="fast"),)),
    Suite("upsample", "upsample_nearest2d 2x fwd/bwd vs torch, 16x32x80x80 and 8x batch", run_upsample,
          _vs_torch("upsample", "upsample_nearest2d 2x vs PyTorch")),
    Suite("relu_mask", "relu_mask_backward vs torch threshold_backward, 16x32x112x112 and 8x", run_relu_mask,
          _vs_torch("relu_mask", "relu_mask_backward vs PyTorch threshold_backward")),
    Suite("overhead", "host time per call on 1-element arrays, pyew vs torch vs CuPy", run_overhead,
          (Table("Host time per call on 1-element float32 arrays (µs)", "overhead", ("us_per_call",),
                 keys=("name", "dtype"), ratio="us_per_call"),)),
    Suite("interop", "pyew.add on DeviceArray vs torch vs CuPy operands (host µs per call)", run_interop,
          (Table("Interop: GPU arrays of other libraries as operands (µs per call of pyew.add)", "interop",
                 ("us_per_call", "extra_us"), base="DeviceArray", ratio="us_per_call"),)),
    Suite("firstcall", "first vs second call of a few ops in a fresh process (CUDA lazy module loading)",
          run_firstcall, (Table("First call of an op in a fresh process (synchronized)", "firstcall", (),
                                fields=("first_us", "second_us", "third_us", "lazy_us", "import_ms", "setup_ms",
                                        "primer", "primer_first_us", "module_loading")),)),
)
