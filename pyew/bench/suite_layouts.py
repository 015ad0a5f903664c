"""Layouts beyond one aligned shape, pyew and PyTorch on the same buffers, timed in turn for VIEW_ROUNDS
rounds (a row the median): near the copy ceiling one timing each would compare the GPU's drift."""
from __future__ import annotations

import functools
import statistics

from .. import runtime as rt
from ..array import empty
from .harness import Suite, Table, alternate, map_cases, random_device
from .suite_api import functions

ROW_BIAS, CHANNEL_BIAS = ((65536, 4096), (4096,)), ((64, 256, 128, 128), (256, 1, 1))
BIAS_OPS, VIEW_OPS, DTYPES = ("add", "mul", "add_relu"), ("relu", "sigmoid", "add"), ("float32", "float16", "bfloat16")
VIEW_N, OFFSETS, VIEW_ROUNDS = 1 << 26, range(1, 8), 3


def _alternating(run, name, dtype, n, sides, nbytes, **extra) -> None:
    """A row per impl of `sides` (impl -> calls), the median of VIEW_ROUNDS rounds."""
    timings = alternate(run, f"layouts: {name} {dtype}", sides, VIEW_ROUNDS,
                        lambda calls: run.timer.measure(calls, run.args.repeat, warmup=1))
    for impl, ts in timings.items():
        row = run.add(suite="layouts", name=name, dtype=dtype, n=n, impl=impl, bytes=nbytes, rounds=len(ts),
                      ms=statistics.median(t["ms"] for t in ts), min_ms=min(t["min_ms"] for t in ts), **extra)
        aligned = run.index.get(("layouts", f"{extra.get('op')} view +0", dtype, n, impl))
        if extra.get("offset") and aligned:
            row["pct_aligned"] = 100 * row["gbps"] / aligned["gbps"]


def run_layouts(run) -> None:
    fns, torch = functions(run, "layouts", *BIAS_OPS, *VIEW_OPS), run.peers.get("torch")
    cases = {(c.name, c.dtype): c for c in map_cases(run.lib.manifest, BIAS_OPS + VIEW_OPS)}

    def sides(name, dtype, args, out):           # pyew and PyTorch on the same inputs and output
        into = torch and torch.into(cases[(name, dtype)])
        return {"pyew": [functools.partial(fns[name], *args, out=out)]} | (
            {"torch": [functools.partial(into, *map(torch.wrap, args), out=torch.wrap(out))]} if into else {})
    for dtype in [d for d in run.args.dtypes or DTYPES if d in DTYPES] if fns else ():
        for label, (xs, bs) in (("row bias", ROW_BIAS), ("channel bias", CHANNEL_BIAS)):
            x, b, out = random_device(run.rng, dtype, xs), random_device(run.rng, dtype, bs), empty(xs, dtype)
            for name in BIAS_OPS:
                _alternating(run, f"{name} {label}", dtype, x.size, sides(name, dtype, (x, b), out), 2 * x.nbytes,
                             shape=list(xs))
            del x, b, out
        (base, other), out = [random_device(run.rng, dtype, VIEW_N + 8) for _ in range(2)], empty(VIEW_N, dtype)
        for name in VIEW_OPS:
            for off in (0, *OFFSETS):
                args = (base[off:off + VIEW_N], other[:VIEW_N])[:cases[(name, dtype)].arity]
                _alternating(run, f"{name} view +{off}", dtype, VIEW_N, sides(name, dtype, args, out),
                             (len(args) + 1) * out.nbytes, op=name, offset=off)
        del base, other, out
        rt.synchronize()


SUITES = (Suite("layouts", "row and channel bias add/mul/add_relu and views offset 1..7 elements, vs torch "
                "(f32/f16/bf16)", run_layouts,
                (Table("Layouts: broadcast bias (the big input and the output counted)", "layouts",
                       ("gbps", "pct_copy"), ("pyew", "torch"), keys=("name", "dtype", "shape"),
                       where=lambda r: "offset" not in r),
                 Table("Views offset by k elements from an aligned buffer (the output aligned, the same for both)",
                       "layouts", ("gbps",), ("pyew", "torch"), keys=("name", "dtype"), fields=("pct_aligned",),
                       where=lambda r: "offset" in r))),)
