"""Host-side costs of pyew's API beyond the kernels: other libraries' GPU arrays as operands
(interop), and the first call of an op in a fresh process (firstcall).

interop: pyew.add on 1-element float32 inputs given as DeviceArrays, as PyTorch tensors and as CuPy
arrays (both operands, and one foreign beside a DeviceArray), host wall clock per call; the extra
µs per foreign operand is what importing it (DLPack or the CUDA Array Interface) costs over a
DeviceArray. A bfloat16 round trip torch -> pyew.relu -> torch.from_dlpack checks, untimed, that
the data comes back right.

firstcall: with CUDA's lazy module loading (CUDA_MODULE_LOADING=LAZY, the default since CUDA 12.2;
left as the environment has it), the first launch of a kernel loads its module. Each op gets a
fresh `python -c` that imports pyew, makes a DeviceArray, makes one call of another kernel (so the
library's own CUDA runtime start-up is not counted against the op), then times the op's first,
second and third calls.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from .. import kinds
from .. import runtime as rt
from ..errors import PyewError
from ..interop import asarray
from .map_suites import map_cases
from .timing import wall_per_call_us
from .warm import warm_up

INTEROP_CALLS = (10000, 5)              # calls per repeat, repeats
INTEROP_QUICK = (2000, 3)
SMOKE_N = 4096

FIRSTCALL_OPS = ("relu", "sigmoid", "gelu", "add", "to_float16")
FIRSTCALL_DTYPE = "float32"
FIRSTCALL_N = 1 << 16
PRIMERS = (("add", "float64"), ("relu", "float64"), ("add", "float16"))
FIRSTCALL_TIMEOUT_S = 120

SCRIPT = r"""
import json, os, sys, time
t0 = time.perf_counter()
import numpy as np
import pyew
t1 = time.perf_counter()
name, dtype, arity, params, n, primer = json.loads(sys.argv[1])
fn = getattr(pyew, name)
x = pyew.asarray(np.linspace(-3, 3, n).astype(dtype))
pyew.synchronize()
t2 = time.perf_counter()
out = {"import_ms": (t1 - t0) * 1e3, "setup_ms": (t2 - t1) * 1e3,
       "module_loading": os.environ.get("CUDA_MODULE_LOADING")}
if primer:
    p = pyew.asarray(np.ones(256, primer[1]))
    pf = getattr(pyew, primer[0])
    pyew.synchronize()
    t = time.perf_counter()
    pf(*[p] * primer[2])
    pyew.synchronize()
    out["primer_first_us"] = (time.perf_counter() - t) * 1e6
args = [x] * arity
for key in ("first_us", "second_us", "third_us"):
    t = time.perf_counter()
    fn(*args, **params)
    pyew.synchronize()
    out[key] = (time.perf_counter() - t) * 1e6
