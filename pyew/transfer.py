"""Host <-> device: the only place where numpy memory becomes device memory and back. Large calls
stream through a ring of pinned staging slots, one per worker thread and lane stream; small ones go
in one shot through a small pinned buffer on the caller's stream. Design and limits:
docs/transfer.md; the measurements behind them: docs/tuning.md and benchmarks/RESULTS.md.
"""
from __future__ import annotations

import atexit
import collections
import contextlib
import ctypes
import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

import numpy as np

from . import library, pinned
from . import runtime as rt

_MiB = 1 << 20
_ALIGN = 256                    # chunk offsets and slot regions stay 256-byte aligned


def _usable_cpus() -> int:
    """The CPUs this process may run on (a container or taskset may allow fewer than the host has)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@dataclass(frozen=True)
class Limits:
    # the ring of streamed blocks (15 MiB a slot at 16 threads) and the small buffer (256 MiB)
    pinned_bytes: int = 496 * _MiB
    device_bytes: int = 1024 * _MiB
    threads: int = field(default_factory=lambda: max(1, min(16, _usable_cpus())))
    # Up to this many bytes (all operands of a call together), one shot on the caller's stream,
    # its host copies split over libew's copy workers: below it streaming costs more than it gains
    # (docs/tuning.md).
    small_bytes: int = 384 * _MiB


_limits = Limits()
_MIN_SMALL_PINNED = 64 * 1024
_SMALL_STEP = 16 * _MiB               # the small buffer grows in steps of this, up to its cap
_ONE_WAY_SMALL_BYTES = 64 * _MiB      # one-way copies in one shot up to this (measured: docs/tuning.md)
_STAGED_UPLOAD_BYTES = 16 * _MiB     # a page-locked upload above this goes by DMA (and waits), not staged
_MIN_BLOCK_BYTES = 8 * _MiB          # all operands of one block together, at least (docs/tuning.md)


def small_bytes() -> int:
    """The one-shot threshold: calls moving at most this many bytes are not streamed."""
    return _limits.small_bytes


def transfer_limits() -> dict:
    """The transfer engine's settings: pinned_bytes, device_bytes, threads, small_bytes and
    pinned_pool_bytes (pyew.empty_pinned's pool)."""
    return dict(_limits.__dict__, pinned_pool_bytes=pinned.limit())


def set_transfer_limits(*, pinned_bytes: int | None = None, device_bytes: int | None = None,
                        threads: int | None = None, small_bytes: int | None = None,
                        pinned_pool_bytes: int | None = None) -> dict:
    """Change the transfer engine's limits (None keeps a setting); returns the previous settings.

    pinned_bytes: page-locked host memory the engine may hold (ring + small buffer), at least 1 MiB.
    device_bytes: device scratch one streamed call may use, at least 64 KiB; numpy arrays of any
        size stream through it.
    threads: worker threads for host copies and transfers (1..256).
    small_bytes: calls moving at most this many bytes go in one shot on the caller's stream (one-way
        copies up to 64 MiB of it).
    pinned_pool_bytes: page-locked memory the pool of pyew.empty_pinned and of new numpy results
        may keep, blocks in use included (0 keeps none: results are pageable numpy arrays); free
        blocks past it are freed now.
    The engine's pinned memory is freed now and allocated again on next use."""
    global _limits
    old = transfer_limits()
    new = {}
    for name, value, lo in (("pinned_bytes", pinned_bytes, _MiB), ("device_bytes", device_bytes, 64 * 1024),
                            ("threads", threads, 1), ("small_bytes", small_bytes, 0),
                            ("pinned_pool_bytes", pinned_pool_bytes, 0)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"set_transfer_limits: {name} must be an int, not {type(value).__name__}")
        if value < lo or (name == "threads" and value > 256):
            raise ValueError(f"set_transfer_limits: {name} = {value} is out of range "
                             f"(at least {lo}{', at most 256' if name == 'threads' else ''})")
        new[name] = int(value)
    pool = new.pop("pinned_pool_bytes", None)
    if pool is not None:
        pinned.set_limit(pool)
    with _engine_lock, _small_lock:
        _release_locked()
        _limits = replace(_limits, **new)
    return old


# ---- pinned memory ---------------------------------------------------------------------------

class Pinned:
    """One page-locked host block, seen as bytes."""
    __slots__ = ("ptr", "nbytes", "view")

    def __init__(self, nbytes: int):
        self.ptr = rt.host_alloc(nbytes)
        self.nbytes = nbytes
        self.view = np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(self.ptr))

    def array(self, offset: int, dtype: np.dtype, shape) -> np.ndarray:
        n = math.prod(shape)
        return self.view[offset:offset + n * dtype.itemsize].view(dtype).reshape(shape)

    def free(self) -> None:
        if self.ptr:
            self.view = None
            rt.host_free(self.ptr)
            self.ptr = 0


