"""Suites over raw kernels: entry points called with prepared arguments, PyTorch writing into the same
output buffers (peers.py says why), inputs rotated views of random pools freed before the next dtype."""
from __future__ import annotations

import functools
import math

from .. import runtime as rt
from . import benchlib
from .harness import Pool, Suite, Table, alternate, gpu, map_cases, release, rotation_slots, sustained
from .peers import is_cast

WARMUP, COPY_BYTES, TEMPLATE_DTYPES = 2, 1 << 30, ("float32", "float16")
SUSTAINED_BATCH_MS, SUSTAINED_ROUNDS = 5.0, 2          # GPU work per batch of a sustained run; A B A B


def run_copy(run) -> None:
    """Bytes read + written over time by a large device-to-device copy: the ceiling of every GB/s."""
    nbytes, s = min(COPY_BYTES, max(64 << 20, rt.device_info()["free_memory"] // 8)), rt.DEFAULT_STREAM
    src, dst = rt.malloc(nbytes, s), rt.malloc(nbytes, s)
    try:
        rt.memset(src, 0x3C, nbytes, s.cu)
        how = functools.partial(gpu, run, [functools.partial(rt.copy_dtod, dst, src, nbytes, s.cu)])
        run.copy_gbps = (run.measure("copy", "memcpy D2D", None, nbytes, "cudaMemcpyAsync", how, bytes=2 * nbytes)
                         or {}).get("gbps")
    finally:
        for p in (src, dst):
            rt.free(p, s)
        rt.synchronize()


def _calls(run, case, impl, n, ins, out, slots):
    """(calls, result check) of one measurement, a call per rotated buffer set, or None (noted)."""
    views = [([p.view(s, n) for p in ins], out.view(s, n)) for s in range(slots)]
    if impl in ("pyew", "naive"):
        got = ((case.entry.symbol, case.entry.fn) if impl == "pyew"
               else benchlib.get(run).get((case.name, case.dtype, "naive")))
        if not got:
            return None
        tail = (n, *case.params.values(), rt.DEFAULT_STREAM.handle, *run.dev.dims)
        return ([functools.partial(got[1], o.ptr, *[x.ptr for x in xs], *tail) for xs, o in views],
                lambda rc: rc and run.lib.check(rc, got[0]))
    if (peer := run.peers.get(impl)) is None or not peer.gpu:
        return None
    if (into := peer.into(case)) is not None:
        return [functools.partial(into, *map(peer.wrap, xs), out=peer.wrap(o)) for xs, o in views], None
    fn, why = peer.op(case)
    if fn is None:
        return run.note(why)
    return [functools.partial(fn, *map(peer.wrap, xs)) for xs, _ in views], None


def measure_case(run, case, n, impl, ins, out) -> None:
    slots = min(rotation_slots(case.bytes(n), run.l2_bytes, min(p.capacity(n) for p in (*ins, out))),
                run.args.repeat + WARMUP + 1)
    run.measure("map", case.name, case.dtype, n, impl,
                lambda: (got := _calls(run, case, impl, n, ins, out, slots)) and gpu(run, got[0], WARMUP, got[1]),
                out_dtype=case.out_dtype, arity=case.arity, bytes=case.bytes(n), slots=slots,
                **({"tuning": case.op.tuning} if impl == "pyew" else {}))


def measure_sustained(run, case, n, ins, out) -> None:
    """pyew and PyTorch in turn (A B A B), segments of --sustained-seconds: lowered clocks hit both alike."""
    sides, burst = {}, {impl: run.index.get(("map", case.name, case.dtype, n, impl), {}) for impl in ("pyew", "torch")}
    for impl, b in burst.items():             # a batch of calls: about SUSTAINED_BATCH_MS of GPU work
        got = _calls(run, case, impl, n, ins, out, min(8, min(p.capacity(n) for p in (*ins, out))))
        if got:
            sides[impl] = (*got, max(1, min(4096, math.ceil(SUSTAINED_BATCH_MS / (b.get("ms") or 0.05)))))
    segments = alternate(run, f"sustained {case.label}", sides, SUSTAINED_ROUNDS,
                         lambda side: sustained(side[0], run.args.sustained_seconds, side[2], side[1]))
    for impl, segs in segments.items():
        count, total_ms = sum(c for c, _ in segs), sum(ms for _, ms in segs)
        if count and total_ms > 0 and all(ms > 0 for _, ms in segs):
            run.add(suite="sustained", name=case.name, dtype=case.dtype, n=n, impl=impl, ms=total_ms / count,
                    bytes=case.bytes(n), calls=count, seconds=round(total_ms / 1e3, 3),
                    segment_gbps=[case.bytes(n) * c / (ms * 1e6) for c, ms in segs],
                    burst_gbps=burst[impl].get("gbps"))


def run_cases(run, cases, sizes, impls=("pyew", "torch", "cupy"), sustained_n=None) -> None:
    """cases x sizes x impls, one dtype's pools at a time (and at sustained_n the sustained runs)."""
    for dtype in dict.fromkeys(c.dtype for c in cases):
        if run.out_of_time():
            return
        pools = {}                  # (input index or "out", dtype) -> Pool
        try:
            for c in [c for c in cases if c.dtype == dtype]:
                for key in (*enumerate(c.ins), ("out", c.out_dtype)):
                    if key not in pools:
                        pools[key] = Pool(key[1], max(sizes), 4 * run.l2_bytes, run.rng if key[0] != "out" else None)
                ins, out = [pools[key] for key in enumerate(c.ins)], pools[("out", c.out_dtype)]
                for n in sizes:
                    for impl in impls:
                        measure_case(run, c, n, impl, ins, out)
                if sustained_n is not None and not run.out_of_time():
                    measure_sustained(run, c, sustained_n, ins, out)
        finally:
            pools.clear()
            release(run)
        run.checkpoint()


def run_template(run) -> None:
    """OneFlow's comparison at the largest size, in map rows the map sweep reuses."""
    n, bench = max(run.args.sizes), benchlib.get(run)
    cases = map_cases(run.lib.manifest, dtypes=[d for d in run.args.dtypes or TEMPLATE_DTYPES if d in TEMPLATE_DTYPES])
    run_cases(run, [c for c in cases if (c.name, c.dtype, "naive") in bench], [n], ("pyew", "naive"))
    run_cases(run, [c for c in cases if is_cast(c.op) and {c.dtype, c.out_dtype} == {"float32", "float16"}], [n])


def run_map(run) -> None:
    """The largest size first (and --sustained there): a run cut by --max-time still has the headline table."""
    cases, sizes = map_cases(run.lib.manifest, run.args.ops, run.args.dtypes), sorted(run.args.sizes)
    if not cases:
        return run.note("map: no op/dtype matches --ops/--dtypes")
    run_cases(run, cases, sizes[-1:], sustained_n=sizes[-1] if run.args.sustained else None)
    if len(sizes) > 1:
        run_cases(run, cases, sizes[:-1])


SUITES = (
    Suite("copy", "copy ceiling: large device-to-device cudaMemcpyAsync", run_copy),
    Suite("template", "OneFlow's comparison: naive (libew_bench.so) vs template f32/f16, casts f32<->f16 vs torch, "
          "CuPy", run_template, (
              Table("Naive vs template (OneFlow's comparison)", "map", ("gbps", "pct_copy"), ("pyew", "naive"),
                    largest=True, needs="naive"),
              Table("Casts vs PyTorch (OneFlow's comparison)", "map", ("ms", "pct_copy"), ("pyew", "torch", "cupy"),
                    largest=True, where=lambda r: {r["dtype"], r.get("out_dtype")} == {"float32", "float16"}))),
    Suite("map", "every map op x dtype x size: pyew, torch, CuPy (--sustained: ABAB runs)", run_map, (
        Table("Map ops at the largest size", "map", ("gbps", "pct_copy"), ("pyew", "torch", "cupy"),
              fields=("tuning",), largest=True),
        Table("Sustained: pyew and PyTorch alternating (A B A B)", "sustained", ("burst_gbps", "gbps"),
              ("pyew", "torch"), fields=("calls", "seconds"),
              text="burst: the map table's median of short bursts; GB/s: bytes over the GPU time of all segments"),
        Table("pyew by size (% of the copy ceiling)", "map", ("pct_copy",), ("pyew",), keys=("name", "dtype"),
              across="n"))),
)
