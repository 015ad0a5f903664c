"""Suites over raw kernels: the copy ceiling, every map op x dtype x size (pyew's entry point, the
naive entry generated beside it, PyTorch, CuPy), OneFlow's comparison (naive vs template, casts vs
PyTorch), and, with --sustained, pyew and PyTorch alternating in long back-to-back runs.

pyew and naive are timed through direct ctypes calls of the entry points with every argument
prepared beforehand (functools.partial), so what is measured is the kernel. PyTorch runs on the same
input and output buffers (peers.TORCH_INTO says why). Each dtype's inputs
live in a few large random pools allocated once; rotated views are cut from them, and the pools
are freed (and the peers' caches emptied) before the next dtype, so the largest sizes fit.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from .. import library
from .. import runtime as rt
from . import timing, traffic
from .data import Pool
from .timing import rotation_slots
from .warm import once, warm_up

IMPLS = ("pyew", "naive", "torch", "cupy")
PARAM_FALLBACK = {"float": 1.5, "int": 3}    # for params without a default (scale's alpha)
WARMUP = 2
COPY_BYTES = 1 << 30
WARM_N = 256                                  # elements of the warm-up calls
SUSTAINED_BATCH_MS = 5.0                      # GPU work per batch of a sustained run
SUSTAINED_ROUNDS = 2                          # A B A B


@dataclass(frozen=True)
class MapCase:
    op: str
    dtype: str
    out_dtype: str
    inputs: tuple
    params: dict
    forward: object                # library.Entry (role "forward")
    naive: object | None           # library.Entry (role "naive"), if the library has it
    tuning: str | None = None      # the launch shape the generator picked ("memory" / "compute")
    source: str = ""               # the spec file the op comes from

    @property
    def label(self) -> str:
        return f"{self.op} {self.dtype}"

    @property
    def symbol(self) -> str:
        return self.forward.symbol

    def entry(self, impl: str):
        return self.forward if impl == "pyew" else self.naive

    def bytes(self, n: int) -> int:
        return traffic.map_bytes(n, [self.dtype] * len(self.inputs), self.out_dtype)


def param_values(op) -> dict:
    """The op's params: their defaults, or the bench's value for a param without one."""
    return {p.name: (p.default if p.default is not None else PARAM_FALLBACK[p.type]) for p in op.params}


def map_cases(manifest, ops=None, dtypes=None) -> list[MapCase]:
    """Every (map op, dtype) of the library's manifest, in its order, filtered by name and input dtype."""
    cases = []
    for op in manifest.ops:
        if op.kind != "map" or (ops and op.name not in ops):
            continue
        for k in op.kernels:
            if dtypes and k.dtype.name not in dtypes:
                continue
            fwd = k.entry("forward") or k.entries[0]
            cases.append(MapCase(op.name, k.dtype.name, k.out_dtype.name, tuple(op.inputs), param_values(op),
                                 fwd, k.entry("naive"), op.tuning, op.source or ""))
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
        rt.memset(src, 0x3C, nbytes, s.cu)
        run.status(f"device-to-device copy of {nbytes >> 20} MiB", force=True)
        t = run.timer.measure([functools.partial(rt.copy_dtod, dst, src, nbytes, s.cu)], max(run.args.repeat, 10))
        row = run.add(suite="copy", name="memcpy D2D", n=nbytes, impl="cudaMemcpyAsync", ms=t.median_ms,
                      min_ms=t.min_ms, reps=t.reps, bytes=traffic.copy_bytes(nbytes))
        run.copy_gbps = row["gbps"]
    finally:
        rt.free(src, s)
        rt.free(dst, s)
        rt.synchronize()


# ---- the map sweep ---------------------------------------------------------------------------------

def release(run) -> None:
    """Between dtypes: give the freed pools and the peers' caches back to the device. Errors are
    ignored here (a measurement's own error has already been reported, and must not be replaced)."""
    try:
        rt.synchronize()
        for p in run.peers.values():
            p.release()
        rt.trim_pool(0)
    except Exception:
        pass


