"""Timing: CUDA events around each call (GPU time, not Python time), wall clocks for host costs,
and sustained back-to-back runs.

How one GPU measurement goes (GpuTimer.measure):
  1. warm-up calls (allocator growth, CuPy's run-time compile stay out of the numbers; every suite
     also calls each kernel once on a tiny array before it times anything, so CUDA's lazy module
     loading is paid there);
  2. one probe call, to learn the host cost per call and to shorten the run of very slow calls;
  3. a few large memsets queued first keep the GPU busy while Python queues every timed call, so the
     GPU runs the timed calls back to back and an event pair brackets the kernel, not the launch
     gap (small kernels finish faster than Python can launch them);
  4. reps x (event, call, event); the median of the per-call times is the result.
Callers hand in several equivalent calls (one per rotated buffer set) and the timer cycles through
them, so data smaller than the L2 cache is not re-read from it (see rotation_slots).

Only pyew.runtime's public functions are used (Event, memset, malloc/free, DEFAULT_STREAM).
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass

from .. import runtime as rt

BUSY_BYTES = 256 << 20     # one prefill memset: ~0.1 ms on an H100, well past the L2 cache
EVENT_HOST_MS = 0.006      # host cost of two Event.record calls through cuda-python, roughly


@dataclass(frozen=True)
class Timing:
    median_ms: float
    min_ms: float
    max_ms: float
    reps: int


def rotation_slots(bytes_per_call: int, l2_bytes: int, capacity: int, factor: int = 4) -> int:
    """How many buffer sets to cycle through so that all of them together span `factor` x L2:
    each call then finds its data evicted, as it would be in a real program. 1 when one set alone
    is that large; never more than `capacity` (what the preallocated pools hold)."""
    if bytes_per_call <= 0:
        return 1
    need = math.ceil(factor * l2_bytes / bytes_per_call)
    return max(1, min(need, capacity))


class GpuTimer:
    """Event timing on the legacy default stream, which pyew (stream 0), PyTorch and CuPy all use by
    default, so one event pair brackets any of them."""

    def __init__(self, max_reps: int = 256):
        self.stream = rt.DEFAULT_STREAM
        self.cu = self.stream.cu
        self.max_reps = max_reps
        self._start = [rt.Event(timing=True) for _ in range(max_reps)]
        self._end = [rt.Event(timing=True) for _ in range(max_reps)]
        self._busy = rt.malloc(BUSY_BYTES, self.stream)
        self.busy_ms = self._calibrate()

    def _memset(self, value: int = 0x5A) -> None:
        rt.memset(self._busy, value & 0xFF, BUSY_BYTES, self.cu)

    def _calibrate(self) -> float:
        times = []
        for i in range(4):
            self._start[0].record(self.cu)
            self._memset(i)
            self._end[0].record(self.cu)
            times.append(self._elapsed(0))
        return max(statistics.median(times[1:]), 0.005)

    def _elapsed(self, i: int) -> float:
        self._end[i].synchronize()
        return self._end[i].elapsed_ms(self._start[i])

    def close(self) -> None:
        rt.synchronize()
        self._start = self._end = []          # the events are destroyed with their objects
        if self._busy:
            rt.free(self._busy, self.stream)
            self._busy = 0

    def measure(self, calls, reps: int, warmup: int = 2, budget_ms: float = 2000.0, check=None) -> Timing:
        """Median GPU time of one call. `calls`: zero-argument callables doing the same work on
        different buffers; `check(result)` validates each warm-up call's return value (pyew's
        entry points return a cudaError_t)."""
        k = len(calls)
        for i in range(warmup):
            r = calls[i % k]()
            if check is not None:
                check(r)
        # probe: one call, timed by the host clock and by events
        self._start[0].record(self.cu)
        t0 = time.perf_counter()
        r = calls[warmup % k]()
        host_ms = (time.perf_counter() - t0) * 1e3
        self._end[0].record(self.cu)
        if check is not None:
            check(r)
        probe_ms = self._elapsed(0)
        reps = max(1, min(reps, self.max_reps))
        if probe_ms * reps > budget_ms:           # a slow call: fewer reps, the run stays bounded
            reps = max(1, min(reps, int(budget_ms / max(probe_ms, 1e-6))))
        # prefill: enough GPU work queued ahead to cover the host time of queuing every timed call
        host_total = reps * (host_ms + EVENT_HOST_MS) * 1.25 + 0.05
        for i in range(min(64, math.ceil(host_total / self.busy_ms))):
            self._memset(i)
        S, E, cu = self._start, self._end, self.cu
        first = warmup + 1
        for i in range(reps):
            S[i].record(cu)
            calls[(first + i) % k]()
            E[i].record(cu)
        E[reps - 1].synchronize()
        times = [E[i].elapsed_ms(S[i]) for i in range(reps)]
        return Timing(statistics.median(times), min(times), max(times), reps)


# ---- sustained runs ----------------------------------------------------------------------------

def sustained(calls, seconds: float, batch: int, check=None, clock=time.perf_counter) -> tuple[int, float]:
    """Back-to-back calls for at least `seconds` of wall time: (calls made, GPU ms from the first
    call's start to the last one's end). The host stays at most two batches ahead of the GPU (an
    event per batch), so the GPU never idles and the wall time is the GPU's time, whatever the
    queue depth. `check(result)` validates one result per batch."""
    cu = rt.DEFAULT_STREAM.cu
    start, end = rt.Event(timing=True), rt.Event(timing=True)
    marks = [rt.Event(), rt.Event()]
    k = len(calls)
    batch = max(1, batch)
    count = 0
    start.record(cu)
    t0 = clock()
    i = 0
    while True:
        r = None
        for _ in range(batch):
            r = calls[count % k]()
            count += 1
        if check is not None:
            check(r)
        marks[i % 2].record(cu)
        marks[(i + 1) % 2].synchronize()      # the batch before this one (not recorded yet: returns at once)
        i += 1
        if clock() - t0 >= seconds:
            break
    end.record(cu)
    end.synchronize()
    return count, end.elapsed_ms(start)


# ---- wall clocks -------------------------------------------------------------------------------

@dataclass(frozen=True)
class WallTiming:
    median_ms: float
    min_ms: float
    reps: int
    warmup_ms: float | None


def wall_stats(fn, reps: int, warmup: int = 1, budget_s: float | None = None, min_reps: int = 3,
               clock=time.perf_counter) -> WallTiming:
    """Wall-clock ms of fn() (which must return only when its work is done; its result is dropped
    at once, so large outputs do not pile up): median and min over the timed calls after `warmup`
    calls. With budget_s, a slow call gets fewer timed calls (never fewer than min_reps, never more
    than reps), judged from the warm-up's time."""
    warm_ms = None
    for _ in range(warmup):
        t0 = clock()
        fn()
        warm_ms = (clock() - t0) * 1e3
    if budget_s is not None and warm_ms:
        reps = max(min(min_reps, reps), min(reps, int(budget_s * 1e3 / warm_ms)))
    times = []
    for _ in range(max(1, reps)):
        t0 = clock()
        fn()
        times.append((clock() - t0) * 1e3)
    return WallTiming(statistics.median(times), min(times), len(times), warm_ms)


