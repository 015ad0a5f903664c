"""`python -m pyew bench-dask`: y = gelu(x * w + b) in float32 over a dask array on 1, 2, 4, ... GPUs
(dask-cuda's LocalCUDACluster, a worker per GPU), chunks on the host (numpy) or the GPUs (CuPy). x is
(N / 4096, 4096) in row blocks of --chunk elements, persisted first; a timed repeat persists --in-flight
pipelines (keys of their own) and waits: 8 bytes per element. Variants:
  ops         ed.gelu(ed.add(ed.mul(x, w), b)): three pyew.dask ops, fused into one formula per chunk
  map_blocks  ed.map_blocks(f, x), f = lambda c: pyew.gelu(pyew.add(pyew.mul(c, w), b))
  cupy        CuPy's own ops on CuPy chunks (x * w + b, then 0.5 v (1 + erf(v / sqrt 2))), for scale
  none        each chunk passed through: dask's own cost of a timed repeat, the floor
Seconds (median of --repeats), GB/s and the speed-up over the fewest GPUs go to --out (dask.json, .md).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

from .cli import unwritable

COLS = 4096


def _pipeline(variant: str, x, w, b):
    import pyew.dask as ed
    if variant == "ops":
        return ed.gelu(ed.add(ed.mul(x, w), b))
    if variant == "map_blocks":
        def f(c):
            import pyew
            return pyew.gelu(pyew.add(pyew.mul(c, w), b))
        return ed.map_blocks(f, x)
    return x.map_blocks(_cupy_gelu_affine, w, b, dtype=x.dtype) if variant == "cupy" else x


def _cupy_gelu_affine(c, w, b):
    import cupy
    from cupyx.scipy.special import erf
    v = c * cupy.asarray(w) + cupy.asarray(b)
    return 0.5 * v * (1 + erf(v * (1 / math.sqrt(2))))


def _check(client, y, x, w, b, strict: bool) -> float:
    """Largest error of the result's first block from a float64 reference, relative to the result
    plus a hundredth of how far float32's rounding of x w + b can move it: that rounding (once,
    fused, or twice, op by op) is about 1e-7 of |x w| + |b|, times gelu's slope there, which near a
    cancelling sum is far more than 1e-4 of the result. Strict: at most 1e-4."""
    import numpy as np
    first = (slice(0, min(256, x.chunks[0][0])), slice(None))
    got, src = (a.get() if type(a).__module__.startswith("cupy") else a
                for a in client.compute([y[first], x[first]], sync=True))
    xw = src.astype(np.float64) * w
    v = xw + b
    cdf = 0.5 * np.vectorize(math.erfc)(-v / math.sqrt(2))     # 1 + erf(v / sqrt 2) is 0 below v = -8.3
    ref = v * cdf
    slope = np.abs(cdf + v * np.exp(-0.5 * v * v) / math.sqrt(2 * math.pi))
    err = float(np.max(np.abs(got - ref) / (np.abs(ref) + 1e-2 * slope * (np.abs(xw) + np.abs(b)) + 1e-30)))
    if strict and not err < 1e-4:
        raise AssertionError(f"dask pipeline result off by {err:.2e} of the result and its rounding's reach "
                             "from the float64 reference")
    return err


def _run_gpus(k: int, args, log) -> list[dict]:
    import dask.array as da
    import numpy as np
    from dask_cuda import LocalCUDACluster
    from distributed import Client, wait
    rows, rows_per_chunk, rng, out = args.elements // COLS, max(1, args.chunk // COLS), np.random.default_rng(0), []
    w, b = (rng.standard_normal(COLS).astype(np.float32) for _ in range(2))
    with LocalCUDACluster(CUDA_VISIBLE_DEVICES=list(range(k)), threads_per_worker=args.threads, dashboard_address=None,
                          memory_limit=0, device_memory_limit=0) as cluster, Client(cluster) as client:
        client.wait_for_workers(k)
        x = da.random.default_rng(1).standard_normal((rows, COLS), chunks=(rows_per_chunk, COLS), dtype=np.float32)
        xs = {"numpy": x.persist()}
        wait(xs["numpy"])
        held = [sum(x.name in str(key) for key in keys) for keys in client.has_what().values()]
        log(f"{k} GPU(s): chunks of x per worker {held}")
        if "cupy" in args.chunks:
            import cupy
            xs["cupy"] = xs["numpy"].map_blocks(cupy.asarray).persist()
            wait(xs["cupy"])
        for kind, variant in [(c, v) for c in args.chunks for v in args.variants     # cupy and none: CuPy chunks only
                              if c == "cupy" or v not in ("cupy", "none")]:
            times, err = [], None
            for rep in range(args.repeats + 1):          # the first is a warm-up
                t0 = time.perf_counter()
                # keys of their own: a repeat must not find the last one's result still held
                ys = [_pipeline(variant, xs[kind], w, b) for _ in range(args.in_flight)]
                ys = client.persist([y.map_blocks(lambda c: c, dtype=y.dtype, meta=y._meta,
                                                  name=f"bench-{uuid.uuid4()}") for y in ys])
                wait(ys)
                if kind == "cupy":                      # a CuPy task returns once its kernels are queued
                    client.run(lambda: __import__("cupy").cuda.runtime.deviceSynchronize())
                times.append((time.perf_counter() - t0) / args.in_flight)
                if rep == 0 and variant != "none":
                    err = _check(client, ys[0], xs[kind], w, b, strict=variant != "cupy")
                del ys
            med = statistics.median(times[1:])
            row = {"gpus": k, "chunks": kind, "variant": variant, "seconds": med, "best": min(times[1:]),
                   "gbps": 8 * rows * COLS / med / 1e9, "elements": rows * COLS, "chunk": rows_per_chunk * COLS,
                   "repeats": args.repeats, "in_flight": args.in_flight, "max_error": err}
            log(f"{k} GPU(s)  {kind:<5} {variant:<10} {med:.3f} s  {row['gbps']:.1f} GB/s")
            out.append(row)
        log(f"workers on GPUs {sorted(client.run(lambda: __import__('pyew').device_info()['pci_bus_id']).values())}")
    return out


def _count(s: str) -> int:
    base, _, exp = s.partition("**")
    try:
        b, e = int(base), int(exp) if exp else 1
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r} is not a count (an int, or a power such as 2**26)") from None
    # the power computed only where its size is known small: 10**999999999 would take minutes
    if e < 0 or (abs(b).bit_length() - 1) * e > 64 or abs(b ** e) > 1 << 64:
        raise argparse.ArgumentTypeError(f"{s!r} is not a count of at most 2**64 elements")
    return b ** e


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pyew bench-dask", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add, names = ap.add_argument, lambda s: [v for v in s.split(",") if v]      # argparse converts string defaults
    add("--gpus", type=lambda s: [int(g) for g in names(s)], default="1,2", help="GPU counts, e.g. 1,2,4 (default 1,2)")
    add("--elements", type=_count, default=1 << 31, help="elements of x (default 2**31)")
    add("--chunk", type=_count, default=1 << 26, help="elements per chunk (default 2**26)")
    add("--chunks", type=names, default="numpy,cupy", help="chunk kinds: numpy, cupy (default both)")
    add("--variants", type=names, default="ops,map_blocks,cupy,none", help="ops, map_blocks, cupy, none (default all)")
    add("--repeats", type=int, default=5, help="timed repeats of each case (default 5)")
    add("--threads", type=int, default=1, help="threads per worker (default 1)")
    add("--in-flight", type=int, default=1,
        help="pipelines submitted at once per timed repeat; the figure is per pipeline (default 1)")
    add("--out", type=Path, default="bench-out", help="folder for dask.json and dask.md (default bench-out)")
    args = ap.parse_args(argv)
    if args.in_flight < 1 or args.repeats < 1 or args.threads < 1:
        ap.error("--in-flight, --repeats and --threads must be at least 1")
    if not args.gpus or min(args.gpus) < 1:
        ap.error(f"--gpus: GPU counts of at least 1, e.g. 1,2 (got {','.join(map(str, args.gpus)) or 'none'})")
    if args.chunk < 1 or args.elements < COLS:
        ap.error(f"--elements must be at least {COLS} (one row of x) and --chunk at least 1")
    if why := unwritable(args.out):       # a bad --out fails now, not after the whole run
        ap.error(f"--out {args.out}: {why}")
    for flag, given, known in (("--chunks", args.chunks, ("numpy", "cupy")),
                               ("--variants", args.variants, ("ops", "map_blocks", "cupy", "none"))):
        bad = [v for v in given if v not in known]
        if bad or not given:
            ap.error(f"{flag}: {', '.join(bad) or 'nothing'} given; choose from {', '.join(known)}")
    try:
        import dask_cuda  # noqa: F401
        import distributed  # noqa: F401
    except ImportError as e:
        print(f"python -m pyew bench-dask needs dask, distributed and dask-cuda ({e}): pip install 'pyew[dask]'",
              file=sys.stderr)
        return 2
    import pyew
    have = pyew.device_count()
    if max(args.gpus) > have:
        print(f"python -m pyew bench-dask: asked for {max(args.gpus)} GPUs, this machine has {have}", file=sys.stderr)
        return 2
    rows = [r for k in args.gpus for r in _run_gpus(k, args, lambda msg: print(msg, flush=True))]
    base = {(r["chunks"], r["variant"]): r["gbps"] for r in rows if r["gpus"] == min(args.gpus)}
    for r in rows:
        r["speedup"] = r["gbps"] / base[(r["chunks"], r["variant"])]         # every variant runs on the fewest GPUs
    meta = {"device": pyew.device_info(0)["name"], "gpus_on_machine": have, "cpus": os.cpu_count(),
            "date": time.strftime("%Y-%m-%d"), "command": "python -m pyew bench-dask " + " ".join(argv or sys.argv[1:])}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "dask.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    text = "\n".join([f"{meta['device']} x{have}, {meta['cpus']} CPUs, {meta['date']}: `{meta['command']}`", "",
                      f"{args.in_flight} pipeline(s) in flight per repeat", "",
                      f"| GPUs | chunks | variant | s (median) | GB/s | vs {min(args.gpus)} GPU(s) |", "|---" * 6 + "|"]
                     + [f"| {r['gpus']} | {r['chunks']} | {r['variant']} | {r['seconds']:.3f} | {r['gbps']:.1f} | "
                        f"{r['speedup']:.2f}x |" for r in rows])
    (args.out / "dask.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