def _calls(run, case, impl, n, ins, out, slots):
    """The zero-argument calls for one measurement (one per rotated buffer set), or None with a
    note when impl cannot run this case."""
    if impl in ("pyew", "naive"):
        entry = case.entry(impl)
        if entry is None:
            run.note(f"no naive entry in {run.lib.path} (built before the naive kernels?): naive skipped")
            return None
        tail = (n, *case.params.values(), rt.DEFAULT_STREAM.handle, *run.dev.dims)
        return [functools.partial(entry.fn, out.view(s, n).ptr, *[p.view(s, n).ptr for p in ins], *tail)
                for s in range(slots)]
    peer = run.peers.get(impl)
    if peer is None or impl not in ("torch", "cupy"):
        return None
    into = peer.op_into(case.op, case.dtype, case.params)
    if into is not None:                  # on pyew's own buffers: see peers.TORCH_INTO
        return [functools.partial(into, *[peer.wrap(p.view(s, n)) for p in ins], out=peer.wrap(out.view(s, n)))
                for s in range(slots)]
    fn, why = peer.op(case.op, case.dtype, case.params)
    if fn is None:
        run.note(why)
        return None
    return [functools.partial(fn, *[peer.wrap(p.view(s, n)) for p in ins]) for s in range(slots)]


def _rc_check(run, case, impl):
    if impl not in ("pyew", "naive"):
        return None
    return functools.partial(_check_rc, case.entry(impl).symbol)


def _check_rc(sym, rc):
    if rc:
        library.get().check(rc, sym)


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
        t = run.timer.measure(calls, run.args.repeat, WARMUP, check=_rc_check(run, case, impl))
    except Exception as e:            # a peer's error (unsupported dtype, compile failure) or a CUDA error
        run.failed(f"{impl} {case.label} n={n}", e)
        return
    extra = {"tuning": case.tuning} if impl == "pyew" and case.tuning else {}
    run.add(suite="map", name=case.op, dtype=case.dtype, out_dtype=case.out_dtype, arity=len(case.inputs), n=n,
            impl=impl, ms=t.median_ms, min_ms=t.min_ms, reps=t.reps, bytes=nbytes, slots=slots, **extra)


def warm_cases(run, group, impls) -> None:
    """One call of every (case, impl) not warmed yet in this run, on WARM_N elements."""
    todo = [(c, i) for c in group for i in impls if once(run, ("map", c.op, c.dtype, i))]
    if not todo:
        return
    dtype = group[0].dtype
    arity = max(len(c.inputs) for c, _ in todo)
    ins = [Pool(dtype, WARM_N, 0, run.rng) for _ in range(arity)]
    outs = {d: Pool(d, WARM_N, 0) for d in {c.out_dtype for c, _ in todo}}
    calls = []
    for c, impl in todo:
        got = _calls(run, c, impl, WARM_N, ins[:len(c.inputs)], outs[c.out_dtype], 1)
        if got:
            check = _rc_check(run, c, impl)
            calls.append(got[0] if check is None else (lambda f=got[0], ck=check: ck(f())))
    warm_up(run, calls, f"{len(calls)} {dtype} kernels")


def run_cases(run, cases, sizes, impls=IMPLS, sustained_n=None) -> None:
    """Measure cases x sizes x impls, one dtype's pools at a time (and, at sustained_n, the
    sustained runs while the pools are there)."""
    by_dtype: dict[str, list[MapCase]] = {}
    for c in cases:
        by_dtype.setdefault(c.dtype, []).append(c)
    span = 4 * run.l2_bytes
    for group in by_dtype.values():          # every kernel loaded before the first is timed
        warm_cases(run, group, impls)
    for dtype, group in by_dtype.items():
        todo = [(c, n, i) for c in group for n in sizes for i in impls
                if not run.has("map", c.op, c.dtype, n, i)]
        sus = [c for c in group
               if sustained_n in sizes and not run.has("sustained", c.op, c.dtype, sustained_n, "pyew")]
        if (not todo and not sus) or run.out_of_time():
            continue
        max_n = max(sizes)
        arity = max(len(c.inputs) for c in group)
        ins = outs = None
        try:
            ins = [Pool(dtype, max_n, span, run.rng) for _ in range(arity)]
            outs = {}
            for c, n, impl in todo:
                if c.out_dtype not in outs:
                    outs[c.out_dtype] = Pool(c.out_dtype, max_n, span)
                measure_case(run, c, n, impl, ins[:len(c.inputs)], outs[c.out_dtype])
            for c in sus:
                if c.out_dtype not in outs:
                    outs[c.out_dtype] = Pool(c.out_dtype, max_n, span)
                measure_sustained(run, c, sustained_n, ins[:len(c.inputs)], outs[c.out_dtype])
        finally:
            del ins, outs
            release(run)
        run.checkpoint()