print("FIRSTCALL " + json.dumps(out))
"""


# ---- interop --------------------------------------------------------------------------------------------

def suite_interop(run) -> None:
    try:
        table = kinds.table()
    except PyewError as e:
        run.note(f"interop: skipped, pyew's op table does not load: {e}")
        return
    if "add" not in table:
        run.note("interop: skipped, the loaded library has no pyew.add")
        return
    add = table["add"]
    calls, repeats = INTEROP_QUICK if run.args.quick else INTEROP_CALLS
    x = asarray(np.array([1.25], np.float32))
    y = asarray(np.array([-0.5], np.float32))
    cases = [("DeviceArray", 0, (x, y))]
    torch = run.peers.get("torch")
    if torch is not None:
        t = torch.mod
        tx = t.full((1,), 1.25, dtype=t.float32, device="cuda")
        ty = t.full((1,), -0.5, dtype=t.float32, device="cuda")
        cases += [("torch", 2, (tx, ty)), ("torch + DeviceArray", 1, (tx, y))]
    cupy = run.peers.get("cupy")
    if cupy is not None:
        cp = cupy.mod
        cx = cp.full((1,), 1.25, dtype=cp.float32)
        cy = cp.full((1,), -0.5, dtype=cp.float32)
        cases += [("cupy", 2, (cx, cy)), ("cupy + DeviceArray", 1, (cx, y))]
    if len(cases) == 1:
        run.note("interop: neither PyTorch nor CuPy is loaded: only the DeviceArray row")
    warm_up(run, [lambda a=a: add(*a) for _, _, a in cases], "interop")
    for label, foreign, args in cases:
        if run.has("interop", "pyew.add", "float32", 1, label) or run.out_of_time():
            continue
        run.status(f"pyew.add({label})")
        try:
            med, best = wall_per_call_us(lambda a=args: add(*a), calls, repeats, rt.synchronize)
        except Exception as e:
            run.failed(f"interop: pyew.add({label})", e)
            continue
        run.add(suite="interop", name="pyew.add", dtype="float32", n=1, impl=label, foreign=foreign,
                us_per_call=med, min_us_per_call=best, calls=calls * repeats)
    if torch is not None:
        bfloat16_round_trip(run, torch, table)


def bfloat16_round_trip(run, torch, table) -> None:
    """torch bfloat16 -> pyew.relu -> torch.from_dlpack equals torch.relu (a check, not timed)."""
    if "relu" not in table:
        return
    t = torch.mod
    label = "torch -> pyew.relu -> torch.from_dlpack"
    try:
        src = t.randn(SMOKE_N, dtype=t.bfloat16, device="cuda")
        back = t.from_dlpack(table["relu"](src))
        ok = bool(back.dtype == t.bfloat16 and tuple(back.shape) == (SMOKE_N,) and t.equal(back, t.relu(src)))
    except Exception as e:
        run.failed(f"interop: bfloat16 round trip ({label})", e)
        ok = False
    if not ok:
        run.note(f"interop: the bfloat16 round trip {label} did not give torch.relu's result")
    run.add(suite="interop", name="bfloat16 round trip", dtype="bfloat16", n=SMOKE_N, impl="torch", ok=ok,
            check=label)


# ---- first call -------------------------------------------------------------------------------------------

def _spawn(payload, env: dict, timeout: float) -> dict:
    """Run SCRIPT in a fresh interpreter; its measurements, or RuntimeError with its last words."""
    r = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(payload)], env=env, capture_output=True,
                       text=True, timeout=timeout)
    for line in reversed(r.stdout.splitlines()):
        if line.startswith("FIRSTCALL "):
            return json.loads(line[len("FIRSTCALL "):])
    last = (r.stderr.strip().splitlines() or ["no output"])[-1]
    raise RuntimeError(f"exit {r.returncode}: {last}")


def _child_env(run) -> dict:
    env = dict(os.environ)
    env["PYEW_LIB"] = str(run.lib.path)
    root = str(Path(__file__).resolve().parents[2])          # the folder that holds the pyew package
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def suite_firstcall(run) -> None:
    cases = {(c.op, c.dtype): c for c in map_cases(run.lib.manifest)}
    ops = [op for op in FIRSTCALL_OPS if (op, FIRSTCALL_DTYPE) in cases]
    if run.args.ops:
        ops = [op for op in ops if op in run.args.ops] or ops
    missing = [op for op in FIRSTCALL_OPS if (op, FIRSTCALL_DTYPE) not in cases]
    if missing:
        run.note(f"firstcall: the library has no {FIRSTCALL_DTYPE} kernel of {', '.join(missing)}")
    primer = next(((op, d, len(cases[(op, d)].inputs)) for op, d in PRIMERS if (op, d) in cases), None)
    env = _child_env(run)
    mode = os.environ.get("CUDA_MODULE_LOADING")
    run.meta["cuda_module_loading"] = mode
    for op in ops:
        if run.has("firstcall", op, FIRSTCALL_DTYPE, FIRSTCALL_N, "pyew") or run.out_of_time():
            continue
        c = cases[(op, FIRSTCALL_DTYPE)]
        run.status(f"first call of {op} in a fresh process", force=True)
        payload = [op, FIRSTCALL_DTYPE, len(c.inputs), c.params, FIRSTCALL_N, primer]
        try:
            got = _spawn(payload, env, FIRSTCALL_TIMEOUT_S)
            first, second = float(got["first_us"]), float(got["second_us"])
        except Exception as e:
            run.failed(f"firstcall: {op}", e)
            continue
        run.add(suite="firstcall", name=op, dtype=FIRSTCALL_DTYPE, n=FIRSTCALL_N, impl="pyew",
                first_us=first, second_us=second, third_us=got.get("third_us"), lazy_us=first - second,
                import_ms=got.get("import_ms"), setup_ms=got.get("setup_ms"),
                primer=f"{primer[0]} {primer[1]}" if primer else None, primer_first_us=got.get("primer_first_us"),
                module_loading=got.get("module_loading", mode))