def wall_per_call_us(fn, calls: int, repeats: int, sync, warmup: int = 200) -> tuple[float, float]:
    """Host wall-clock per call (µs) over `calls` back-to-back calls, synchronizing once at the end
    of each repeat; (median, min) over repeats. What a Python user pays per op on tiny data."""
    for _ in range(min(warmup, calls)):
        fn()
    sync()
    per = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        per.append((time.perf_counter() - t0) * 1e6 / calls)
    return statistics.median(per), min(per)


def per_call_us(fn, sync=None, budget_s: float = 0.25, repeats: int = 5, warmup: int = 3,
                max_calls: int = 100_000, clock=time.perf_counter) -> tuple[float, float, int]:
    """Host wall-clock µs per call when the call count is not known ahead: a few warm-up calls
    estimate the cost, then `repeats` runs of as many calls as fill budget_s together; (median,
    min) over the runs, and the calls timed. For calls from a few µs to tens of ms."""
    sync = sync or (lambda: None)
    t0 = clock()
    for _ in range(max(1, warmup)):
        fn()
    sync()
    est = max((clock() - t0) / max(1, warmup), 1e-7)
    k = max(1, min(max_calls, int(budget_s / repeats / est)))
    per = []
    for _ in range(repeats):
        t0 = clock()
        for _ in range(k):
            fn()
        sync()
        per.append((clock() - t0) * 1e6 / k)
    return statistics.median(per), min(per), k * repeats