def suite_map(run) -> None:
    """Every map op x dtype x size. The largest size goes first for every case, so if the run hits
    --max-time the headline table is complete and only parts of the size sweep are missing. With
    --sustained, the largest size also gets the sustained pyew/PyTorch runs."""
    cases = map_cases(run.lib.manifest, run.args.ops, run.args.dtypes)
    if not cases:
        run.note("map: no op/dtype matches --ops/--dtypes")
        return
    sizes = sorted(run.args.sizes)
    top = sizes[-1]
    if getattr(run.args, "sustained", False):
        run.note(f"--sustained: at 2^{top.bit_length() - 1} elements pyew and PyTorch alternate (A B A B), "
                 f"{run.args.sustained_seconds:g} s of back-to-back calls per segment")
    run_cases(run, cases, sizes[-1:], sustained_n=top if getattr(run.args, "sustained", False) else None)
    run_cases(run, cases, sizes[:-1])


# ---- sustained runs --------------------------------------------------------------------------------

def measure_sustained(run, case: MapCase, n: int, ins, out) -> None:
    """pyew and PyTorch alternating, A B A B, each segment at least --sustained-seconds of
    back-to-back calls: a GPU that lowers its clocks under a long load (a power cap) does so for
    both, and each side's figure is its total bytes over its total GPU time."""
    if run.out_of_time():
        return
    seconds = float(getattr(run.args, "sustained_seconds", 1.0))
    nbytes = case.bytes(n)
    cap = min(p.capacity(n) for p in (*ins, out))
    slots = min(rotation_slots(nbytes, run.l2_bytes, cap), 8)
    sides = {}
    for impl in ("pyew", "torch"):
        if impl == "torch" and "torch" not in run.peers:
            run.note("--sustained: PyTorch is not loaded, so the sustained rows are pyew's alone")
            continue
        try:
            calls = _calls(run, case, impl, n, ins, out, slots)
        except Exception as e:
            run.failed(f"sustained {impl} {case.label}", e)
            continue
        if calls:
            burst = run.get("map", case.op, case.dtype, n, impl)
            per_ms = burst["ms"] if burst and burst.get("ms") else 0.05
            batch = max(1, min(4096, math.ceil(SUSTAINED_BATCH_MS / max(per_ms, 1e-4))))
            sides[impl] = (calls, batch, _rc_check(run, case, impl), burst)
    segments: dict[str, list] = {impl: [] for impl in sides}
    for r in range(SUSTAINED_ROUNDS):
        for impl, (calls, batch, check, _) in list(sides.items()):
            run.status(f"sustained {case.label} 2^{n.bit_length() - 1} {impl} ({r + 1}/{SUSTAINED_ROUNDS})")
            try:
                segments[impl].append(timing.sustained(calls, seconds, batch, check))
            except Exception as e:
                run.failed(f"sustained {impl} {case.label}", e)
                sides.pop(impl)
                segments.pop(impl)
    for impl, segs in segments.items():
        count = sum(c for c, _ in segs)
        total_ms = sum(ms for _, ms in segs)
        if not count or total_ms <= 0:
            continue
        burst = sides[impl][3]
        run.add(suite="sustained", name=case.op, dtype=case.dtype, out_dtype=case.out_dtype,
                arity=len(case.inputs), n=n, impl=impl, ms=total_ms / count, bytes=nbytes, calls=count,
                seconds=round(total_ms / 1e3, 3),
                segment_gbps=[traffic.gbps(nbytes * c, ms) for c, ms in segs],
                burst_gbps=burst.get("gbps") if burst else None)


# ---- OneFlow's comparison ------------------------------------------------------------------------------

TEMPLATE_CASES = (("mul", "float32"), ("mul", "float16"))          # naive vs template
CAST_CASES = (("to_float16", "float32"), ("to_float32", "float16"))  # vs PyTorch


def suite_template(run) -> None:
    """OneFlow's comparison at the largest size: the naive kernel vs the template for mul f32/f16,
    and the two casts vs PyTorch. Their rows are map rows, so the map sweep reuses them."""
    n = max(run.args.sizes)
    all_cases = {(c.op, c.dtype): c for c in map_cases(run.lib.manifest)}
    for want, impls in ((TEMPLATE_CASES, ("pyew", "naive")), (CAST_CASES, ("pyew", "torch", "cupy"))):
        cases = [all_cases[k] for k in want if k in all_cases]
        for k in want:
            if k not in all_cases:
                run.note(f"template: the library has no {k[0]} {k[1]} kernel; its row is skipped")
        run_cases(run, cases, [n], impls)
