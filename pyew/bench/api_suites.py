"""Suites over pyew's Python API: pyew.dot's methods, upsample 2x forward/backward, relu-mask
backward (each vs PyTorch, timed with events around the Python call), and host overhead per call
on tiny arrays.

A suite whose pyew function is not in the loaded library is skipped with a note. Every suite calls
what it times once on a tiny array first (warm.py), so CUDA's lazy module loading is not timed.
"""
from __future__ import annotations

import functools

import numpy as np

from .. import dtypes as dt
from .. import kinds
from .. import runtime as rt
from ..array import empty
from ..errors import PyewError
from ..interop import asarray
from . import traffic
from .data import random_device
from .timing import rotation_slots, wall_per_call_us
from .warm import warm_up

UPSAMPLE_SHAPE = (16, 32, 80, 80)
RELU_MASK_SHAPE = (16, 32, 112, 112)
BATCH_SCALE = 8                         # and again at 8x the batch
DOT_N = 1 << 24
DOT_METHODS = ("fast", "half_atomic", "half2_pack")
API_DTYPES = ("float32", "float16")
OVERHEAD_CALLS = (10000, 5)             # calls per repeat, repeats
OVERHEAD_QUICK = (2000, 3)


def have_ops(run, suite: str, *names) -> bool:
    try:
        table = kinds.table()
    except PyewError as e:
        run.note(f"{suite}: skipped, pyew's op table does not load: {e}")
        return False
    missing = [n for n in names if n not in table]
    if missing:
        run.note(f"{suite}: skipped, the loaded library has no pyew.{', pyew.'.join(missing)}")
    return not missing


def _op_dtypes(run, name: str) -> list[str]:
    op = run.lib.manifest.op(name)
    if op is None and name.endswith("_backward"):        # bound beside its forward op
        op = run.lib.manifest.op(name[:-len("_backward")])
    return [k.dtype.name for k in op.kernels] if op is not None else []


def _api_dtypes(run, name: str) -> list[str]:
    wanted = run.args.dtypes or API_DTYPES
    return [d for d in wanted if d in _op_dtypes(run, name)]


def _batched(shape):
    return [tuple(shape), (shape[0] * BATCH_SCALE,) + tuple(shape[1:])]


def _shape_label(shape) -> str:
    return "x".join(map(str, shape))


def timed(run, suite, name, dtype, shape, impl, calls, extra=None):
    """Events around Python calls; bytes from the first call's inputs and result."""
    if run.out_of_time():
        return None
    n = int(np.prod(shape))
    run.status(f"{name} {dtype} {_shape_label(shape)} {impl}")
    try:
        nbytes = traffic.bytes_of_call(calls[0])
        t = run.timer.measure(calls, run.args.repeat, warmup=1)
    except Exception as e:
        run.failed(f"{suite}: {impl} {name} {dtype} {_shape_label(shape)}", e)
        return None
    return run.add(suite=suite, name=name, dtype=dtype, n=n, shape=list(shape), impl=impl, ms=t.median_ms,
                   min_ms=t.min_ms, reps=t.reps, bytes=nbytes, **(extra or {}))


def _slots(run, nbytes: int) -> int:
    return rotation_slots(nbytes, run.l2_bytes, capacity=8)


def _torch(run, name):
    peer = run.peers.get("torch")
    if peer is None:
        return None, None
    fn, why = peer.api(name)
    if fn is None:
        run.note(why)
    return peer, fn


# ---- upsample 2x -----------------------------------------------------------------------------------

def suite_upsample(run) -> None:
    import pyew
    if not have_ops(run, "upsample", "upsample_nearest2d", "upsample_nearest2d_backward"):
        return
    peer, tf = _torch(run, "upsample_nearest2d")
    _, tb = _torch(run, "upsample_nearest2d_backward")
    dtypes = _api_dtypes(run, "upsample_nearest2d")
    warm = []
    for dtype in dtypes:
        x, dy = random_device(run.rng, dtype, (1, 2, 4, 4)), random_device(run.rng, dtype, (1, 2, 8, 8))
        warm += [functools.partial(pyew.upsample_nearest2d, x, scale=2),
                 functools.partial(pyew.upsample_nearest2d_backward, dy, scale=2)]
        if tf is not None:
            warm.append(functools.partial(tf, peer.wrap(x)))
        if tb is not None:
            warm.append(functools.partial(tb, peer.wrap(dy)))
    warm_up(run, warm, "upsample")
    for dtype in dtypes:
        for shape in _batched(UPSAMPLE_SHAPE):
            N, C, H, W = shape
            k = _slots(run, 5 * int(np.prod(shape)) * np.dtype(dtype).itemsize)
            xs = [random_device(run.rng, dtype, shape) for _ in range(k)]
            dys = [random_device(run.rng, dtype, (N, C, 2 * H, 2 * W)) for _ in range(k)]
            fwd = [functools.partial(pyew.upsample_nearest2d, x, scale=2) for x in xs]
            bwd = [functools.partial(pyew.upsample_nearest2d_backward, dy, scale=2) for dy in dys]
            timed(run, "upsample", "forward", dtype, shape, "pyew", fwd)
            timed(run, "upsample", "backward", dtype, shape, "pyew", bwd)
            if tf is not None:
                timed(run, "upsample", "forward", dtype, shape, "torch",
                      [functools.partial(tf, peer.wrap(x)) for x in xs])
            if tb is not None:
                timed(run, "upsample", "backward", dtype, shape, "torch",
                      [functools.partial(tb, peer.wrap(dy)) for dy in dys])
            del xs, dys, fwd, bwd
            rt.synchronize()


# ---- relu-mask backward ------------------------------------------------------------------------------

