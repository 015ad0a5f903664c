"""`python -m pyew bench-dask`: the float32 pipeline y = gelu(x * w + b) over a dask array, on 1, 2,
4, ... GPUs with dask-cuda's LocalCUDACluster (one worker process per GPU), with the chunks on the
host (numpy, through each worker's transfer engine) and on the GPUs (CuPy).

x is (N / 4096, 4096) float32 in row blocks of --chunk elements, w and b are 4096-vectors (a
per-feature scale and bias, broadcast over the rows). x is generated and persisted on the workers
first; a timed repeat is `pipeline(x).persist()` and the wait for it, so the figure is the
pipeline's: read x, write y (8 bytes per element; w and b are negligible). With --in-flight K a
timed repeat submits K copies of the pipeline at once (each with keys of its own) and the figure is
the time per copy: the throughput of a cluster kept busy, where Dask's fixed cost of one persist
overlaps the work of the others. Variants:

  ops         ed.gelu(ed.add(ed.mul(x, w), b)): three pyew ops per chunk, fused by dask into one task
  map_blocks  ed.map_blocks(f, x), f = lambda c: pyew.gelu(pyew.add(pyew.mul(c, w), b)): one
              upload and one download per chunk for numpy chunks
  cupy        CuPy's own ops on CuPy chunks (x * w + b, then 0.5 v (1 + erf(v / sqrt 2))), for scale
  none        no op: each chunk passed through (dask's own cost of one timed repeat, the floor)

The table gives seconds (median of --repeats), GB/s, and the speed-up over the same variant on one
GPU. Results go to --out as JSON and Markdown.
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
    if variant == "cupy":
        return x.map_blocks(_cupy_gelu_affine, w, b, dtype=x.dtype)
    if variant == "none":
        return x
    raise ValueError(variant)


def _cupy_gelu_affine(c, w, b):
    import cupy
    from cupyx.scipy.special import erf
    v = c * cupy.asarray(w) + cupy.asarray(b)
    return 0.5 * v * (1 + erf(v * (1 / math.sqrt(2))))


def _run_gpus(k: int, args, log) -> list[dict]:
    import dask.array as da
    import numpy as np
    from dask_cuda import LocalCUDACluster
    from distributed import Client, wait

    rows_per_chunk = max(1, args.chunk // COLS)
    rows = args.elements // COLS
    rng = np.random.default_rng(0)
    w = rng.standard_normal(COLS).astype(np.float32)
    b = rng.standard_normal(COLS).astype(np.float32)
    out = []
    cluster = LocalCUDACluster(CUDA_VISIBLE_DEVICES=list(range(k)), threads_per_worker=args.threads,
                               dashboard_address=None, memory_limit=0, device_memory_limit=0)
    with cluster, Client(cluster) as client:
        client.wait_for_workers(k)
        x = da.random.default_rng(1).standard_normal((rows, COLS), chunks=(rows_per_chunk, COLS), dtype=np.float32)
        x = x.persist()
        wait(x)
        xs = {"numpy": x}
        held = client.has_what()
        per_worker = sorted(sum(1 for key in keys if x.name in str(key)) for keys in held.values())
        log(f"{k} GPU(s): chunks of x per worker {per_worker}")
        if "cupy" in args.chunks:
            import cupy
            xc = x.map_blocks(cupy.asarray).persist()
            wait(xc)
            xs["cupy"] = xc
        nbytes = 2 * rows * COLS * 4
        for kind in args.chunks:
            for variant in args.variants:
                if variant == "cupy" and kind != "cupy" or variant == "none" and kind != "cupy":
                    continue
                times = []
                err = None
                for rep in range(args.repeats + 1):          # the first is a warm-up
                    t0 = time.perf_counter()
                    # keys of their own: a repeat must not find the last one's result still held
                    ys = [_pipeline(variant, xs[kind], w, b) for _ in range(args.in_flight)]
                    ys = client.persist([y.map_blocks(_same, dtype=y.dtype, meta=y._meta,
                                                      name=f"bench-{uuid.uuid4().hex}") for y in ys])
                    wait(ys)
                    if kind == "cupy":                      # a CuPy task returns once its kernels are queued
                        client.run(_synchronize_gpu)
                    dt = (time.perf_counter() - t0) / args.in_flight
                    if rep == 0 and variant != "none":
                        err = _check(client, ys[0], xs[kind], w, b, strict=variant != "cupy")
                    del ys
                    if rep:
                        times.append(dt)
                med = statistics.median(times)
                row = {"gpus": k, "chunks": kind, "variant": variant, "seconds": med, "best": min(times),
                       "gbps": nbytes / med / 1e9, "elements": rows * COLS, "chunk": rows_per_chunk * COLS,
                       "repeats": args.repeats, "in_flight": args.in_flight, "max_rel_error": err}
                log(f"{k} GPU(s)  {kind:<5} {variant:<10} {med:.3f} s  {row['gbps']:.1f} GB/s")
                out.append(row)
        devices = client.run(lambda: __import__("pyew").device_info()["pci_bus_id"])
        log(f"workers on GPUs {sorted(devices.values())}")
    return out


def _same(c):
    return c


def _synchronize_gpu() -> None:
    import cupy
    cupy.cuda.runtime.deviceSynchronize()


def _check(client, y, x, w, b, strict: bool) -> float:
    """The first block of the result against a float64 numpy reference: its largest relative error
    (pyew's variants must be within 1e-4; CuPy's naive erf formula is reported, not checked)."""
    import numpy as np
    first = (slice(0, min(256, x.chunks[0][0])), slice(None))
    got, src = client.compute([y[first], x[first]], sync=True)
    got, src = _host(got), _host(src)
    v = ((src * w).astype(np.float32) + b).astype(np.float64)     # rounded as the float32 ops round
    from math import erf
    ref = 0.5 * v * (1 + np.vectorize(erf)(v / math.sqrt(2)))
    err = float(np.max(np.abs(got - ref) / (np.abs(ref) + 1e-5)))
    if strict and not err < 1e-4:
        raise AssertionError(f"dask pipeline result off by {err:.2e} (relative) from the float64 reference")
    return err


def _host(a):
    mod = type(a).__module__.split(".")[0]
    if mod == "cupy":
        import cupy
        return cupy.asnumpy(a)
    return a


def _count(s: str) -> int:
    """An element count: 1048576 or 2**20."""
    base, _, exp = s.partition("**")
    try:
        return int(base) ** int(exp) if exp else int(base)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r} is not a count (an int, or a power such as 2**26)") from None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pyew bench-dask", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", default="1,2", help="GPU counts to run, e.g. 1,2,4,8 (default 1,2)")
    ap.add_argument("--elements", type=_count, default=1 << 31, help="elements of x (default 2**31)")
    ap.add_argument("--chunk", type=_count, default=1 << 26, help="elements per chunk (default 2**26)")
    ap.add_argument("--chunks", default="numpy,cupy", help="chunk kinds: numpy, cupy (default both)")
    ap.add_argument("--variants", default="ops,map_blocks,cupy,none",
                    help="ops, map_blocks, cupy, none (default all)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1, help="threads per worker (default 1)")
    ap.add_argument("--in-flight", type=int, default=1,
                    help="pipelines submitted at once per timed repeat; the figure is per pipeline (default 1)")
    ap.add_argument("--out", default="bench-out", help="folder for dask.json and dask.md")
    args = ap.parse_args(argv)
    if args.in_flight < 1 or args.repeats < 1:
        ap.error("--in-flight and --repeats must be at least 1")
    args.chunks = [c for c in args.chunks.split(",") if c]
    args.variants = [v for v in args.variants.split(",") if v]
    gpus = [int(g) for g in args.gpus.split(",")]
    try:
        import dask_cuda  # noqa: F401
        import distributed  # noqa: F401
    except ImportError as e:
        print(f"python -m pyew bench-dask needs dask, distributed and dask-cuda ({e}): pip install 'pyew[dask]'",
              file=sys.stderr)
        return 2
    import pyew
    have = pyew.device_count()
    if max(gpus) > have:
        print(f"python -m pyew bench-dask: asked for {max(gpus)} GPUs, this machine has {have}", file=sys.stderr)
        return 2

    def log(msg):
        print(msg, flush=True)

    rows = []
    for k in gpus:
        rows += _run_gpus(k, args, log)
    first = min(gpus)
    base = {(r["chunks"], r["variant"]): r["gbps"] for r in rows if r["gpus"] == first}
    for r in rows:
        b = base.get((r["chunks"], r["variant"]))
        r["speedup"] = r["gbps"] / b if b else None
    info = pyew.device_info(0)
    meta = {"device": info["name"], "gpus_on_machine": have, "cpus": os.cpu_count(),
            "date": time.strftime("%Y-%m-%d"), "command": "python -m pyew bench-dask " + " ".join(argv or sys.argv[1:])}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "dask.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    lines = [f"{meta['device']} x{have}, {meta['cpus']} CPUs, {meta['date']}: `{meta['command']}`", "",
             f"{args.in_flight} pipeline(s) in flight per repeat", "",
             f"| GPUs | chunks | variant | s (median) | GB/s | vs {first} GPU(s) |", "|---|---|---|---|---|---|"]
    for r in rows:
        sp = f"{r['speedup']:.2f}x" if r["speedup"] else "-"
        lines.append(f"| {r['gpus']} | {r['chunks']} | {r['variant']} | {r['seconds']:.3f} | {r['gbps']:.1f} | {sp} |")
    text = "\n".join(lines)
    (out / "dask.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
