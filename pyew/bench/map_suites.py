"""Suites over raw kernels: the copy ceiling, every map op x dtype x size (pyew's entry point, the
naive entry generated beside it, PyTorch, CuPy), and the seeds' naive-vs-template and cast rows.

pyew and naive are timed through direct ctypes calls of the entry points with every argument
prepared beforehand (functools.partial), so what is measured is the kernel. Each dtype's inputs
live in a few large random pools allocated once; rotated views are cut from them, and the pools
are freed (and the peers' caches emptied) before the next dtype, so the largest sizes fit.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from .. import runtime as rt
from . import traffic
from .data import Pool
from .timing import rotation_slots

IMPLS = ("pyew", "naive", "torch", "cupy")
PARAM_FALLBACK = {"float": 1.5, "int": 3}    # for params without a default (scale's alpha)
WARMUP = 2
COPY_BYTES = 1 << 30


@dataclass(frozen=True)
class MapCase:
    op: str
    dtype: str
    out_dtype: str
    inputs: tuple
    params: dict
    symbol: str
    naive: str | None
    tuning: str | None = None     # the launch shape the generator picked ("memory" / "compute")

    @property
    def label(self) -> str:
        return f"{self.op} {self.dtype}"

    def bytes(self, n: int) -> int:
        return traffic.map_bytes(n, [self.dtype] * len(self.inputs), self.out_dtype)


def param_values(info: dict) -> dict:
    return {p["name"]: (p["default"] if p["default"] is not None else PARAM_FALLBACK[p["type"]])
            for p in info["params"]}


def map_cases(manifest: dict, ops=None, dtypes=None) -> list[MapCase]:
    """Every (map op, dtype) of the library, in manifest order, filtered by name and input dtype."""
    cases = []
    for info in manifest["ops"]:
        if info["kind"] != "map" or (ops and info["name"] not in ops):
            continue
        for k in info["kernels"]:
            if dtypes and k["dtype"] not in dtypes:
                continue
            roles = {e["role"]: e["symbol"] for e in k["entries"]}
            cases.append(MapCase(info["name"], k["dtype"], k["out_dtype"], tuple(info["inputs"]),
                                 param_values(info), roles.get("forward", k["entries"][0]["symbol"]),
                                 roles.get("naive"), info.get("tuning")))
    return cases


# ---- copy ceiling --------------------------------------------------------------------------------

def suite_copy(run) -> None:
    """A large device-to-device cudaMemcpyAsync: bytes read + written over time is the ceiling
    every other GB/s figure is compared with."""
    free = rt.device_info()["free_memory"]
    nbytes = min(COPY_BYTES, max(64 << 20, free // 8))
    s = rt.DEFAULT_STREAM
    src, dst = rt.malloc(nbytes, s), rt.malloc(nbytes, s)
    try:
        rt.check(rt._rt.cudaMemsetAsync(src, 0x3C, nbytes, s._handle), "cudaMemsetAsync")
        run.status(f"device-to-device copy of {nbytes >> 20} MiB", force=True)
        t = run.timer.measure([functools.partial(rt.copy_dtod, dst, src, nbytes, s)], max(run.args.repeat, 10))
        row = run.add(suite="copy", name="memcpy D2D", n=nbytes, impl="cudaMemcpyAsync", ms=t.median_ms,
                      min_ms=t.min_ms, reps=t.reps, bytes=traffic.copy_bytes(nbytes))
        run.copy_gbps = row["gbps"]
    finally:
        rt.free(src, s)
        rt.free(dst, s)
        rt.synchronize()


# ---- the map sweep ---------------------------------------------------------------------------------

def _release(run) -> None:
    """Between dtypes: give the freed pools and the peers' caches back to the device. Errors are
    ignored here (a measurement's own error has already been reported, and must not be replaced)."""
    try:
        rt.synchronize()
        for p in run.peers.values():
            p.release()
        rt.check(rt._rt.cudaMemPoolTrimTo(run.dev.pool, 0), "cudaMemPoolTrimTo")
    except Exception:
        pass


def _calls(run, case, impl, n, ins, out, slots):
    """The zero-argument calls for one measurement (one per rotated buffer set), or None with a
    note when impl cannot run this case."""
    if impl in ("pyew", "naive"):
        sym = case.symbol if impl == "pyew" else case.naive
        if sym is None:
            run.note(f"no naive entry in {run.lib.path} (built before the naive kernels?): naive skipped")
            return None
        fn = run.lib.symbols[sym]
        tail = (n, *case.params.values(), 0, run.dev.sms, run.dev.threads_per_sm)
        return [functools.partial(fn, out.view(s, n).ptr, *[p.view(s, n).ptr for p in ins], *tail)
                for s in range(slots)]
    peer = run.peers.get(impl)
    if peer is None:
        return None
    fn, why = peer.op(case.op, case.dtype, case.params)
    if fn is None:
        run.note(why)
        return None
    return [functools.partial(fn, *[peer.wrap(p.view(s, n)) for p in ins]) for s in range(slots)]


def measure_case(run, case: MapCase, n: int, impl: str, ins, out) -> None:
    if run.has("map", case.op, case.dtype, n, impl) or run.out_of_time():
        return
    nbytes = case.bytes(n)
    cap = min(p.capacity(n) for p in (*ins, out))
    slots = min(rotation_slots(nbytes, run.l2_bytes, cap), run.args.repeat + WARMUP + 1)
    run.status(f"{case.label} 2^{n.bit_length() - 1} {impl}")
    try:
        calls = _calls(run, case, impl, n, ins, out, slots)
        if calls is None:
            return
        check = None
        if impl in ("pyew", "naive"):
            sym = case.symbol if impl == "pyew" else case.naive
            check = functools.partial(_check_rc, run.lib, sym)
        t = run.timer.measure(calls, run.args.repeat, WARMUP, check=check)
    except Exception as e:            # a peer's error (unsupported dtype, compile failure) or a CUDA error
        run.failed(f"{impl} {case.label} n={n}", e)
        return
    extra = {"tuning": case.tuning} if impl == "pyew" and case.tuning else {}
    run.add(suite="map", name=case.op, dtype=case.dtype, out_dtype=case.out_dtype, arity=len(case.inputs), n=n, impl=impl,
            ms=t.median_ms, min_ms=t.min_ms, reps=t.reps, bytes=nbytes, slots=slots, **extra)


def _check_rc(lib, sym, rc):
    lib.check(rc, sym)


def run_cases(run, cases, sizes, impls=IMPLS) -> None:
    """Measure cases x sizes x impls, one dtype's pools at a time."""
    by_dtype: dict[str, list[MapCase]] = {}
    for c in cases:
        by_dtype.setdefault(c.dtype, []).append(c)
    span = 4 * run.l2_bytes
    for dtype, group in by_dtype.items():
        todo = [(c, n, i) for c in group for n in sizes for i in impls
                if not run.has("map", c.op, c.dtype, n, i)]
        if not todo or run.out_of_time():
            continue
        max_n = max(sizes)
        arity = max(len(c.inputs) for c in group)
        ins = [Pool(dtype, max_n, span, run.rng) for _ in range(arity)]
        outs: dict[str, Pool] = {}
        try:
            for c, n, impl in todo:
                if c.out_dtype not in outs:
                    outs[c.out_dtype] = Pool(c.out_dtype, max_n, span)
                measure_case(run, c, n, impl, ins[:len(c.inputs)], outs[c.out_dtype])
        finally:
            del ins, outs
            _release(run)
        run.checkpoint()


def suite_map(run) -> None:
    """Every map op x dtype x size. The largest size goes first for every case, so if the run hits
    --max-time the headline table is complete and only parts of the size sweep are missing."""
    cases = map_cases(run.lib.manifest, run.args.ops, run.args.dtypes)
    if not cases:
        run.note("map: no op/dtype matches --ops/--dtypes")
        return
    sizes = sorted(run.args.sizes)
    run_cases(run, cases, sizes[-1:])
    run_cases(run, cases, sizes[:-1])


# ---- the seeds' tables -------------------------------------------------------------------------------

SEED_TEMPLATE = (("mul", "float32"), ("mul", "float16"))          # naive vs template
SEED_CASTS = (("to_float16", "float32"), ("to_float32", "float16"))  # vs torch


def suite_seeds(run) -> None:
    """The seeds' rows at the largest size: naive vs template for mul f32/f16, and the two casts
    vs PyTorch. Their rows are map rows, so the map sweep reuses them."""
    n = max(run.args.sizes)
    all_cases = {(c.op, c.dtype): c for c in map_cases(run.lib.manifest)}
    for want, impls in ((SEED_TEMPLATE, ("pyew", "naive")), (SEED_CASTS, ("pyew", "torch", "cupy"))):
        cases = [all_cases[k] for k in want if k in all_cases]
        for k in want:
            if k not in all_cases:
                run.note(f"seeds: the library has no {k[0]} {k[1]} kernel; its row is skipped")
        run_cases(run, cases, [n], impls)

