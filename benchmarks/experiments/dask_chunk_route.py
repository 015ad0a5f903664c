"""One-off experiment (2026-11-27): pyew.dask on one dask-cuda worker, 2^30 float32 in chunks of 2^26 with row biases: ops, one op and map_blocks,
5 repeats with keys of their own (the first a warm-up), medians. Run in alternating processes, the former tree's pyew on
PYTHONPATH for "old": python benchmarks/experiments/dask_chunk_route.py new|old"""
# ruff: noqa  (a one-off script, kept as it ran)
import time, statistics, uuid, sys
import numpy as np
if __name__ == "__main__":
    tag = sys.argv[1]
    import dask.array as da
    from dask_cuda import LocalCUDACluster
    from distributed import Client, wait
    import pyew.dask as ed, pyew
    with LocalCUDACluster(n_workers=1, threads_per_worker=1, dashboard_address=None, memory_limit=0, device_memory_limit=0) as cluster, Client(cluster) as client:
        rows = (1 << 30) // 4096
        x = da.random.default_rng(1).standard_normal((rows, 4096), chunks=(16384, 4096), dtype=np.float32).persist()
        wait(x)
        rng = np.random.default_rng(0)
        w = rng.standard_normal(4096).astype(np.float32); b = rng.standard_normal(4096).astype(np.float32)
        def ops(): return ed.gelu(ed.add(ed.mul(x, w), b))
        def one(): return ed.sigmoid(x)
        def mb():
            def f(c):
                return pyew.gelu(pyew.add(pyew.mul(c, w), b))
            return ed.map_blocks(f, x)
        for name, mk in (("ops", ops), ("sigmoid", one), ("map_blocks", mb)):
            ts = []
            for r in range(5):
                t = time.perf_counter()
                y = mk()
                y = client.persist(y.map_blocks(lambda c: c, dtype=y.dtype, meta=y._meta, name=f"bench-{uuid.uuid4()}"))
                wait(y); ts.append(time.perf_counter() - t); del y
            med = statistics.median(ts[1:])
            print(tag, name, f"{med:.3f} s  {8 * rows * 4096 / med / 1e9:.1f} GB/s", [round(v, 3) for v in ts], flush=True)