class _Lane:
    """A worker's stream and event on one GPU, and its pinned slot. `raw` is the stream as the
    call layer's kernels take one. Lane i of every GPU uses pinned slot i: one streamed call runs
    at a time (_engine_lock), and the slots are portable, so the ring is shared by the GPUs. A lane
    without a slot is a GPU's second stream for one-shot calls in parts (_move's `down`)."""
    __slots__ = ("stream", "event", "slot", "ordinal", "raw")

    def __init__(self, slot: Pinned | None, ordinal: int):
        self.ordinal = ordinal
        with rt.on(ordinal):
            self.stream = rt.new_stream(ordinal)
            try:
                self.event = rt.Event()
            except BaseException:
                rt.destroy_stream(self.stream)
                raise
        self.raw = rt.RawStream(self.stream, ordinal)
        self.slot = slot

    def wait(self) -> None:
        """Wait for the lane's stream: its slot is free for the worker's next block."""
        self.event.record(self.stream)
        self.event.synchronize()

    def follow(self, stream_cu) -> None:
        """Work queued on this lane from now runs after what is queued on stream_cu so far. One
        event serves every call: a wait takes the event as recorded when the wait is queued."""
        self.event.record(stream_cu)
        rt.wait_event(self.stream, self.event)

    def close(self) -> None:
        with rt.on(self.ordinal):
            rt.stream_synchronize(self.stream)
            rt.destroy_stream(self.stream)


_engine_lock = threading.Lock()
_small_lock = threading.Lock()
_lanes: dict[int, list[_Lane]] = {}       # per GPU
_slots: list[Pinned] = []                  # the pinned ring, shared by the GPUs' lanes
_pool: ThreadPoolExecutor | None = None
_small: Pinned | None = None


# Uploads into GPU calls (a numpy operand of a call on DeviceArrays, asarray of a small array) are
# carved one after another from the small buffer, each region kept until an event says its copy
# has read it. A region is waited for only when the cursor comes round to it again, so a caller
# queueing GPU work never waits for that work, as it would if every upload reused offset 0.
# Entries: (start, end, event, ordinal), oldest first; they lie in ring order from the cursor.
_uploads: collections.deque = collections.deque()
_upload_cursor = 0
_spare_events: dict[int, list] = {}       # per GPU: retired upload events, recorded again later
_MAX_UPLOADS = 64                          # regions (and events) in flight at most


def _retire_oldest() -> None:
    _, _, ev, ordinal = _uploads.popleft()
    ev.synchronize()
    _spare_events.setdefault(ordinal, []).append(ev)


