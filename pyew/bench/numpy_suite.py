"""The numpy suite: numpy arrays in, numpy arrays out, wall clock, as a user of numpy data gets it.

Every call makes a fresh output (no out=), and the time is the whole call: host copies, transfers,
the kernel, page faults of the new output. Sub-measurements, in the order they run:

  pcie       pinned host <-> device bandwidth (256 MiB, events): H2D, D2H and both at once; the
             floor of each pyew call is its bytes (inputs + output) over the both-at-once figure
  small      16-element float32 sigmoid and add, µs per call: pyew, PyTorch, CuPy
  crossover  sigmoid float32 from 2^8 to 2^22 elements with the one-shot path forced and with the
             streamed path forced, to choose the transfer engine's small_bytes from
  transfer   pyew's two modes ("stage" through the pinned ring, "register" page-locking the
             caller's arrays) on sigmoid and add, and the raw costs behind them: cudaHostRegister /
             cudaHostUnregister of 256 MiB, multi-threaded np.copyto into and out of pinned memory
  main       every default map op with float32/float16 kernels (casts too) at 2^20, 2^24, 2^26 and
             2^28 elements: pyew, numpy (the op's ref), numexpr, PyTorch and CuPy round trips

Transfer limits changed for a measurement are put back right after it.
"""
from __future__ import annotations

import ctypes
import functools
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from .. import dtypes as dt
from .. import kinds, library, transfer
from .. import runtime as rt
from ..errors import PyewError
from . import report_host
from .cpu_peers import numexpr_fn, numpy_ref, scipy_erf
from .data import random_host_n
from .map_suites import MapCase, map_cases, release
from .timing import per_call_us, wall_stats
from .warm import once, warm_up

NUMPY_SIZES = (1 << 20, 1 << 24, 1 << 26, 1 << 28)
QUICK_NUMPY_SIZES = (1 << 20, 1 << 24)
TARGET_N = 1 << 26                   # measured first: the targets read it
NUMPY_DTYPES = ("float32", "float16")
CPU_PEERS_MAX = 1 << 26              # numpy and numexpr run up to this size unless told otherwise
NUMPY_REPEAT = 5
QUICK_NUMPY_REPEAT = 3
MIN_REPS = 3
POINT_BUDGET_S = 1.0                 # timed wall time per point before the rep count drops to MIN_REPS
WARM_N = 64
IMPLS = ("pyew", "numpy", "numexpr", "torch", "cupy")
CPU_IMPLS = ("numpy", "numexpr")
HOST_RAM_FACTOR = 3                  # a point's inputs + output, x this for the peers' temporaries
MAP_RESERVE_S = 120.0                # left of --max-time (at most 30% of it) for the map sweep after

BW_BYTES = 256 << 20
BW_REPS = 5
RAW_BYTES = 256 << 20
RAW_REPS = 3
COPY_THREADS = (1, 4, 8, 16)
TRANSFER_CASES = (("sigmoid", "float32"), ("add", "float32"))
TRANSFER_SIZES = (1 << 24, 1 << 26)
CROSSOVER_SIZES = tuple(1 << e for e in range(8, 23, 2))
CROSSOVER_BUDGET_S = 0.3
SMALL_N = 16
SMALL_OPS = ("sigmoid", "add")
SMALL_BUDGET_S = 0.5


@dataclass
class NumpyCase:
    case: MapCase
    op: library.Op
    default: bool
    fns: dict = field(default_factory=dict)      # impl -> callable(*numpy inputs) -> numpy result

    @property
    def arity(self) -> int:
        return len(self.case.inputs)

    def out_np(self) -> np.dtype:
        return dt.BY_NAME[self.case.out_dtype].np


def is_default(op) -> bool:
    """An op of pyew's default spec (libew/ops.toml); a manifest without sources counts every op."""
    src = (getattr(op, "source", "") or "").replace("\\", "/")
    return not src or src == "libew/ops.toml" or src.endswith("/libew/ops.toml")


