"""One-off experiment (2026-11-27): a formula's and map_blocks' time per chunk inside dask tasks (the worker's functions wrapped with timers),
and with the worker's switch interval at 0.5 ms: python benchmarks/experiments/dask_in_task.py"""
# ruff: noqa  (a one-off script, kept as it ran)
import time, statistics, uuid
import numpy as np

def instrument():
    import time, threading
    from pyew import dask as ed
    from pyew import transfer
    log = []
    ed._log = log
    for name in ("_run_formula", "_apply_func"):
        real = getattr(ed, name)
        def wrapped(*a, _real=real, _name=name, **k):
            t = time.perf_counter(); r = _real(*a, **k); log.append((_name, time.perf_counter() - t, threading.get_ident())); return r
        setattr(ed, name, wrapped)
    real_sc = transfer.stream_call
    def sc(*a, **k):
        t = time.perf_counter(); r = real_sc(*a, **k); log.append(("stream_call", time.perf_counter() - t, 0)); return r
    transfer.stream_call = sc
    return True

def fetch():
    from pyew import dask as ed
    out = {}
    for n, d, _ in ed._log:
        out.setdefault(n, []).append(d)
    ed._log.clear()
    import statistics
    return {n: (len(v), round(statistics.median(v) * 1e3, 2)) for n, v in out.items()}

if __name__ == "__main__":
    import dask.array as da
    from dask_cuda import LocalCUDACluster
    from distributed import Client, wait
    import pyew.dask as ed, pyew
    with LocalCUDACluster(n_workers=1, threads_per_worker=1, dashboard_address=None, memory_limit=0, device_memory_limit=0) as cluster, Client(cluster) as client:
        client.run(instrument)
        rows = (1 << 29) // 4096
        x = da.random.default_rng(1).standard_normal((rows, 4096), chunks=(16384, 4096), dtype=np.float32).persist()
        wait(x)
        rng = np.random.default_rng(0)
        w = rng.standard_normal(4096).astype(np.float32); b = rng.standard_normal(4096).astype(np.float32)
        def ops(): return ed.gelu(ed.add(ed.mul(x, w), b))
        def mb():
            def f(c):
                return pyew.gelu(pyew.add(pyew.mul(c, w), b))
            return ed.map_blocks(f, x)
        def mbf():
            def g(c):
                return pyew.evaluate("gelu(c * w + b)", local_dict={"c": c, "w": w, "b": b})
            return ed.map_blocks(g, x)
        def switch(v):
            import sys; sys.setswitchinterval(v); return sys.getswitchinterval()
        for name, mk in (("ops", ops), ("map_blocks", mb), ("map_blocks+evaluate", mbf), ("ops", ops), ("map_blocks", mb), ("map_blocks+evaluate", mbf)):
            ts = []
            for r in range(4):
                t = time.perf_counter()
                y = mk()
                y = client.persist(y.map_blocks(lambda c: c, dtype=y.dtype, meta=y._meta, name=f"bench-{uuid.uuid4()}"))
                wait(y); ts.append(time.perf_counter() - t); del y
            print(name, [round(v, 3) for v in ts], "in worker:", client.run(fetch), flush=True)
        print("switch interval", client.run(switch, 0.0005))
        for name, mk in (("ops", ops), ("map_blocks", mb)):
            ts = []
            for r in range(4):
                t = time.perf_counter()
                y = mk()
                y = client.persist(y.map_blocks(lambda c: c, dtype=y.dtype, meta=y._meta, name=f"bench-{uuid.uuid4()}"))
                wait(y); ts.append(time.perf_counter() - t); del y
            print("0.5 ms switch:", name, [round(v, 3) for v in ts], "in worker:", client.run(fetch), flush=True)
