"""What the suites run in: the run (Run: rows keyed by KEY, GB/s counting each input read and each
output written once), its clocks (gpu, host), random data, rotated buffers, the map cases, Suite, Table."""
from __future__ import annotations

import contextlib
import math
import statistics
import sys
import time
import types
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .. import dtypes as dt
from .. import library
from .. import runtime as rt
from ..array import DeviceArray, empty

KEY = ("suite", "name", "dtype", "n", "impl")
# CUDA errors that poison the context: every later call would fail too, so the run stops there
STICKY = {"cudaErrorIllegalAddress", "cudaErrorLaunchFailure", "cudaErrorIllegalInstruction",
          "cudaErrorMisalignedAddress", "cudaErrorHardwareStackError", "cudaErrorInvalidAddressSpace",
          "cudaErrorInvalidPc", "cudaErrorAssert", "cudaErrorECCUncorrectable", "cudaErrorLaunchTimeout"}
PARAM_FALLBACK = {"float": 1.5, "int": 3}    # the bench's value of a param without a default (scale's alpha)


@dataclass(frozen=True)
class Suite:
    """`run(run)` measures and records rows; `report`: its Tables."""
    name: str
    doc: str
    run: Callable
    report: tuple = ()


@dataclass(frozen=True)
class Table:
    """A line per distinct `keys` of the rows `where` keeps (of `impls`, in order; `largest`: the largest size;
    `needs`: with this impl's row): `value` per `across`, "vs X" = X's `ratio` / `base`'s, the base's `fields`."""
    title: str
    suite: str
    value: tuple = ("gbps",)
    impls: tuple = ()
    keys: tuple = ("name", "dtype", "n")
    across: str = "impl"
    base: str = "pyew"
    ratio: str = "ms"
    fields: tuple = ()
    largest: bool = False
    needs: str | None = None
    where: Callable | None = None
    text: str = ""


class StopRun(RuntimeError):
    """The GPU context is unusable; the run ends and the report is written."""


def f_size(n) -> str:
    return f"2^{n.bit_length() - 1}" if n and n & (n - 1) == 0 else str(n)


def f_ratio(v) -> str:                 # near 1 to three decimals: kernels at the copy ceiling differ by < 1%
    return f"{v:.3f}x" if 0.9 < v < 1.1 else f"{v:.2f}x"


