"""Timing: CUDA events around each call (GPU time, not Python time), and wall clocks for host costs.

How one measurement goes (GpuTimer.measure):
  1. warm-up calls (module load, CuPy's run-time compile, allocator growth stay out of the numbers);
  2. one probe call, to learn the host cost per call and to shorten the run of very slow calls;
  3. a few large memsets queued first keep the GPU busy while Python queues every timed call, so the
     GPU runs the timed calls back to back and an event pair brackets the kernel, not the launch
     gap (small kernels finish faster than Python can launch them);
  4. reps x (event, call, event); the median of the per-call times is the result.
Callers hand in several equivalent calls (one per rotated buffer set) and the timer cycles through
them, so data smaller than the L2 cache is not re-read from it (see rotation_slots).
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass

from .. import runtime as rt

BUSY_BYTES = 256 << 20     # one prefill memset: ~0.1 ms on an H100, well past the L2 cache
EVENT_HOST_MS = 0.004      # host cost of two cudaEventRecord calls through cuda-python, roughly


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
        self._rt = rt._rt
        self.stream = rt.DEFAULT_STREAM
        self._h = self.stream._handle
        self.max_reps = max_reps
        self._start = [self._event() for _ in range(max_reps)]
        self._end = [self._event() for _ in range(max_reps)]
        self._busy = rt.malloc(BUSY_BYTES, self.stream)
        self.busy_ms = self._calibrate()

    def _event(self):
        return rt.check(self._rt.cudaEventCreate(), "cudaEventCreate")

    def _memset(self, value: int = 0x5A) -> None:
        rt.check(self._rt.cudaMemsetAsync(self._busy, value, BUSY_BYTES, self._h), "cudaMemsetAsync")

    def _calibrate(self) -> float:
        times = []
        for i in range(4):
            self._record(self._start[0])
            self._memset(i)
            self._record(self._end[0])
            times.append(self._elapsed(0))
        return max(statistics.median(times[1:]), 0.005)

    def _record(self, ev) -> None:
        rt.check(self._rt.cudaEventRecord(ev, self._h), "cudaEventRecord")

    def _elapsed(self, i: int) -> float:
        rt.check(self._rt.cudaEventSynchronize(self._end[i]), "cudaEventSynchronize (after the timed calls)")
        return float(rt.check(self._rt.cudaEventElapsedTime(self._start[i], self._end[i]), "cudaEventElapsedTime"))

    def close(self) -> None:
        rt.synchronize()
        for ev in self._start + self._end:
            self._rt.cudaEventDestroy(ev)
        rt.free(self._busy, self.stream)
        self._start = self._end = []

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
        self._record(self._start[0])
        t0 = time.perf_counter()
        r = calls[warmup % k]()
        host_ms = (time.perf_counter() - t0) * 1e3
        self._record(self._end[0])
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
        rec, h, S, E = self._rt.cudaEventRecord, self._h, self._start, self._end
        first = warmup + 1
        for i in range(reps):
            rec(S[i], h)
            calls[(first + i) % k]()
            rec(E[i], h)
        rt.check(self._rt.cudaEventSynchronize(E[reps - 1]), "cudaEventSynchronize (after the timed calls)")
        times = [float(rt.check(self._rt.cudaEventElapsedTime(S[i], E[i]), "cudaEventElapsedTime"))
                 for i in range(reps)]
        return Timing(statistics.median(times), min(times), max(times), reps)


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


def wall_ms(fn, reps: int, warmup: int = 1) -> tuple[float, float, object]:
    """Wall-clock ms of fn() (which must return only when its work is done): (median, min, last
    result)."""
    out = None
    for _ in range(warmup):
        out = fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), min(times), out
