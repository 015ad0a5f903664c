"""Layouts beyond one aligned shape: broadcast bias adds (a row bias and a channel bias, the big
input and the output counted) and views offset by 1..7 elements from an aligned buffer, pyew
against PyTorch on the same data, each writing into the same output buffer (peers.TORCH_INTO says
why), timed with events around the Python calls. A view's pyew and PyTorch timings alternate for
VIEW_ROUNDS rounds and each row is the median over them: both libraries run near the copy
ceiling there, where one timing each would compare the GPU's drift between them as much as the
kernels."""
from __future__ import annotations

import functools
import statistics

from .. import runtime as rt
from . import traffic
from .api_suites import have_ops, timed
from .data import random_device
from .peers import TORCH_INTO
from .warm import warm_up

ROW_BIAS = ((65536, 4096), (4096,))
CHANNEL_BIAS = ((64, 256, 128, 128), (256, 1, 1))
BIAS_OPS = ("add", "mul", "add_relu")
VIEW_OPS = ("relu", "sigmoid", "add")
DTYPES = ("float32", "float16", "bfloat16")
VIEW_N = 1 << 26
OFFSETS = range(1, 8)
VIEW_ROUNDS = 3


def _torch_fn(t, name):
    return TORCH_INTO[name](t, {})


def _alternating(run, name, dtype, shape, impls, extra) -> None:
    """One row per (impl, calls) of `impls`, all timed in turn VIEW_ROUNDS times: the median over
    the rounds of each timing's median. An impl that fails is recorded as failed and dropped."""
    if run.out_of_time():
        return
    n = int(shape[0])
    live = []
    for impl, calls in impls:
        run.status(f"{name} {dtype} {impl}")
        try:
            nbytes = traffic.bytes_of_call(calls[0])
        except Exception as e:
            run.failed(f"layouts: {impl} {name} {dtype}", e)
            continue
        live.append((impl, calls, nbytes, []))
    for _ in range(VIEW_ROUNDS):
        for entry in list(live):
            impl, calls, _, timings = entry
            try:
                timings.append(run.timer.measure(calls, run.args.repeat, warmup=1))
            except Exception as e:
                run.failed(f"layouts: {impl} {name} {dtype}", e)
                live.remove(entry)
    for impl, _, nbytes, timings in live:
        run.add(suite="layouts", name=name, dtype=dtype, n=n, shape=list(shape), impl=impl,
                ms=statistics.median(t.median_ms for t in timings), min_ms=min(t.min_ms for t in timings),
                reps=sum(t.reps for t in timings), rounds=len(timings), bytes=nbytes, **extra)


def _dtypes(run):
    wanted = run.args.dtypes or DTYPES
    return [d for d in wanted if d in DTYPES]


def suite_layouts(run) -> None:
    import pyew
    if not have_ops(run, "layouts", *BIAS_OPS, *VIEW_OPS):
        return
    peer = run.peers.get("torch")
    dtypes = _dtypes(run)
    warm = []
    for dtype in dtypes:
        x, b = random_device(run.rng, dtype, (4, 64)), random_device(run.rng, dtype, (64,))
        for name in BIAS_OPS:
            warm.append(functools.partial(getattr(pyew, name), x, b))
        for name in VIEW_OPS:
            args = (x[1:],) * (2 if name == "add" else 1)
            warm.append(functools.partial(getattr(pyew, name), *args))
    warm_up(run, warm, "layouts")
    for dtype in dtypes:
        for label, (xs, bs) in (("row bias", ROW_BIAS), ("channel bias", CHANNEL_BIAS)):
            x = random_device(run.rng, dtype, xs)
            b = random_device(run.rng, dtype, bs)
            dst = pyew.empty(xs, dtype)
            counted = 2 * x.nbytes                      # the big input and the output
            for name in BIAS_OPS:
                fn = getattr(pyew, name)
                timed(run, "layouts", f"{name} {label}", dtype, xs, "pyew", [functools.partial(fn, x, b, out=dst)],
                      extra={"counted_bytes": counted})
                if peer is not None:
                    tf = _torch_fn(peer.mod, name)
                    timed(run, "layouts", f"{name} {label}", dtype, xs, "torch",
                          [functools.partial(tf, peer.wrap(x), peer.wrap(b), out=peer.wrap(dst))],
                          extra={"counted_bytes": counted})
            del x, b, dst
            rt.synchronize()
        base = random_device(run.rng, dtype, (VIEW_N + 8,))
        other = random_device(run.rng, dtype, (VIEW_N + 8,))
        dst = pyew.empty((VIEW_N,), dtype)
        tbase = peer.wrap(base) if peer is not None else None
        tother = peer.wrap(other) if peer is not None else None
        tdst = peer.wrap(dst) if peer is not None else None
        for name in VIEW_OPS:
            fn = getattr(pyew, name)
            for off in (0, *OFFSETS):
                if run.out_of_time():
                    return
                view = base[off:off + VIEW_N]
                args = (view, other[:VIEW_N]) if name == "add" else (view,)
                impls = [("pyew", [functools.partial(fn, *args, out=dst)])]
                if peer is not None:
                    tv = tbase[off:off + VIEW_N]
                    targs = (tv, tother[:VIEW_N]) if name == "add" else (tv,)
                    impls.append(("torch", [functools.partial(_torch_fn(peer.mod, name), *targs, out=tdst)]))
                _alternating(run, f"{name} view +{off}", dtype, (VIEW_N,), impls, {"op": name, "offset": off})
        del base, other, dst, tbase, tother, tdst
        rt.synchronize()