def _small_buffer(need: int = 0) -> Pinned | None:
    """The whole small pinned buffer, of at least `need` bytes, once every copy still reading it
    (uploads') is done; None if `need` is past its cap. Call with _small_lock held."""
    global _small, _upload_cursor
    cap = _small_buffer_bytes()
    if need > cap:
        return None
    while _uploads:
        _retire_oldest()
    # grown at least twofold, in whole _SMALL_STEPs, up to the cap: pinning takes time in proportion
    # to its size, so a first call does not pin what only large calls use
    if _small is None or _small.nbytes < need:
        size = min(cap, max(_SMALL_STEP, -(-need // _SMALL_STEP) * _SMALL_STEP, 2 * (_small.nbytes if _small else 0)))
        if _small is not None:
            _small.free()
            _small = None
        _small = Pinned(size)
        _upload_cursor = 0
    return _small


def _upload_region(nbytes: int) -> int | None:
    """The offset of a free region of the small buffer for one upload of nbytes (the next in ring
    order, once copies still reading it are done); None if it cannot hold them. With _small_lock."""
    global _upload_cursor
    need = _round(nbytes)
    if (_small is None or need > _small.nbytes) and _small_buffer(need) is None:
        return None
    start = _upload_cursor
    if start + need > _small.nbytes:
        while _uploads and _uploads[0][0] >= start:     # the last lap's entries past the cursor
            _retire_oldest()
        start = 0
    end = start + need
    while _uploads and (len(_uploads) >= _MAX_UPLOADS or (_uploads[0][0] < end and start < _uploads[0][1])):
        _retire_oldest()
    _upload_cursor = end
    return start


def _upload_queued(start: int, nbytes: int, stream) -> None:
    """Note that a copy queued on `stream` reads [start, start + nbytes) of the small buffer."""
    spare = _spare_events.get(stream.ordinal)
    if spare:
        ev = spare.pop()
    else:
        with rt.on(stream.ordinal):
            ev = rt.Event()
    ev.record(stream.cu)
    _uploads.append((start, start + _round(nbytes), ev, stream.ordinal))


def _small_buffer_bytes() -> int:
    """The small buffer's cap: what a one-shot call of two inputs stages (two thirds of small_bytes,
    as a new result comes down into a pooled block), and at most two thirds of pinned_bytes (the
    ring has the rest); slack for the per-operand alignment of up to 16 operands."""
    return max(_MIN_SMALL_PINNED, min(_limits.small_bytes, _limits.pinned_bytes) * 2 // 3 + 16 * _ALIGN)


def _ring_slot_bytes() -> int:
    per = (_limits.pinned_bytes - _small_buffer_bytes()) // _limits.threads
    return max(_ALIGN * 64, per // _ALIGN * _ALIGN)


def _worker_pool() -> ThreadPoolExecutor:
    """The worker threads (with _engine_lock, as everything that uses or frees them)."""
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(_limits.threads, thread_name_prefix="pyew-transfer")
    return _pool


def _ensure_lanes(k: int, ordinal: int) -> list[_Lane]:
    slot = _ring_slot_bytes()
    while len(_slots) < k:
        _slots.append(Pinned(slot))
    lanes = _lanes.setdefault(ordinal, [])
    while len(lanes) < k:
        lanes.append(_Lane(_slots[len(lanes)], ordinal))
    return lanes[:k]


def _release_locked() -> None:
    global _pool, _small, _upload_cursor
    for lane in [*(la for lanes in _lanes.values() for la in lanes), *_downs.values()]:
        with contextlib.suppress(Exception):
            lane.close()
    _lanes.clear()
    _downs.clear()
    for slot in _slots:
        slot.free()
    _slots.clear()
    while _uploads:
        _retire_oldest()
    _spare_events.clear()
    if _small is not None:
        _small.free()
        _small = None
    _upload_cursor = 0
    if _pool is not None:
        _pool.shutdown(wait=True)
        _pool = None


def release() -> None:
    """Free the engine's pinned memory, the free blocks of empty_pinned's pool and the worker
    threads now (they come back on next use). libew's copy threads stay: they sleep when idle."""
    with _engine_lock, _small_lock:
        _release_locked()
    pinned.release()


def pinned_bytes_held() -> int:
    """Page-locked bytes the engine holds right now."""
    small = _small                      # read once: a growing buffer is None for a moment
    return sum(slot.nbytes for slot in _slots) + (small.nbytes if small is not None else 0)


@atexit.register
def _free_at_exit() -> None:
    with contextlib.suppress(Exception):
        release()


# ---- chunking ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class HostOperand:
    """One host array of a streamed call, with the shape it has in the call's iteration space
    (its own dims, 1 where it is broadcast; same rank as the output)."""
    array: np.ndarray
    shape: tuple[int, ...]


def chunks(shape: tuple[int, ...], max_elems: int):
    """Split the iteration space `shape` into blocks of at most max_elems elements (at least one
    row of the innermost dim it splits), in C order. Each block is a tuple of slices, one per dim.
    `shape` has at least one dim and no zero-length one: calls of no elements return before
    streaming, and a 0-d call streams as (1,)."""
    nd = len(shape)
    s, inner = _cut_dim(shape, max_elems)
    # dims > s are whole; dim s is cut into ranges of `step`; dims < s are taken one index at a time
    if inner * shape[s] <= max_elems:
        step = shape[s]
    else:
        step = max(1, max_elems // inner)
    for outer in np.ndindex(*shape[:s]):
        for a in range(0, shape[s], step):
            b = min(a + step, shape[s])
            yield tuple(slice(i, i + 1) for i in outer) + (slice(a, b),) + (slice(None),) * (nd - s - 1)


def _cut_dim(shape: tuple[int, ...], max_elems: int) -> tuple[int, int]:
    """The dim s that blocks of at most max_elems elements cut, and the elements of the dims after
    it, which they take whole: the trailing dims, innermost first, while they fit (dim 0 at most)."""
    s, inner = len(shape) - 1, 1
    while s > 0 and inner * shape[s] <= max_elems:
        inner *= shape[s]
        s -= 1
    return s, inner


def _round(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def _laid_out(base: int, views) -> list[int]:
    """Where views go one after another from address base, each at a 256-byte boundary."""
    ptrs = []
    for v in views:
        ptrs.append(base)
        base += _round(v.nbytes)
    return ptrs


# ---- one block ---------------------------------------------------------------------------------

def _move(ins, outs, ptrs, stream_cu, buf: Pinned | None = None, start: int = 0, here=None, launch=None,
          settle=None, native: bool = False, down: _Lane | None = None, parts: Sequence[tuple[int, int]] = (),
          scales: Sequence[int] = ()) -> None:
    """One block: the host views `ins` up to `ptrs` (ins', then outs'), launch(ptrs, n), the
    outputs down into `outs`, settle() (by default a wait for the stream), then staged outputs into
    place. Operands flagged `here` (default: all without buf, else none) go from or to their own
    memory; the others are staged through buf from `start`, 256-byte aligned, and inputs adjacent
    in both memories go up in one copy. `native` (the caller's thread, not a worker's): staged
    through libew's copies (_copy), a large C-ordered input as it goes up (_send).
    With `down` (a second stream) and `parts` (_parts), each part's outputs go down on `down` while
    the next part goes up; `scales` (one_shot): a row (0) goes up whole with the first part, a
    column (k) in runs of 1/k of the call's."""
    here = here or [buf is None] * len(ptrs)
    copy = _copy if native else np.copyto
    offs, off = [], start                 # where each staged operand sits in buf
    for v, direct in zip(ins + outs, here):
        offs.append(None if direct else off)
        off = off if direct else off + _round(v.nbytes)
    k = len(ins)
    try:
        if parts:
            flats = [v.reshape(-1) for v in ins]
            sizes = [v.itemsize for v in ins + outs]
            every = list(scales) + [1] * len(outs)        # of the call's elements per element of each
            homes = [v.ctypes.data if o is None else buf.ptr + o for v, o in zip(outs, offs[k:])]
            for lo, hi in parts:
                for f, dp, o, e in zip(flats, ptrs, offs, scales):
                    if e:
                        _up_range(f, dp, o, lo // e, hi // e, buf, stream_cu)
                    elif not lo:
                        _up_range(f, dp, o, 0, f.size, buf, stream_cu)
                launch([p + lo // e * b if e else p for p, b, e in zip(ptrs, sizes, every)], hi - lo)
                down.follow(stream_cu)
                for home, dp, b in zip(homes, ptrs[k:], sizes[k:]):
                    rt.copy_dtoh(home + lo * b, dp + lo * b, (hi - lo) * b, down.stream)
            rt.stream_synchronize(down.stream)
        else:
            _up_all(ins, ptrs, offs, buf, stream_cu, native)
            if launch is not None:
                launch(ptrs, outs[0].size if outs else 0)
            for v, dp, o in zip(outs, ptrs[k:], offs[k:]):
                rt.copy_dtoh(v.ctypes.data if o is None else buf.ptr + o, dp, v.nbytes, stream_cu)
            if settle is None:
                rt.stream_synchronize(stream_cu)
            else:
                settle()
    except BaseException:
        # copies may be queued from or into memory the caller frees or reuses once this raises (a
        # pooled result, a region of buf): they finish first
        for st in (stream_cu, down.stream if down is not None else None):
            if st is not None:
                with contextlib.suppress(Exception):
                    rt.stream_synchronize(st)
        raise
    for v, o in zip(outs, offs[k:]):
        if o is not None:
            copy(v, buf.array(o, v.dtype, v.shape))


def _up_all(ins, ptrs, offs, buf, stream_cu, native) -> None:
    """The inputs of a block in one part: direct ones by DMA, staged runs that follow each other
    in both memories in one copy, and large C-ordered ones through _send where `native` (see _move)."""
    pending = []                 # a staged run not queued yet [device, host, bytes]

    def up(run):
        if run:
            rt.copy_htod(*run, stream_cu)
        return []

    for v, dp, o in zip(ins, ptrs, offs):
        if o is None:
            pending = up(pending)
            rt.copy_htod(dp, v.ctypes.data, v.nbytes, stream_cu)
        elif native and v.nbytes >= _SPLIT_COPY_BYTES and v.flags.c_contiguous:
            pending = up(pending)
            _send(buf.array(o, v.dtype, v.shape), v, dp, stream_cu)
        else:
            (_copy if native else np.copyto)(buf.array(o, v.dtype, v.shape), v)
            end = _round(pending[2]) if pending else 0
            if pending and pending[0] + end == dp and pending[1] + end == buf.ptr + o:
                pending[2] = end + v.nbytes
            else:
                up(pending)
                pending = [dp, buf.ptr + o, v.nbytes]
    up(pending)


def _up_range(flat: np.ndarray, dp: int, o, lo: int, hi: int, buf, stream_cu) -> None:
    """Elements [lo, hi) of a C-ordered input up to dp + lo: by DMA from it (o None), else staged
    at buf offset o + lo as it goes up (_send)."""
    b = flat.itemsize
    if o is None:
        rt.copy_htod(dp + lo * b, flat.ctypes.data + lo * b, (hi - lo) * b, stream_cu)
    else:
        _send(buf.array(o + lo * b, flat.dtype, (hi - lo,)), flat[lo:hi], dp + lo * b, stream_cu)


_OVERLAP_PART_BYTES = 2 << 20     # parts of a call whose copies up and down overlap (docs/tuning.md)
_OVERLAP_PARTS = 4


def _parts(ins, outs, period: int, scales: Sequence[int]) -> list[tuple[int, int]]:
    """The element ranges a call goes in with copies up and down overlapping (see _move), each a
    run of whole periods, the last about half of an equal share; [] for one part: no period,
    operands that are not C-ordered, an input whose length does not fit its scale and the period,
    or too few bytes for parts of _OVERLAP_PART_BYTES (of its largest input of the outputs' length).
    The byte count is asked first: most calls are too small to split."""
    full = [v.nbytes for v, e in zip(ins, scales) if e == 1]
    k = min(_OVERLAP_PARTS, max(full) // _OVERLAP_PART_BYTES) if full else 0
    if k < 2 or not period or not outs:
        return []
    n = outs[0].size
    if not all(v.size == n for v in outs) or not all(v.flags.c_contiguous for v in ins + outs):
        return []
    for v, e in zip(ins, scales):
        if not (v.size == n if e == 1 else (v.size and period % v.size == 0) if not e else
                (v.size * e == n and period % e == 0)):
            return []
    unit = math.lcm(period, _ALIGN)     # whole periods in whole 256-element runs: parts stay vector-aligned
    # the last part is half of an equal one: its copy up, kernel and copy down are what is left to
    # wait for once every part is queued (docs/tuning.md)
    per = (n - n // (2 * k)) / (k - 1)
    cuts = sorted({round(i * per / unit) * unit for i in range(1, k)} - {0})
    bounds = [0, *(c for c in cuts if c < n), n]
    return list(zip(bounds, bounds[1:])) if len(bounds) > 2 else []


_downs: dict[int, _Lane] = {}      # per GPU, with _small_lock: the second stream of one-shot calls


# ---- one-way copies ------------------------------------------------------------------------------

def to_device(host: np.ndarray, dptr: int, stream) -> None:
    """Queue a copy of host (any layout) into the C-ordered device buffer at dptr; work queued later
    on `stream` sees the data. Returns once `host` may change again."""
    _one_way(host, dptr, stream, up=True)


def to_host(dptr: int, host: np.ndarray, stream) -> None:
    """Copy the C-ordered device buffer at dptr into host (C-contiguous or not), after the work
    queued on `stream` so far; returns when host holds the data."""
    _one_way(host, dptr, stream, up=False)


def _plain(a: np.ndarray) -> np.ndarray:
    """A numpy subclass (np.matrix, whose reshape(-1) stays 2-D) as a plain array over its memory:
    the engine's views and slices then mean what they say."""
    return a if type(a) is np.ndarray else a.view(np.ndarray)


def _one_way(host: np.ndarray, dptr: int, stream, up: bool) -> None:
    host = _plain(host)
    nbytes = host.nbytes
    if nbytes == 0:
        return
    flat = host.reshape(-1) if host.flags.c_contiguous else None
    small = nbytes <= min(_limits.small_bytes, _ONE_WAY_SMALL_BYTES)
    # Page-locked already (a result from the pool, pyew.empty_pinned, memory CUDA locked): one DMA
    # in place, and a wait. A small upload that fits the small buffer is staged instead, so the
    # caller does not wait for it, and is not asked about up to _STAGED_UPLOAD_BYTES (above that a
    # locked one goes by DMA, and the caller waits, as when small_bytes was 16 MiB; which is faster
    # there is not measured); a small array only from RESULT_BYTES.
    if small and up and not (nbytes > _STAGED_UPLOAD_BYTES and flat is not None and pinned.is_pinned(host)):
        with _small_lock:
            start = _upload_region(nbytes)
            if start is not None:       # queued, not waited for: the region stays taken until its copy ran
                _move(*_ends(host, up), [dptr], stream.cu, _small, start, native=True,
                      settle=lambda: _upload_queued(start, nbytes, stream))
                return
    if pinned.is_direct(host) if small else (flat is not None and pinned.is_pinned(host)):
        _move(*_ends(host, up), [dptr], stream.cu)
        return
    if small and not up:
        with _small_lock:
            if _small_buffer(_round(nbytes)) is not None:
                _move(*_ends(host, up), [dptr], stream.cu, _small, native=True)
                return
    with _engine_lock:      # blocks of what a slot holds, spread over the workers, of _MIN_BLOCK_BYTES at least
        item = host.dtype.itemsize
        per = max(1, min(_ring_slot_bytes() // item, max(_MIN_BLOCK_BYTES // item, -(-host.size // _limits.threads))))

        def work(lane: _Lane, block):
            if flat is None:        # chunks() cuts C-ordered runs: the offset of the first element
                part, off = host[block], int(np.ravel_multi_index([s.start or 0 for s in block], host.shape))
            else:
                part, off = flat[block[0]], block[0].start
            _move(*_ends(part, up), [dptr + off * host.dtype.itemsize], lane.stream, lane.slot, settle=lane.wait)

        shape = (host.size,) if flat is not None else host.shape
        _run_workers(list(chunks(shape, per)), work, stream, join=up)


def _ends(view: np.ndarray, up: bool):
    """A one-way copy's view as _move's (ins, outs)."""
    return ([view], []) if up else ([], [view])


# ---- the workers -------------------------------------------------------------------------------

def _run_workers(blocks: Sequence, work: Callable, stream, join: bool) -> None:
    """Run work(lane, block) for every block on the workers; each worker takes the next block when
    it finishes one. The lanes start after the work queued on `stream`; with join, `stream` then
    waits for the lanes. Any error (a worker's, or KeyboardInterrupt in the caller) stops the
    workers after their current block, drains their streams, and is raised here."""
    k = min(len(blocks), _limits.threads)
    lanes = _ensure_lanes(k, stream.ordinal)
    for lane in lanes:
        lane.follow(stream.cu)
    it = iter(blocks)
    take = threading.Lock()
    cancel = threading.Event()

    def loop(lane: _Lane):
        rt.bind_thread(lane.ordinal)
        while not cancel.is_set():
            with take:
                block = next(it, None)
            if block is None:
                return
            try:
                work(lane, block)
            except BaseException:
                cancel.set()
                raise

    futures = []
    try:
        pool = _worker_pool()
        for lane in lanes:
            futures.append(pool.submit(loop, lane))
    except BaseException:       # Ctrl-C while starting them: the ones started stop before this raises
        cancel.set()
        with contextlib.suppress(BaseException):
            _join(futures, lanes, cancel)
        raise
    _join(futures, lanes, cancel)
    if join:
        for lane in lanes:
            lane.event.record(lane.stream)
            rt.wait_event(stream.cu, lane.event)


def _join(futures, lanes, cancel) -> None:
    """Wait for the workers. The wait wakes up often, so a KeyboardInterrupt reaches this thread
    promptly; it (or a worker's error) stops the others after their current block."""
    err: BaseException | None = None
    pending = list(futures)
    while pending:
        try:
            pending[0].result(timeout=0.05)
            pending.pop(0)
        except FutureTimeout:
            continue
        except BaseException as e:    # KeyboardInterrupt in this thread, or a worker's error
            cancel.set()
            if err is None:
                err = e
            if pending[0].done():
                pending.pop(0)
    if err is not None:
        for lane in lanes:
            with contextlib.suppress(Exception):
                rt.stream_synchronize(lane.stream)
        raise err


# ---- the streamed elementwise call -------------------------------------------------------------

@dataclass(frozen=True)
class DeviceChunk:
    """What a streamed call's kernel step gets for one block: device pointers of each host input's
    block (C-ordered, of the block's extent in its operand's shape), of the output block, their shapes,
    and the lane's stream."""
    inputs: tuple[int, ...]
    input_shapes: tuple[tuple[int, ...], ...]
    out: tuple[int, ...]
    out_shapes: tuple[tuple[int, ...], ...]
    stream: object


def stream_call(inputs: Sequence[HostOperand], outputs: Sequence[np.ndarray], shape: tuple[int, ...],
                kernel: Callable[[DeviceChunk], None], stream, *, out_scale: Sequence[int] = (),
                in_scale: Sequence[int] = (), align: int = 1, scratch_per_elem: int = 0) -> None:
    """Run an elementwise call whose operands live in host memory, block by block.

    inputs: host operands over the iteration space `shape` (broadcast dims have extent 1).
    outputs: host arrays to write, of `shape` (or, with out_scale[i] = k > 1, a 1-D array of one
        element per k elements of the flattened space: relu_mask's bitmask words).
    in_scale: likewise for inputs (a 1-D mask input, one word per 32 elements).
    align: blocks of the flattened space start at multiples of this (32 for bitmasks).
    scratch_per_elem: device bytes per element that kernel(chunk) allocates for itself on
        chunk.stream (casts of promoted inputs); counted against device_bytes.
    kernel(chunk) queues the device work for one block on chunk.stream.
    """
    n = math.prod(shape)
    if n == 0:
        return
    inputs = [op if type(op.array) is np.ndarray else HostOperand(_plain(op.array), op.shape) for op in inputs]
    outputs = [_plain(o) for o in outputs]
    out_scale = tuple(out_scale) or (1,) * len(outputs)
    in_scale = tuple(in_scale) or (1,) * len(inputs)
    scaled = any(s != 1 for s in out_scale + in_scale)
    if scaled:      # bitmask calls run on flat ranges: their inputs must be one C-ordered run
        inputs = [HostOperand(np.ascontiguousarray(op.array), op.shape) for op in inputs]
        if not all(o.flags.c_contiguous for o in outputs):
            raise ValueError("the outputs of a bitmask op must be C-contiguous")
    # flat: every operand is one C-ordered run over the whole space, so blocks are ranges of it;
    # otherwise blocks are n-d sub-blocks (strided numpy views, broadcast operands)
    flat = scaled or (all(op.shape == shape and op.array.flags.c_contiguous for op in inputs)
                      and all(o.flags.c_contiguous for o in outputs))
    space = (n,) if flat else shape
    arrays = [op.array for op in inputs] + list(outputs)
    scales = in_scale + out_scale
    per_elem = sum(a.dtype.itemsize / s for a, s in zip(arrays, scales))
    if sum(a.nbytes for a in arrays) <= _limits.small_bytes:         # one shot on the caller's stream, if it fits
        ins, outs = _views(inputs, outputs, flat, tuple(slice(0, d) for d in space), out_scale, in_scale)
        runs = None
        if not scaled and all(o.flags.c_contiguous for o in outputs):
            runs = runs_of([op.shape for op in inputs], shape)
        if runs is not None:        # any run of whole rows is a call of its own (one_shot's parts)
            def launch(dptrs, optrs, st, m):
                run, in_shapes = runs.shapes(m)
                kernel(DeviceChunk(tuple(dptrs), tuple(in_shapes), tuple(optrs), (run,) * len(optrs), st))
        else:
            def launch(dptrs, optrs, st, m):
                kernel(_chunk(ins, outs, dptrs + optrs, st))
        if one_shot(ins, outs, launch, stream, *((runs.period, runs.scales) if runs else ())):
            return
    # page-locked operands are copied straight from and into (no staging) where every block of
    # them is one run: in a flat call, and in any call for a C-ordered operand of the call's shape
    # (chunks() cuts C-ordered blocks; a row-bias add's x and result)
    full = [flat or op.shape == shape for op in inputs] + [True] * len(outputs)
    direct = [f and a.flags.c_contiguous and pinned.is_pinned(a) for f, a in zip(full, arrays)]
    with _engine_lock:
        slot = _ring_slot_bytes()
        per_host = _slot_elems(slot, arrays, scales, full, direct)
        # one lane's device scratch (every operand's block, each rounded up to _ALIGN) within its share
        share = _limits.device_bytes // _limits.threads - _ALIGN * (len(arrays) + 1)
        per_dev = max(1, int(share / max(per_elem + scratch_per_elem, 1e-9)))
        per = _block_elems(space, min(per_host, per_dev), per_elem, align)
        blocks = list(chunks(space, per))
        k = min(len(blocks), _limits.threads)
        elems = [per if flat or math.prod(op.shape) == n else min(math.prod(op.shape), per) for op in inputs]
        dev_bytes = sum(_round(-(-m // s) * a.dtype.itemsize)
                        for m, s, a in zip(elems + [per] * len(outputs), scales, arrays))
        lanes = _ensure_lanes(k, stream.ordinal)
        scratch = {}            # per lane, from the pool on its stream; returned also on an error

        def work(lane: _Lane, block):
            ins, outs = _views(inputs, outputs, flat, block, out_scale, in_scale)
            ptrs = _laid_out(scratch[id(lane)], ins + outs)
            _move(ins, outs, ptrs, lane.stream, lane.slot, here=direct, settle=lane.wait,
                  launch=lambda p, n: kernel(_chunk(ins, outs, p, lane.raw)))
        try:
            for lane in lanes:
                scratch[id(lane)] = rt.malloc(dev_bytes, lane.raw) if dev_bytes else 0
            _run_workers(blocks, work, stream, join=False)
        finally:
            for lane in lanes:
                if scratch.get(id(lane)):
                    rt.free(scratch[id(lane)], lane.raw)


def _views(inputs, outputs, flat, block, out_scale, in_scale):
    """The host views a block reads and writes: per input (view, shape), per output (view, shape)."""
    if not flat:        # an operand of extent 1 on a dim (broadcast) is read at index 0 there
        return ([op.array.reshape(op.shape)[tuple(slice(0, 1) if n == 1 else sl for n, sl in zip(op.shape, block))]
                 for op in inputs], [o[block] for o in outputs])
    sl = block[0]

    def cut(a, s):
        return a[sl.start // s: -(-sl.stop // s)] if s != 1 else a[sl]
    return ([cut(op.array.reshape(-1) if op.array.flags.c_contiguous else op.array, s)
             for op, s in zip(inputs, in_scale)], [cut(o.reshape(-1), s) for o, s in zip(outputs, out_scale)])


def _slot_elems(slot: int, arrays, scales, full, direct) -> int:
    """Elements per block that a pinned slot holds: only staged operands take room in it (direct
    ones go by DMA from and to their own memory), and a broadcast operand's block is a part of
    it, so small ones count once, whole, rather than per element (together at most a quarter of
    the slot; any others per element): a row-bias call then goes in blocks as large as a
    one-input call's (docs/tuning.md)."""
    rate, fixed = 0.0, _ALIGN * (len(arrays) + 1)
    for a, s, f, d in zip(arrays, scales, full, direct):
        if d:
            continue
        if not f and fixed + _round(a.nbytes) <= slot // _WHOLE_SHARE:
            fixed += _round(a.nbytes)
        else:
            rate += a.dtype.itemsize / s
    return int((slot - fixed) / rate) if rate else 1 << 62


_WHOLE_SHARE = 4        # broadcast operands counted whole take at most this part of a slot together


def _block_elems(space: tuple[int, ...], most: int, per_elem: float, align: int) -> int:
    """Elements per block of a streamed call over `space` (its flat length, or its shape), in the
    units chunks() cuts: runs of whole rows of the trailing dims, each from one index of the dims
    before them. At most `most` (what a slot and a lane's device scratch hold; align where that
    is less; a multiple of align, which only flat calls have); the fewest blocks that fit, rounded
    up to a multiple of the worker count where there are rows enough, so no round ends with a few
    workers copying while the others wait; none so small that per-block costs show
    (_MIN_BLOCK_BYTES); and the rows of each index shared out evenly."""
    n = math.prod(space)
    cap = max(align, most // align * align)
    floor = int(_MIN_BLOCK_BYTES / per_elem)
    workers = _limits.threads
    fewest = -(-n // cap)
    blocks = -(-fewest // workers) * workers
    target = min(cap, max(-(-n // blocks), floor))
    s, unit = _cut_dim(space, target)                  # as chunks() cuts blocks of `target`
    if s < len(space) - 1 and math.prod(space[:s + 1]) < 2 * blocks:
        s += 1                                         # too few rows to share out evenly: finer ones
        unit //= space[s]
    outer, rows = math.prod(space[:s]), space[s]
    fewest = -(-rows // (cap // unit))                 # per index of the outer dims, in whole rows
    blocks = -(-outer * fewest // workers) * workers
    # toward whole rounds, but not into blocks under the floor (a slot that holds less than the
    # floor leaves the fewest that fit)
    pieces = max(fewest, min(-(-blocks // outer), max(1, rows * unit // floor), rows))
    step = -(-rows // pieces)
    return step * unit if len(space) > 1 else -(-step // align) * align


@dataclass(frozen=True)
class Runs:
    """How a C-ordered call splits into runs of whole rows (runs_of): the elements of a row of the
    dims it takes whole (the period; 1 where every operand has the call's shape), each operand's
    scale (1 for one of the call's shape, 0 for a row read whole by every run, k for a column: one
    element per k of the call's), and shapes(m): a run of m elements' shape and each operand's
    shape over it."""
    period: int
    scales: tuple[int, ...]
    shapes: Callable[[int], tuple[tuple[int, ...], list[tuple[int, ...]]]]


def runs_of(shapes: Sequence[tuple[int, ...]], shape: tuple[int, ...]) -> Runs | None:
    """The runs of a C-ordered call over `shape` whose operands (numpy shapes that broadcast to it)
    are each of its shape, a row of it (ones, then from some dim on the call's dims or ones: a bias,
    a channel bias (C, 1, 1) of an (N, C, H, W) call) or a column (its dims up to some dim, then
    ones); None where one broadcasts otherwise. A run's rows are the call's dims from the least dim
    any row or column starts its dims or ones from: a row, read whole by every run, meets each run
    as it meets the call."""
    nd = len(shape)
    t, scales, own = nd, [], []
    for s in shapes:
        a = (1,) * (nd - len(s)) + tuple(s)
        own.append(a)
        if a == shape:
            scales.append(1)
            continue
        lead = next((i for i, d in enumerate(a) if d != 1), nd)
        u = next(i for i in range(nd) if a[i] != shape[i])
        if a[lead:] != shape[lead:] and all(d == 1 for d in a[u:]):     # a column (shorter runs than a row)
            scales.append(math.prod(shape[u:]))
            t = min(t, u)
        elif lead and all(d == 1 or d == e for d, e in zip(a[lead:], shape[lead:])):
            scales.append(0)
            t = min(t, lead)
        else:
            return None
    tail, period = tuple(shape[t:]), math.prod(shape[t:])
    tails = [a[t:] for a in own]

    def of(m: int):
        run = (m // period, *tail)
        return run, [run if k == 1 else (run[0] if k else 1, *a) for a, k in zip(tails, scales)]
    return Runs(period, tuple(scales), of)


def _chunk(ins, outs, ptrs, stream) -> DeviceChunk:
    k = len(ins)
    return DeviceChunk(tuple(ptrs[:k]), tuple(v.shape for v in ins), tuple(ptrs[k:]), tuple(v.shape for v in outs),
                       stream)


def one_shot(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], launch: Callable, stream,
             period: int = 0, scales: Sequence[int] = ()) -> bool:
    """The small-call path: `inputs` up (staged through the small buffer, or from their own memory:
    page-locked ones, small C-ordered ones CUDA stages itself), launch(dptrs, optrs, stream, n), the
    results into `outputs`, and a wait; False (nothing done) if they do not fit. With a `period`
    (1: any run; else runs_of's), launch takes any run of whole periods, and a large call goes in
    parts whose copies overlap (_move); `scales` per input as in Runs (by default 1 where an input
    has the outputs' length, else 0)."""
    views = [v if type(v) is np.ndarray else _plain(v) for v in (*inputs, *outputs)]
    sizes = [v.nbytes for v in views]
    if sum(sizes) > _limits.small_bytes:
        return False
    k = len(inputs)
    if period and outputs and not scales:
        scales = [1 if v.size == outputs[0].size else 0 for v in inputs]
    parts = _parts(views[:k], views[k:], period, scales)     # and a second stream, where it splits
    split = bool(parts)
    # straight from and to their own memory: page-locked operands, and in a call not split, C-ordered
    # ones of at most _DRIVER_COPY_BYTES, which CUDA's own copy from pageable memory stages faster
    # than a copy into the small buffer does
    here = [(not split and n <= _DRIVER_COPY_BYTES and v.flags.c_contiguous) or pinned.is_direct(v)
            for n, v in zip(sizes, views)]
    rounded = [_round(n) for n in sizes]
    need = _size_class(sum(rounded))
    staged = sum(r for r, d in zip(rounded, here) if not d)
    if staged > _small_buffer_bytes():          # declined before the copy threads are woken for it
        return False
    if any(n >= _SPLIT_COPY_BYTES and not d for n, d in zip(sizes[:k], here)):
        library.get().host_copy_wake(min(_limits.threads, _copy_threads))    # to stage it: awake by then
    with _small_lock:
        buf = _small_buffer(staged) if staged else None     # it holds only the operands it stages
        if staged and buf is None:
            return False
        if split and stream.ordinal not in _downs:
            _downs[stream.ordinal] = _Lane(None, stream.ordinal)
        dbase = rt.malloc(need, stream)
        try:
            ptrs = _laid_out(dbase, views)
            _move(views[:k], views[k:], ptrs, stream.cu, buf, native=True, here=here,
                  launch=lambda p, n: launch(p[:k], p[k:], stream, n),
                  down=_downs[stream.ordinal] if split else None, parts=parts, scales=scales)
        finally:
            rt.free(dbase, stream, need)
    return True


def fits_one_shot(arrays: Sequence[np.ndarray]) -> bool:
    """Whether a call of these host arrays (its inputs and outputs) may go in one shot rather than
    stream: at most small_bytes moved, and what it stages within the small buffer's cap (every
    operand not page-locked counted, so a call one_shot would take may be said not to fit; never
    the other way)."""
    if sum(a.nbytes for a in arrays) > _limits.small_bytes:
        return False
    return sum(_round(a.nbytes) for a in arrays if not pinned.is_direct(a)) <= _small_buffer_bytes()


def _size_class(n: int) -> int:
    """n rounded up to one of eight sizes per power of two (at most 1/8 more): a one-shot call's
    device scratch, freed into the caching allocator's lists by size, so calls of many sizes
    share a few lists rather than filling one each."""
    if n <= 4096:
        return n
    step = 1 << (n.bit_length() - 4)
    return -(-n // step) * step


_SPLIT_COPY_BYTES = 512 << 10     # libew splits host copies into parts of at least 256 KiB
_DRIVER_COPY_BYTES = 512 << 10    # one-shot operands CUDA copies from and to pageable memory itself (docs/tuning.md)
_SEND_STEP = 1 << 20              # a staged input goes up in copies of at least 1 MiB, 16 at most (docs/tuning.md)
# more than 8 copied no faster on the hosts measured (docs/tuning.md); never more than the CPUs it may use
_copy_threads = min(8, _usable_cpus())


def _copy(dst: np.ndarray, src: np.ndarray) -> None:
    """np.copyto; a large copy between C-ordered arrays of one dtype goes through libew's copy
    (libew/host_copy.cu), split over its copy workers, which wait spinning between calls (on this
    thread alone where the limits or the host allow one thread). libew stores past the CPU's
    caches, so the copy up of staged bytes reads them from memory, not from the caches of the
    threads that wrote them."""
    if not _native_copy(dst, src):
        np.copyto(dst, src)
        return
    library.get().host_copy(dst.ctypes.data, src.ctypes.data, dst.nbytes, min(_limits.threads, _copy_threads))


def _native_copy(dst: np.ndarray, src: np.ndarray) -> bool:
    """Whether libew copies src into dst: both one C-ordered run of one dtype, and large."""
    return (dst.nbytes >= _SPLIT_COPY_BYTES and dst.dtype == src.dtype and dst.shape == src.shape
            and dst.flags.c_contiguous and src.flags.c_contiguous)


def _send(dst: np.ndarray, src: np.ndarray, dptr: int, stream_cu) -> None:
    """Stage src into dst (pinned) and queue its copy up to dptr. libew's copy workers stage it in
    order from its start while this thread queues each run they have finished, so the copy up
    trails the staging by a run instead of following it whole (docs/tuning.md). Every byte is
    staged before this returns or raises: the buffer may be reused then."""
    base, n, sent = dst.ctypes.data, dst.nbytes, 0
    if not _native_copy(dst, src):
        np.copyto(dst, src)
    else:
        lib, step = library.get(), max(_SEND_STEP, -(-n // 16))
        try:
            if lib.host_copy_begin(base, src.ctypes.data, n, min(_limits.threads, _copy_threads), 1):
                while sent < n:
                    got = lib.host_copy_ready(min(n, sent + step))
                    rt.copy_htod(dptr + sent, base + sent, got - sent, stream_cu)
                    sent = got
        finally:
            if sent < n:        # stopped early (an exception, even one raised as begin returned): finish it
                lib.host_copy_finish()
    if sent < n:            # staged by numpy, or by libew alone (begin returned 0): one copy up
        rt.copy_htod(dptr, base, n, stream_cu)