def suite_relu_mask(run) -> None:
    import pyew
    if not have_ops(run, "relu_mask", "relu_mask", "relu_mask_backward"):
        return
    peer, tbw = _torch(run, "threshold_backward")
    dtypes = _api_dtypes(run, "relu_mask_backward")
    warm = []
    for dtype in dtypes:
        x, dy = random_device(run.rng, dtype, (64,)), random_device(run.rng, dtype, (64,))
        warm += [functools.partial(pyew.relu_mask, x),
                 lambda x=x, dy=dy: pyew.relu_mask_backward(dy, pyew.relu_mask(x)[1])]
        if tbw is not None:
            warm.append(lambda x=x, dy=dy: tbw(peer.wrap(dy), peer.mod.relu(peer.wrap(x))))
    warm_up(run, warm, "relu_mask")
    for dtype in dtypes:
        for shape in _batched(RELU_MASK_SHAPE):
            k = _slots(run, 3 * int(np.prod(shape)) * np.dtype(dtype).itemsize)
            xs = [random_device(run.rng, dtype, shape) for _ in range(k)]
            dys = [random_device(run.rng, dtype, shape) for _ in range(k)]
            try:
                masks = [pyew.relu_mask(x)[1] for x in xs]
            except Exception as e:
                run.failed(f"relu_mask: pyew.relu_mask({dtype} {_shape_label(shape)})", e)
                return
            timed(run, "relu_mask", "backward", dtype, shape, "pyew",
                  [functools.partial(pyew.relu_mask_backward, dy, m) for dy, m in zip(dys, masks)])
            if tbw is not None:
                ys = [peer.mod.relu(peer.wrap(x)) for x in xs]    # torch saves y = relu(x) for backward
                timed(run, "relu_mask", "backward", dtype, shape, "torch",
                      [functools.partial(tbw, peer.wrap(dy), y) for dy, y in zip(dys, ys)])
                del ys
            del xs, dys, masks
            rt.synchronize()


# ---- pyew.dot's methods -----------------------------------------------------------------------------

def _dot_methods(run, dtype: str) -> tuple:
    op = run.lib.manifest.op("dot")
    k = op.kernel(dt.BY_NAME[dtype]) if op is not None else None
    return tuple(e.role for e in k.entries) if k is not None else DOT_METHODS


def suite_dot(run) -> None:
    import pyew
    if not have_ops(run, "dot", "dot"):
        return
    peer, tdot = _torch(run, "dot")
    n = min(DOT_N, max(run.args.sizes))
    dtype = "float16"
    if dtype not in _op_dtypes(run, "dot"):
        run.note("dot: the library has no float16 dot; skipped")
        return
    methods = _dot_methods(run, dtype)
    wa, wb = random_device(run.rng, dtype, 256), random_device(run.rng, dtype, 256)
    warm = [functools.partial(pyew.dot, wa, wb, method=m) for m in methods]
    if tdot is not None:
        warm.append(functools.partial(tdot, peer.wrap(wa), peer.wrap(wb)))
    warm_up(run, warm, "dot")
    k = _slots(run, 2 * n * 2)
    a = [random_device(run.rng, dtype, n) for _ in range(k)]
    b = [random_device(run.rng, dtype, n) for _ in range(k)]
    for method in methods:
        timed(run, "dot", method, dtype, (n,), "pyew",
              [functools.partial(pyew.dot, x, y, method=method) for x, y in zip(a, b)])
    if tdot is not None:
        timed(run, "dot", "torch.dot", dtype, (n,), "torch",
              [functools.partial(tdot, peer.wrap(x), peer.wrap(y)) for x, y in zip(a, b)])
    del a, b
    rt.synchronize()


# ---- host overhead per call --------------------------------------------------------------------------

def suite_overhead(run) -> None:
    """Wall clock per call of an add on 1-element arrays: Python, argument checks, allocation and
    launch, with the GPU work negligible. pyew's raw entry point is the floor under pyew.add."""
    import pyew
    calls, repeats = OVERHEAD_QUICK if run.args.quick else OVERHEAD_CALLS
    x = asarray(np.array([1.25], np.float32))
    y = asarray(np.array([-0.5], np.float32))
    z = empty(1, "float32")
    dev = run.dev
    # partials, not lambdas: every library's call is timed with the same (one) frame around it
    cases = [("pyew.add(x, y)", "pyew", functools.partial(pyew.add, x, y)),
             ("pyew.add(x, y, out=z)", "pyew", functools.partial(pyew.add, x, y, out=z))]
    add = next(iter(_add_cases(run)), None)
    if add is not None:
        entry = functools.partial(add.forward.fn, z.ptr, x.ptr, y.ptr, 1, rt.DEFAULT_STREAM.handle, *dev.dims)
        how = "C extension" if run.lib.ext is not None else "ctypes"
        cases.append((f"{add.symbol} via {how}", "entry", entry))
    for name, peer in run.peers.items():
        fn, _ = peer.api("add")
        if fn is not None:
            px, py = peer.wrap(x), peer.wrap(y)
            cases.append((f"{name}.add(x, y)", name, functools.partial(fn, px, py)))
    warm_up(run, [fn for _, _, fn in cases], "overhead")
    for label, impl, fn in cases:
        if run.out_of_time():
            return
        run.status(label)
        try:
            med, best = wall_per_call_us(fn, calls, repeats, rt.synchronize)
        except Exception as e:
            run.failed(f"overhead: {label}", e)
            continue
        run.add(suite="overhead", name=label, dtype="float32", n=1, impl=impl, us_per_call=med,
                min_us_per_call=best, calls=calls * repeats)


def _add_cases(run):
    from .map_suites import map_cases
    return map_cases(run.lib.manifest, ops=["add"], dtypes=["float32"])