class Run:
    """One `python -m pyew bench`: its rows and notes, and its progress on `stream` (a status line
    every few seconds at most, so a log's tail keeps the final table). cli.run_bench sets the rest."""

    def __init__(self, args, stream=None, clock=time.monotonic):
        self.args, self.stream, self.clock, self.t0 = args, stream or sys.stderr, clock, clock()
        self.rows, self.notes, self.meta, self.index, self.peers, self.cache = [], [], {}, {}, {}, {}
        self.max_time, self.suite, self.l2_bytes = getattr(args, "max_time", None), "", 50 << 20
        self.stopped: list[str] = []        # suites an error stopped
        self.copy_gbps = self.lib = self.dev = self.timer = self.rng = self.seed = self.on_checkpoint = None
        self.every, self.last = 1.0 if getattr(self.stream, "isatty", lambda: False)() else 10.0, float("-inf")

    def line(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()

    def note(self, msg: str) -> None:
        if msg not in self.notes:
            self.notes.append(msg)
            self.line(f"note: {msg}")

    def failed(self, what: str, exc: BaseException) -> None:
        first = str(exc).splitlines()[0] if str(exc) else ""
        self.note(f"{what} failed: {type(exc).__name__}: {first}")
        if any(code in f"{getattr(exc, 'name', '')} {exc}" for code in STICKY):
            raise StopRun(f"{what}: {first}") from exc

    def status(self, text: str, force: bool = False) -> None:
        if force or self.clock() - self.last >= self.every:
            self.line(f"[{self.elapsed():6.1f}s] {self.suite}: {text} ({len(self.rows)} measured)")
            self.last = self.clock()

    def checkpoint(self) -> None:         # a run killed from outside still leaves its results
        if self.on_checkpoint is not None:
            self.on_checkpoint(self)

    def elapsed(self) -> float:
        return self.clock() - self.t0

    def out_of_time(self, reserve: float = 0.0, why: str = "") -> bool:
        """True once past --max-time less `reserve` seconds kept for `why`; what is left is skipped, with one note."""
        if self.max_time is None or self.elapsed() < self.max_time - reserve:
            return False
        self.note(f"{self.suite}: the remaining measurements were skipped to leave {reserve:.0f} s of --max-time "
                  f"{self.max_time:.0f} s for {why or 'later suites'}" if reserve > 0 and self.elapsed() < self.max_time
                  else f"past --max-time {self.max_time:.0f} s: the remaining measurements were skipped")
        return True

    def add(self, **row) -> dict:
        row = {k: row.get(k) for k in KEY} | row
        if row.get("bytes") and row.get("ms"):
            row["gbps"] = row["bytes"] / (row["ms"] * 1e6)
        self.rows.append(row)
        self.index[tuple(row[k] for k in KEY)] = row
        return row

    def measure(self, suite, name, dtype, n, impl, how: Callable, reserve=(0.0, ""), **extra) -> dict | None:
        """The row of how()'s figures (None: nothing to time) unless measured or out of time; failures are noted."""
        key = (suite, name, dtype, n, impl)
        if key in self.index or self.out_of_time(*reserve):
            return None
        self.status(f"{name} {dtype or ''} {f_size(n)} {impl}")
        try:
            figures = how()
        except Exception as e:            # a peer's error (unsupported dtype, compile failure) or CUDA's
            return self.failed(f"{suite}: {impl} {name} {dtype or ''} n={n}", e)
        return None if figures is None else self.add(**dict(zip(KEY, key)), **(figures | extra))

    def with_pct(self) -> list[dict]:     # the rows with % of this run's copy ceiling
        return [r | {"pct_copy": 100 * r["gbps"] / self.copy_gbps}
                if r.get("gbps") and self.copy_gbps and r["suite"] != "copy" else dict(r) for r in self.rows]


# ---- clocks --------------------------------------------------------------------------------------

BUSY_BYTES, EVENT_HOST_MS = 256 << 20, 0.006    # a prefill memset; 2 Event.record calls


def rotation_slots(bytes_per_call: int, l2_bytes: int, capacity: int, factor: int = 4) -> int:
    """Buffer sets to cycle through, at most `capacity`, spanning `factor` x L2: each call finds its data evicted."""
    return 1 if bytes_per_call <= 0 else max(1, min(math.ceil(factor * l2_bytes / bytes_per_call), capacity))


class GpuTimer:
    """CUDA events around each call on the legacy default stream (pyew's, PyTorch's, CuPy's), memsets queued
    first keeping the GPU busy while Python queues calls: the events bracket the kernel, not the launch gap."""

    def __init__(self, max_reps: int = 256):
        self.cu, self.max_reps = rt.DEFAULT_STREAM.cu, max_reps
        self.start, self.end = ([rt.Event(timing=True) for _ in range(max_reps)] for _ in range(2))
        self.busy = rt.malloc(BUSY_BYTES, rt.DEFAULT_STREAM)
        self.busy_ms = max(statistics.median([self._timed(lambda i=i: rt.memset(self.busy, i, BUSY_BYTES, self.cu))[0]
                                              for i in range(4)][1:]), 0.005)

    def _timed(self, fn):                 # (GPU ms, host ms, result) of one call
        self.start[0].record(self.cu)
        t0 = time.perf_counter()
        r = fn()
        host_ms = (time.perf_counter() - t0) * 1e3
        self.end[0].record(self.cu)
        self.end[0].synchronize()
        return self.end[0].elapsed_ms(self.start[0]), host_ms, r

    def close(self) -> None:
        rt.synchronize()
        self.start = self.end = []            # the events go with their objects
        if self.busy:
            rt.free(self.busy, rt.DEFAULT_STREAM)
            self.busy = 0

    def measure(self, calls, reps: int, warmup: int = 2, budget_ms: float = 2000.0, check=None) -> dict:
        """Median GPU ms of `calls` (one call's work on different buffers); check(r) validates warm-ups' results."""
        k = len(calls)
        for i in range(warmup + 1):               # the last one a probe: host cost, and how slow it is
            probe_ms, host_ms, r = self._timed(calls[i % k]) if i == warmup else (0, 0, calls[i % k]())
            if check is not None:
                check(r)
        reps = max(1, min(reps, self.max_reps, int(budget_ms / max(probe_ms, 1e-6))))
        for i in range(min(64, math.ceil((reps * (host_ms + EVENT_HOST_MS) * 1.25 + 0.05) / self.busy_ms))):
            rt.memset(self.busy, i, BUSY_BYTES, self.cu)
        for i in range(reps):
            self.start[i].record(self.cu)
            calls[(warmup + 1 + i) % k]()
            self.end[i].record(self.cu)
        self.end[reps - 1].synchronize()
        times = [self.end[i].elapsed_ms(self.start[i]) for i in range(reps)]
        return {"ms": statistics.median(times), "min_ms": min(times), "reps": reps}


def gpu(run, calls, warmup: int = 2, check=None, count: bool = False) -> dict:
    """Event-timed figures of `calls`; count: the bytes of the first call's arguments and result."""
    return run.timer.measure(calls, run.args.repeat, warmup, check=check) | (
        {"bytes": nbytes_of(*calls[0].args, calls[0]())} if count else {})


def host(fn, sync=None, budget_s: float = 0.25, repeats: int = 5, clock=time.perf_counter) -> dict:
    """Host time per call (median, min) of `repeats` runs filling budget_s, after one call that
    warms what a first call pays for (a formula's compile, a plan); a slow call: one per run, 3+ runs."""
    sync = sync or (lambda: None)
    fn()
    sync()

    def per_call(k: int) -> float:
        t0 = clock()
        for _ in range(k):
            fn()
        sync()
        return (clock() - t0) / k
    est = max(per_call(1), 1e-7)
    k = max(1, int(budget_s / repeats / est))
    runs = repeats if k > 1 or est * repeats <= budget_s else max(min(3, repeats), int(budget_s / est))
    per = [per_call(k) for _ in range(runs)]
    med = statistics.median(per)
    return {"ms": med * 1e3, "min_ms": min(per) * 1e3, "us_per_call": med * 1e6, "calls": k * runs}


def alternate(run, what: str, sides: dict, rounds: int, clock) -> dict:
    """Each side's clock(side) results over `rounds` turns (a GPU's drift hits all sides); a failed side is dropped."""
    out = {impl: [] for impl in sides} if not run.out_of_time() else {}
    for r in range(rounds):
        for impl in list(out):
            run.status(f"{what} {impl} ({r + 1}/{rounds})")
            try:
                out[impl].append(clock(sides[impl]))
            except Exception as e:
                run.failed(f"{what}: {impl}", e)
                del out[impl]
    return out


HOST_ROUNDS = 9


@contextlib.contextmanager
def python_replay():
    """pyew's calls replayed by Python rather than by the C extension's replayer, which runs only
    while launches go to libew's own `library.launch`: that function swapped for a copy of itself."""
    real = library.launch
    if real is not library.LIBEW_LAUNCH:        # a stand-in (the CPU tests'): no C replay to turn off
        yield
        return
    library.launch = types.FunctionType(real.__code__, real.__globals__, "launch")
    try:
        yield
    finally:
        library.launch = real


def host_rounds(run, what: str, sides: dict, sync=None, rounds: int = HOST_ROUNDS, budget_s: float = 0.25) -> dict:
    """host() of each side, the sides taking turns over `rounds` rounds so the host's drift (its
    clock, its other load) hits all of them alike: per side, the median and the best round. A side
    is a function, or (function, context) to time it inside context() (python_replay)."""
    def clock(side):
        fn, around = side if isinstance(side, tuple) else (side, contextlib.nullcontext)
        with around():
            return host(fn, sync, budget_s / rounds, repeats=1)
    turns = alternate(run, what, sides, rounds, clock)
    return {impl: {"ms": statistics.median(r["ms"] for r in got), "min_ms": min(r["min_ms"] for r in got),
                   "us_per_call": statistics.median(r["us_per_call"] for r in got),
                   "calls": sum(r["calls"] for r in got)} for impl, got in turns.items() if got}


def sustained(calls, seconds: float, batch: int, check=None, clock=time.perf_counter) -> tuple[int, float]:
    """(calls, GPU ms) of back-to-back calls for `seconds`, the host at most two batches (an event each) ahead."""
    start, end, marks = rt.Event(timing=True), rt.Event(timing=True), [rt.Event(), rt.Event()]
    cu, count, i, t0 = rt.DEFAULT_STREAM.cu, 0, 0, clock()
    start.record(cu)
    while not i or clock() - t0 < seconds:
        for _ in range(max(1, batch)):
            r = calls[count % len(calls)]()
            count += 1
        if check is not None:
            check(r)
        marks[i % 2].record(cu)
        marks[(i + 1) % 2].synchronize()      # the batch before this one
        i += 1
    end.record(cu)
    end.synchronize()
    return count, end.elapsed_ms(start)


def nbytes_of(*objs) -> int:
    """Bytes held by arrays (DeviceArray, numpy, torch, CuPy) or tuples/lists of them."""
    return sum(nbytes_of(*o) if isinstance(o, (tuple, list)) else int(o.numel()) * int(o.element_size())
               if hasattr(o, "element_size") else int(getattr(o, "nbytes", 0)) for o in objs)


def release(run) -> None:
    """Give freed buffers and the peers' caches back, so the largest sizes fit (errors are noted already)."""
    with contextlib.suppress(Exception):
        rt.synchronize()
        for p in run.peers.values():
            p.release()
        rt.trim_pool(0)


# ---- data: never zeros, of random sign (branchy ops take both sides): floats +-[0.1, 4), integers
# +-[1, 1000), bools half True. A block of up to 2^22 values is tiled: 2^28 values do not cost seconds.

BLOCK, ALIGN = 1 << 22, 256     # ALIGN: elements between rotated views, so every view allows 16-byte packs


def random_host(rng: np.random.Generator, dtype: str, count: int) -> np.ndarray:
    info = dt.BY_NAME[dtype]
    sign = rng.integers(0, 2, size=count, dtype=np.int8) * 2 - 1
    if info.kind == "bool":
        return sign > 0
    if info.kind == "int":
        v = rng.integers(1, 1000, size=count, dtype=np.int64)
        if info.itemsize < 4:       # the storage dtypes: nonzero, and within their range
            lim = np.iinfo(info.np)
            v = v % int(lim.max) + 1
            if lim.min == 0:
                return v.astype(info.np)
        return (v * sign).astype(info.np)
    work = np.float64 if info.name == "float64" else np.float32
    return ((rng.random(count, dtype=work) * work(3.9) + work(0.1)) * sign).astype(info.np)


def random_host_n(rng, dtype: str, n: int) -> np.ndarray:
    return np.resize(random_host(rng, dtype, min(n, BLOCK)), n)


def random_device(rng, dtype: str, shape) -> DeviceArray:
    a = empty(shape, dtype)
    if a.size:
        block, cu = random_host(rng, dt.lookup(a.dtype).name, min(a.size, BLOCK)), rt.DEFAULT_STREAM.cu
        rt.copy_htod(a.ptr, block.ctypes.data, block.nbytes, cu)    # pageable: read when it returns
        done = block.nbytes
        while done < a.nbytes:                                         # tiled by doubling copies
            rt.copy_dtod(a.ptr + done, a.ptr, min(done, a.nbytes - done), cu)
            done += min(done, a.nbytes - done)
    return a


def stride(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


class Pool:
    """A device buffer of the largest n and at least span_bytes (4x L2), cut into rotated views."""

    def __init__(self, dtype: str, max_n: int, span_bytes: int, rng=None):
        self.elems = max(stride(max_n), stride(-(-span_bytes // dt.BY_NAME[dtype].itemsize)))
        self.array = random_device(rng, dtype, self.elems) if rng is not None else empty(self.elems, dtype)

    def capacity(self, n: int) -> int:
        return max(1, self.elems // stride(n))

    def view(self, slot: int, n: int) -> DeviceArray:
        start = (slot % self.capacity(n)) * stride(n)
        return self.array[start:start + n]


@dataclass(frozen=True)
class MapCase:
    """One (map op, dtype): `entry` its forward entry, `ins` its inputs' dtypes (an op may fix one: where's)."""
    op: object
    dtype: str
    out_dtype: str
    entry: object = field(repr=False)
    ins: tuple = ()

    name = property(lambda self: self.op.name)
    label = property(lambda self: f"{self.op.name} {self.dtype}")
    arity = property(lambda self: len(self.op.inputs))

    @property
    def params(self) -> dict:
        return {p.name: p.default if p.default is not None else PARAM_FALLBACK[p.type] for p in self.op.params}

    @property
    def default(self) -> bool:
        """An op of pyew's default spec (a manifest without sources counts every op)."""
        src = (self.op.source or "").replace("\\", "/")
        return not src or f"/{src}".endswith("/libew/ops.toml")

    def bytes(self, n: int) -> int:
        return n * sum(dt.BY_NAME[d].itemsize for d in (*self.ins, self.out_dtype))


def map_cases(manifest, ops=None, dtypes=None) -> list[MapCase]:
    """Every (map op, dtype) of the manifest in its order, filtered by op name and dtype."""
    return [MapCase(op, k.dtype.name, k.out_dtype.name, k.entry("forward"),
                    tuple(d.name for d in getattr(k, "in_dtypes", ())) or (k.dtype.name,) * len(op.inputs))
            for op in manifest.ops if op.kind == "map" and (not ops or op.name in ops)
            for k in op.kernels if not dtypes or k.dtype.name in dtypes]
