"""What bounds numpy chunks on a host feeding several GPUs: each step of a numpy-in, numpy-out
pipeline on 2^26-float32 chunks, in one process per GPU as Dask's workers run, first with one
process, then with one per GPU at once. Prints GB/s per process for each step.

    PYTHONPATH=. python benchmarks/host_staging.py [--gpus 2]
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import time
from queue import Empty

N = 1 << 26
CHUNKS = 6


def _worker(gpu: int, barrier, queue) -> None:
    os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)
    import numpy as np

    import pyew
    from pyew import runtime as rt
    from pyew.pinned import pinned_or_empty

    chunks = [np.random.default_rng(i).standard_normal(N, dtype=np.float32) for i in range(CHUNKS)]
    touched = [np.ones(N, np.float32) for _ in range(CHUNKS)]
    locked = [pyew.empty_pinned(N) for _ in range(CHUNKS)]
    d = pyew.asarray(chunks[0])

    def pipe(c, out=None):
        return pyew.gelu(pyew.add(pyew.mul(pyew.asarray(c), 1.5), 0.25)).get(out=out)

    pipe(chunks[0])                                      # warm-up
    pipe(chunks[0], touched[0])
    pipe(chunks[0], pinned_or_empty((N,), np.float32))   # page-locks the pool's block, then frees it to the pool
    res = {}

    def timed(name, fn, nbytes):
        barrier.wait()
        t0 = time.perf_counter()
        for i in range(CHUNKS):
            fn(i)
        rt.synchronize()
        res[name] = round(nbytes * CHUNKS / (time.perf_counter() - t0) / 1e9, 1)

    timed("pipeline, new result", lambda i: pipe(chunks[i]), 8 * N)
    timed("pipeline, result into touched memory", lambda i: pipe(chunks[i], touched[i]), 8 * N)
    timed("pipeline, result into pinned_or_empty", lambda i: pipe(chunks[i], pinned_or_empty((N,), np.float32)),
          8 * N)
    timed("upload, staged", lambda i: pyew.asarray(chunks[i]), 4 * N)
    timed("upload from empty_pinned", lambda i: pyew.asarray(locked[i]), 4 * N)
    timed("download to a new array", lambda i: d.get(), 4 * N)
    timed("download to touched memory", lambda i: d.get(out=touched[i]), 4 * N)
    timed("download to empty_pinned", lambda i: d.get(out=locked[i]), 4 * N)
    timed("np.copyto into a new array, 1 thread", lambda i: np.copyto(np.empty(N, np.float32), chunks[i]), 4 * N)
    timed("np.copyto into touched memory, 1 thread", lambda i: np.copyto(touched[i], chunks[i]), 4 * N)
    queue.put((gpu, res))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", type=int, default=2, help="processes at once in the second round (default 2)")
    args = ap.parse_args()
    ctx = mp.get_context("spawn")
    for p in sorted({1, args.gpus}):
        barrier, queue = ctx.Barrier(p), ctx.Queue()
        procs = [ctx.Process(target=_worker, args=(g, barrier, queue)) for g in range(p)]
        for proc in procs:
            proc.start()
        results = []
        while len(results) < p:
            try:
                results.append(queue.get(timeout=2))
            except Empty:
                if any(proc.exitcode not in (None, 0) for proc in procs):
                    for proc in procs:
                        proc.kill()
                    raise SystemExit("host_staging: a worker process failed (its error is above)") from None
        for proc in procs:
            proc.join()
        for g, r in sorted(results):
            print(f"{p} process(es), GPU {g}: {json.dumps(r)}", flush=True)


if __name__ == "__main__":
    main()