def numpy_sizes(args) -> list[int]:
    """--numpy-sizes, else the defaults (--quick: fewer) within the range of --sizes when given;
    TARGET_N first when it is among them, the rest ascending."""
    if getattr(args, "numpy_sizes", None):
        sizes = list(args.numpy_sizes)
    else:
        sizes = list(QUICK_NUMPY_SIZES if getattr(args, "quick", False) else NUMPY_SIZES)
        if getattr(args, "sizes_given", False) and args.sizes:
            lo, hi = min(args.sizes), max(args.sizes)
            sizes = [n for n in sizes if lo <= n <= hi]
    sizes = sorted(set(sizes))
    return ([TARGET_N] if TARGET_N in sizes else []) + [n for n in sizes if n != TARGET_N]


def host_available() -> int | None:
    """Bytes of host memory available (MemAvailable), or None where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def numpy_cases(run) -> list[NumpyCase]:
    """Default map ops with float32/float16 kernels (and ops named in --ops), by --ops/--dtypes."""
    m = run.lib.manifest
    dtypes = [d for d in NUMPY_DTYPES if not run.args.dtypes or d in run.args.dtypes]
    out = []
    for c in map_cases(m, run.args.ops, dtypes):
        op = m.op(c.op)
        default = is_default(op)
        if default or (run.args.ops and c.op in run.args.ops):
            out.append(NumpyCase(c, op, default))
    return out


def build_fns(run, nc: NumpyCase, erf) -> None:
    """Each implementation of one case as a numpy-in, numpy-out callable (a peer that cannot do it
    leaves a note instead)."""
    c = nc.case
    fn = kinds.table()[c.op]
    params = dict(c.params)
    nc.fns["pyew"] = (lambda *xs, f=fn, p=params: f(*xs, **p)) if params else fn
    if "numpy" in run.peers:
        f, why = numpy_ref(nc.op, params, nc.out_np(), erf)
        if f is None:
            run.note(why)
        else:
            nc.fns["numpy"] = f
    if "numexpr" in run.peers:
        f, why = numexpr_fn(run.peers["numexpr"].mod, nc.op, c.dtype, params)
        if f is None:
            run.note(why)
        else:
            nc.fns["numexpr"] = f
    for name in ("torch", "cupy"):
        peer = run.peers.get(name)
        if peer is None:
            continue
        f, why = peer.op(c.op, c.dtype, params)
        if f is None:
            run.note(why)
        else:
            nc.fns[name] = peer.round_trip(f)


def _reserve(run) -> tuple[float, str]:
    """Seconds of --max-time this suite leaves for the map sweep when the map sweep runs after it."""
    suites = list(getattr(run.args, "suites", ()) or ())
    if "map" in suites and "numpy" in suites and suites.index("map") > suites.index("numpy"):
        limit = getattr(run, "max_time", None)
        return min(MAP_RESERVE_S, 0.3 * limit if limit else MAP_RESERVE_S), "the map sweep"
    return 0.0, ""


def _wall(run, suite, name, dtype, n, impl, fn, nbytes, reps, warmup=1, **extra):
    """One wall-clock point; the row, or None (skipped, already measured, or failed with a note)."""
    if run.has(suite, name, dtype, n, impl):
        return None
    reserve, why = _reserve(run)
    if run.out_of_time(reserve, why):
        return None
    run.status(f"{name} {dtype or ''} {report_host.f_n(n)} {impl}")
    try:
        t = wall_stats(fn, reps, warmup=warmup, budget_s=POINT_BUDGET_S, min_reps=min(MIN_REPS, reps))
    except Exception as e:
        run.failed(f"{suite}: {impl} {name} {dtype or ''} n={n}", e)
        return None
    return run.add(suite=suite, name=name, dtype=dtype, n=n, impl=impl, ms=t.median_ms, min_ms=t.min_ms,
                   reps=t.reps, bytes=nbytes, **extra)


def _repeat(run) -> int:
    r = getattr(run.args, "numpy_repeat", None)
    if r:
        return r
    return QUICK_NUMPY_REPEAT if getattr(run.args, "quick", False) else NUMPY_REPEAT


# ---- the suite ------------------------------------------------------------------------------------------

def suite_numpy(run) -> None:
    try:
        table = kinds.table()
    except PyewError as e:
        run.note(f"numpy: skipped, pyew's op table does not load: {e}")
        return
    if "numexpr" in run.peers:
        run.note(f"numexpr computes with {run.peers['numexpr'].threads} threads "
                 f"(numexpr.set_num_threads(os.cpu_count()), os.cpu_count() = {os.cpu_count()}); numpy with one")
    pcie(run)
    run.checkpoint()
    small_calls(run, table)
    crossover(run, table)
    transfer_modes(run, table)
    raw_costs(run)
    run.checkpoint()
    main(run)


def main(run) -> None:
    cases = numpy_cases(run)
    if not cases:
        run.note("numpy: no default map op with float32/float16 kernels matches --ops/--dtypes")
        return
    sizes = numpy_sizes(run.args)
    if not sizes:
        run.note("numpy: no size of 2^20, 2^24, 2^26, 2^28 lies within --sizes; --numpy-sizes chooses them")
        return
    erf = scipy_erf()
    for nc in cases:
        build_fns(run, nc, erf)
    # every kernel and expression once, on tiny arrays, before anything is timed
    warm = []
    for nc in cases:
        xs = [random_host_n(run.rng, nc.case.dtype, WARM_N) for _ in range(nc.arity)]
        for impl, f in nc.fns.items():
            if once(run, ("numpy", nc.case.op, nc.case.dtype, impl)):
                warm.append(lambda f=f, xs=xs: f(*xs))
    warm_up(run, warm, f"numpy: {len(warm)} calls")
    cpu_max = getattr(run.args, "cpu_peers_max", None) or CPU_PEERS_MAX
    reps = _repeat(run)
    check_n = min(sizes)
    avail = host_available()
    for n in sizes:
        for dtype in dict.fromkeys(nc.case.dtype for nc in cases):
            group = [nc for nc in cases if nc.case.dtype == dtype]
            isz = dt.BY_NAME[dtype].itemsize
            arity = max(nc.arity for nc in group)
            need = n * isz * (arity + 2) * HOST_RAM_FACTOR
            if avail is not None and need > avail:
                run.note(f"numpy: 2^{n.bit_length() - 1} {dtype} skipped: it needs about {need / 2**30:.1f} GiB "
                         f"of host memory, {avail / 2**30:.1f} GiB are available")
                continue
            reserve, why = _reserve(run)
            if run.out_of_time(reserve, why):
                return
            xs = [random_host_n(run.rng, dtype, n) for _ in range(arity)]
            try:
                for nc in group:
                    _measure_case(run, nc, n, xs[:nc.arity], reps, cpu_max, check=n == check_n)
            finally:
                del xs
                release(run)
            run.checkpoint()


def _measure_case(run, nc: NumpyCase, n, ins, reps, cpu_max, check: bool) -> None:
    c = nc.case
    in_bytes = sum(x.nbytes for x in ins)
    out_bytes = n * dt.BY_NAME[c.out_dtype].itemsize
    floor_ms, floor_kind = report_host.transfer_floor(run.rows, in_bytes, out_bytes)
    for impl in IMPLS:
        fn = nc.fns.get(impl)
        if fn is None:
            continue
        if impl in CPU_IMPLS and n > cpu_max:
            run.note(f"numpy: the CPU peers (numpy, numexpr) run up to 2^{cpu_max.bit_length() - 1} elements "
                     "(--cpu-peers-max raises it; their time grows linearly with size)")
            continue
        # A call of 2^26 or more elements is long enough that one warm-up per implementation, size
        # and dtype covers what a warm-up is for (pools grown, pinned ring allocated).
        warmup = 1 if n < (1 << 26) or once(run, ("numpy-warm", impl, n, c.dtype)) else 0
        extra = {"out_dtype": c.out_dtype, "arity": nc.arity, "default": nc.default}
        if impl == "pyew" and floor_ms:
            extra.update(floor_ms=floor_ms, floor_kind=floor_kind)
        row = _wall(run, "numpy", c.op, c.dtype, n, impl, lambda fn=fn, ins=ins: fn(*ins), in_bytes + out_bytes,
                    reps, warmup=warmup, **extra)
        if row is not None and impl == "pyew" and floor_ms:
            row["floor_ratio"] = row["ms"] / floor_ms
    if check:
        _check_against_numpy(run, nc, n, ins)


def _check_against_numpy(run, nc: NumpyCase, n, ins) -> None:
    """Max |pyew - numpy| over the inputs at the check size, on the pyew row: a fast wrong answer shows."""
    row = run.get("numpy", nc.case.op, nc.case.dtype, n, "pyew")
    ref = nc.fns.get("numpy")
    if row is None or ref is None:
        return
    try:
        got = np.asarray(nc.fns["pyew"](*ins))
        want = np.asarray(ref(*ins))
        with np.errstate(all="ignore"):
            d = np.abs(got.astype(np.float64) - want.astype(np.float64))
        row["max_abs_diff_vs_numpy"] = float(np.max(d)) if d.size else 0.0
    except Exception as e:       # a result numpy cannot compare: say so on the row, keep going
        row["max_abs_diff_vs_numpy"] = None
        run.note(f"numpy: {nc.case.label}: pyew vs numpy not compared ({type(e).__name__}: {e})")


# ---- pinned bandwidth ---------------------------------------------------------------------------------

def pcie(run) -> None:
    """Pinned host <-> device copies of BW_BYTES with pyew.runtime, timed with events: H2D, D2H, and
    both at once on two streams (bytes of both directions over the time of both)."""
    if run.has("pcie", "pinned both ways", None, BW_BYTES, "cudaMemcpyAsync") or run.out_of_time():
        return
    nbytes = BW_BYTES
    s = rt.DEFAULT_STREAM
    held = {"host": [], "dev": [], "streams": []}
    try:
        for _ in range(2):
            held["host"].append(rt.host_alloc(nbytes))
            held["dev"].append(rt.malloc(nbytes, s))
        for _ in range(2):
            held["streams"].append(rt.new_stream(s.ordinal))
        h_src, h_dst = held["host"]
        d_a, d_b = held["dev"]
        l0, l1 = held["streams"]
        ctypes.memset(h_src, 0x3C, nbytes)
        rt.memset(d_b, 0x3C, nbytes, s.cu)
        rt.synchronize()

        def h2d(cu):
            rt.copy_htod(d_a, h_src, nbytes, cu)

        def d2h(cu):
            rt.copy_dtoh(h_dst, d_b, nbytes, cu)

        def both(cu, start):
            rt.wait_event(l0, start)
            rt.wait_event(l1, start)
            rt.copy_htod(d_a, h_src, nbytes, l0)
            rt.copy_dtoh(h_dst, d_b, nbytes, l1)
            rt.stream_wait(s, rt.RawStream(l0, s.ordinal))
            rt.stream_wait(s, rt.RawStream(l1, s.ordinal))

        for name, moved, work in (("pinned H2D", nbytes, h2d), ("pinned D2H", nbytes, d2h),
                                  ("pinned both ways", 2 * nbytes, None)):
            run.status(f"{name} {nbytes >> 20} MiB", force=True)
            times = []
            for rep in range(BW_REPS + 1):          # the first is a warm-up
                start, end = rt.Event(timing=True), rt.Event(timing=True)
                start.record(s.cu)
                if work is None:
                    both(s.cu, start)
                else:
                    work(s.cu)
                end.record(s.cu)
                end.synchronize()
                if rep:
                    times.append(end.elapsed_ms(start))
            times.sort()
            run.add(suite="pcie", name=name, n=nbytes, impl="cudaMemcpyAsync", ms=times[len(times) // 2],
                    min_ms=times[0], reps=len(times), bytes=moved)
    except Exception as e:
        run.failed("numpy: pinned bandwidth", e)
    finally:
        try:
            rt.synchronize()
        except Exception:
            pass
        for h in held["host"]:
            rt.host_free(h)
        for d in held["dev"]:
            rt.free(d, s)
        for st in held["streams"]:
            rt.destroy_stream(st)
    both_row = run.get("pcie", "pinned both ways", None, BW_BYTES, "cudaMemcpyAsync")
    if both_row:
        run.progress.line("pinned bandwidth: " + report_host.pcie_text(run.rows))


# ---- small calls -----------------------------------------------------------------------------------------

def small_calls(run, table) -> None:
    """16-element float32 sigmoid and add, numpy in and out: µs per call."""
    x = random_host_n(run.rng, "float32", SMALL_N)
    y = random_host_n(run.rng, "float32", SMALL_N)
    cases = []
    for op in SMALL_OPS:
        if op not in table:
            run.note(f"numpy: the library has no pyew.{op}: no small-call row for it")
            continue
        ins = (x,) if op == "sigmoid" else (x, y)
        cases.append((op, "pyew", lambda f=table[op], ins=ins: f(*ins)))
        for name in ("torch", "cupy"):
            peer = run.peers.get(name)
            if peer is None:
                continue
            f, why = peer.api(op)
            if f is None:
                run.note(why)
                continue
            rt_fn = peer.round_trip(f)
            cases.append((op, name, lambda f=rt_fn, ins=ins: f(*ins)))
    warm_up(run, [f for _, _, f in cases], "small calls")
    for op, impl, fn in cases:
        if run.has("small", op, "float32", SMALL_N, impl) or run.out_of_time():
            continue
        run.status(f"small call {op} {impl}")
        try:
            med, best, calls = per_call_us(fn, budget_s=SMALL_BUDGET_S)
        except Exception as e:
            run.failed(f"numpy: small call {impl} {op}", e)
            continue
        run.add(suite="small", name=op, dtype="float32", n=SMALL_N, impl=impl, us_per_call=med,
                min_us_per_call=best, calls=calls)


# ---- crossover ------------------------------------------------------------------------------------------

def crossover(run, table) -> None:
    """sigmoid float32 round trips from 2^8 to 2^22 elements, one shot forced (small_bytes above
    every call, pinned memory enough for the largest) vs streamed forced (small_bytes = 0)."""
    if "sigmoid" not in table:
        run.note("numpy: the library has no pyew.sigmoid: no crossover table")
        return
    f = table["sigmoid"]
    sizes = list(CROSSOVER_SIZES)
    xs = {n: random_host_n(run.rng, "float32", n) for n in sizes}
    moved_max = 8 * max(sizes)
    base = transfer.transfer_limits()
    pinned = max(base["pinned_bytes"], 4 * (moved_max + (1 << 20)))
    modes = (("one shot", {"small_bytes": 1 << 50, "pinned_bytes": pinned}), ("streamed", {"small_bytes": 0}))
    for label, limits in modes:
        old = transfer.set_transfer_limits(**limits)
        try:
            warm_up(run, [lambda n=n: f(xs[n]) for n in sizes[:1] + sizes[-1:]], f"crossover {label}")
            for n in sizes:
                if run.has("crossover", "sigmoid", "float32", n, label) or run.out_of_time():
                    continue
                run.status(f"crossover sigmoid {report_host.f_n(n)} {label}")
                try:
                    med, best, calls = per_call_us(lambda n=n: f(xs[n]), budget_s=CROSSOVER_BUDGET_S)
                except Exception as e:
                    run.failed(f"numpy: crossover {label} n={n}", e)
                    continue
                run.add(suite="crossover", name="sigmoid", dtype="float32", n=n, impl=label, us_per_call=med,
                        min_us_per_call=best, calls=calls, bytes=8 * n, ms=med / 1e3)
        finally:
            transfer.set_transfer_limits(**old)
    text = report_host.crossover_text(run.rows, base["small_bytes"])
    if text:
        run.progress.line(f"crossover: {text}")


# ---- transfer modes and raw costs ----------------------------------------------------------------------

def transfer_modes(run, table) -> None:
    """pyew with mode="stage" vs mode="register" on TRANSFER_CASES x TRANSFER_SIZES."""
    reps = _repeat(run)
    for op, dtype in TRANSFER_CASES:
        if op not in table:
            run.note(f"numpy: the library has no pyew.{op}: no transfer-mode rows for it")
            continue
        arity = len(run.lib.manifest.op(op).inputs)
        f = table[op]
        for n in TRANSFER_SIZES:
            if run.has("transfer", op, dtype, n, "register") or run.out_of_time():
                continue
            ins = [random_host_n(run.rng, dtype, n) for _ in range(arity)]
            nbytes = (arity + 1) * ins[0].nbytes
            for mode in ("stage", "register"):
                old = transfer.set_transfer_limits(mode=mode)
                try:
                    _wall(run, "transfer", op, dtype, n, mode, lambda f=f, ins=ins: f(*ins), nbytes, reps, warmup=1)
                finally:
                    transfer.set_transfer_limits(**old)


def _pinned_view(ptr: int, nbytes: int) -> np.ndarray:
    return np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(ptr))


def _threaded_copy(pool, dst: np.ndarray, src: np.ndarray, threads: int) -> None:
    n = src.size
    step = max(1 << 16, (-(-n // threads) + 4095) & ~4095)      # page-aligned pieces, one per thread
    futures = [pool.submit(np.copyto, dst[a:a + step], src[a:a + step]) for a in range(0, n, step)]
    for fu in futures:
        fu.result()


def raw_costs(run) -> None:
    """The costs the two modes are made of: page-locking a 256 MiB array in place and unlocking
    it, and np.copyto between pageable and pinned memory with 1..16 threads (into a fresh
    np.empty on the way out, as a result array is)."""
    if run.has("transfer", "np.copyto pinned -> fresh np.empty", None, RAW_BYTES,
               f"{COPY_THREADS[-1]} threads") or run.out_of_time():
        return
    nbytes = RAW_BYTES
    a = np.empty(nbytes, np.uint8)
    a.fill(1)                                  # a user's array: its pages are there
    run.status(f"cudaHostRegister of {nbytes >> 20} MiB", force=True)
    try:
        reg, unreg = [], []
        for rep in range(RAW_REPS + 1):
            t0 = time.perf_counter()
            rt.host_register(a.ctypes.data, nbytes)
            t1 = time.perf_counter()
            rt.host_unregister(a.ctypes.data)
            t2 = time.perf_counter()
            if rep:
                reg.append((t1 - t0) * 1e3)
                unreg.append((t2 - t1) * 1e3)
        for name, times in (("cudaHostRegister", reg), ("cudaHostUnregister", unreg)):
            times.sort()
            run.add(suite="transfer", name=name, n=nbytes, impl="runtime", ms=times[len(times) // 2],
                    min_ms=times[0], reps=len(times), bytes=nbytes)
    except Exception as e:
        run.failed("numpy: cudaHostRegister cost", e)
    pinned = 0
    try:
        pinned = rt.host_alloc(nbytes)
        pv = _pinned_view(pinned, nbytes)
        pv.fill(2)
        for threads in COPY_THREADS:
            if run.out_of_time():
                break
            with ThreadPoolExecutor(threads) as pool:
                to_pinned = functools.partial(_threaded_copy, pool, pv, a, threads)
                to_fresh = lambda pool=pool, k=threads: _threaded_copy(pool, np.empty(nbytes, np.uint8), pv, k)
                for name, fn in (("np.copyto pageable -> pinned", to_pinned),
                                 ("np.copyto pinned -> fresh np.empty", to_fresh)):
                    run.status(f"{name} {threads} threads")
                    try:
                        t = wall_stats(fn, RAW_REPS, warmup=1)
                    except Exception as e:
                        run.failed(f"numpy: {name} {threads} threads", e)
                        continue
                    run.add(suite="transfer", name=name, n=nbytes, impl=f"{threads} threads", threads=threads,
                            ms=t.median_ms, min_ms=t.min_ms, reps=t.reps, bytes=nbytes)
    except Exception as e:
        run.failed("numpy: pinned copies", e)
    finally:
        if pinned:
            rt.host_free(pinned)
